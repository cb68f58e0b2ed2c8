"""Point the course at another repository: ``python -m tools.set_repo OWNER/NAME [BRANCH]``.

Rewrites ``[tool.course]`` in pyproject.toml; ``make set-repo`` then runs
``tools.nbclean``, which rewrites every badge and install URL from it.
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


def main(argv: list[str]) -> int:
    if not 1 <= len(argv) <= 2:
        print(__doc__.splitlines()[0], file=sys.stderr)
        return 2
    path = ROOT / "pyproject.toml"
    try:
        path.write_text(set_repo(path.read_text(), argv[0], argv[1] if len(argv) > 1 else "main"))
    except ValueError as error:
        print(error, file=sys.stderr)
        return 2
    print(f"course repository: {argv[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
