"""Point the course at another repository: ``python -m tools.set_repo OWNER/NAME [BRANCH]``.

Rewrites ``[tool.course]`` in pyproject.toml and the badge links in README.md;
``make set-repo`` then runs ``tools.nbclean``, which rewrites every notebook's
badge and install URL from the setting.
"""

from __future__ import annotations

import re
import sys

from tools.course import ROOT

REPO_RE = re.compile(r"^[A-Za-z0-9-]+/[A-Za-z0-9._-]+$")


def set_repo(text: str, repository: str, branch: str) -> str:
    """Return pyproject.toml ``text`` with the course's repository and branch replaced."""
    if not REPO_RE.match(repository):
        raise ValueError(f"REPO={repository!r} is invalid: expected owner/name")
    if not re.match(r"^[A-Za-z0-9._/-]+$", branch):
        raise ValueError(f"BRANCH={branch!r} is invalid")
    section = re.search(r"(?ms)^\[tool\.course\]\n.*?(?=^\[|\Z)", text)
    if not section:
        raise ValueError("pyproject.toml has no [tool.course] section")
    body = re.sub(r'(?m)^repository = ".*"$', f'repository = "{repository}"', section.group(0))
    body = re.sub(r'(?m)^branch = ".*"$', f'branch = "{branch}"', body)
    return text[: section.start()] + body + text[section.end() :]


README_LINK_RE = re.compile(
    r"(https://colab\.research\.google\.com/github/|https://github\.com/)"
    r"[A-Za-z0-9-]+/[A-Za-z0-9._-]+?(/blob/[^/\s]+/|\.git@[^\s\"')`]+)"
)


def rewrite_links(text: str, repository: str, branch: str) -> str:
    """Point README's Colab badges and install URLs at ``repository`` and ``branch``."""

    def replace(match: re.Match) -> str:
        tail = f"/blob/{branch}/" if match.group(2).startswith("/blob/") else f".git@{branch}"
        return f"{match.group(1)}{repository}{tail}"

    return README_LINK_RE.sub(replace, text)


def main(argv: list[str]) -> int:
    if not 1 <= len(argv) <= 2:
        print(__doc__.splitlines()[0], file=sys.stderr)
        return 2
    repository, branch = argv[0], argv[1] if len(argv) > 1 else "main"
    path = ROOT / "pyproject.toml"
    try:
        path.write_text(set_repo(path.read_text(), repository, branch))
    except ValueError as error:
        print(error, file=sys.stderr)
        return 2
    readme = ROOT / "README.md"
    readme.write_text(rewrite_links(readme.read_text(), repository, branch))
    print(f"course repository: {argv[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
