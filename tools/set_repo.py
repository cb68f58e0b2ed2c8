"""Point the course at a repository and a release: ``python -m tools.set_repo OWNER/NAME [REF]``.

Rewrites ``[tool.course]`` in pyproject.toml and README.md's links (``make set-repo`` then
cleans the notebooks). ``REF`` (default: ``v<version>``) is a release tag or a commit.
"""

import re
import sys

from tools.course import ROOT, release_problem, version

README_LINK_RE = re.compile(r"(https://colab\.research\.google\.com/github/|https://github\.com/)"
                            r"[A-Za-z0-9-]+/[A-Za-z0-9._-]+?(/blob/[^/\s]+/|\.git@[^\s\"')`]+)")


def set_repo(text: str, repository: str, ref: str) -> str:
    """pyproject.toml ``text`` with the course's repository and release replaced."""
    if not re.match(r"^[A-Za-z0-9-]+/[A-Za-z0-9._-]+$", repository):
        raise ValueError(f"REPO={repository!r} is invalid: expected owner/name")
    if (why := release_problem(ref)) is not None:
        raise ValueError(why.replace("release=", "REF=", 1))
    section = re.search(r"(?ms)^\[tool\.course\]\n.*?(?=^\[|\Z)", text)
    if not section:
        raise ValueError("pyproject.toml has no [tool.course] section")
    body = re.sub(r'(?m)^repository = ".*"$', f'repository = "{repository}"', section[0])
    body, count = re.subn(r'(?m)^release = ".*"$', f'release = "{ref}"', body)
    if count != 1:
        raise ValueError("pyproject.toml's [tool.course] has no release = \"...\" line")
    return text[: section.start()] + body + text[section.end() :]


def rewrite_links(text: str, repository: str, ref: str) -> str:
    def replace(match: re.Match) -> str:
        tail = f"/blob/{ref}/" if match[2].startswith("/blob/") else f".git@{ref}"
        return f"{match[1]}{repository}{tail}"

    return README_LINK_RE.sub(replace, text)


def main(argv: list[str]) -> int:
    if not 1 <= len(argv) <= 2:
        print(__doc__.splitlines()[0], file=sys.stderr)
        return 2
    path, readme = ROOT / "pyproject.toml", ROOT / "README.md"
    ref = argv[1] if len(argv) > 1 else f"v{version()}"
    try:
        path.write_text(set_repo(path.read_text(), argv[0], ref))
    except ValueError as error:
        print(error, file=sys.stderr)
        return 2
    readme.write_text(rewrite_links(readme.read_text(), argv[0], ref))
    print(f"course repository: {argv[0]}, release {ref}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
