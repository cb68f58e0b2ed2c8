"""Point the course at a repository and a release: ``python -m tools.set_repo OWNER/NAME [REF]``.

Rewrites ``[tool.course]`` in pyproject.toml (``repository``, ``release``) and the badge links
in README.md; ``make set-repo`` then runs ``tools.nbclean``, which rewrites every notebook's
badge and install URL from the setting. ``REF`` (default: ``v`` and pyproject.toml's version)
must be a release tag or a commit, never a branch: a branch moves under the learners' feet.
"""

from __future__ import annotations

import re
import sys

import tomllib

from tools.course import ROOT, release_problem

REPO_RE = re.compile(r"^[A-Za-z0-9-]+/[A-Za-z0-9._-]+$")


def set_repo(text: str, repository: str, ref: str) -> str:
    """Return pyproject.toml ``text`` with the course's repository and release replaced."""
    if not REPO_RE.match(repository):
        raise ValueError(f"REPO={repository!r} is invalid: expected owner/name")
    if (why := release_problem(ref)) is not None:
        raise ValueError(why.replace("release=", "REF=", 1))
    section = re.search(r"(?ms)^\[tool\.course\]\n.*?(?=^\[|\Z)", text)
    if not section:
        raise ValueError("pyproject.toml has no [tool.course] section")
    body = re.sub(r'(?m)^repository = ".*"$', f'repository = "{repository}"', section.group(0))
    body, count = re.subn(r'(?m)^release = ".*"$', f'release = "{ref}"', body)
    if count != 1:
        raise ValueError("pyproject.toml's [tool.course] has no release = \"...\" line")
    return text[: section.start()] + body + text[section.end() :]


README_LINK_RE = re.compile(
    r"(https://colab\.research\.google\.com/github/|https://github\.com/)"
    r"[A-Za-z0-9-]+/[A-Za-z0-9._-]+?(/blob/[^/\s]+/|\.git@[^\s\"')`]+)"
)


def rewrite_links(text: str, repository: str, ref: str) -> str:
    """Point README's Colab badges and install URLs at ``repository`` and ``ref``."""

    def replace(match: re.Match) -> str:
        tail = f"/blob/{ref}/" if match.group(2).startswith("/blob/") else f".git@{ref}"
        return f"{match.group(1)}{repository}{tail}"

    return README_LINK_RE.sub(replace, text)


def main(argv: list[str]) -> int:
    if not 1 <= len(argv) <= 2:
        print(__doc__.splitlines()[0], file=sys.stderr)
        return 2
    path = ROOT / "pyproject.toml"
    with open(path, "rb") as f:
        version = tomllib.load(f)["project"]["version"]
    repository, ref = argv[0], argv[1] if len(argv) > 1 else f"v{version}"
    try:
        path.write_text(set_repo(path.read_text(), repository, ref))
    except ValueError as error:
        print(error, file=sys.stderr)
        return 2
    readme = ROOT / "README.md"
    readme.write_text(rewrite_links(readme.read_text(), repository, ref))
    print(f"course repository: {repository}, release {ref}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
