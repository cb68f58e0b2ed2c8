"""Prove that each notebook shows the code its lesson is about, in its own code cells.

    python -m tools.shown [--check] [NAME ...]

``notebooks/shown.toml`` lists, per notebook, the calls a learner must be able to read and copy
(``code``: outside comments and string literals) and the names that may sit in strings or shell
lines (``text``). A call hidden inside ``helpers`` does not count. Whitespace is ignored, and
``"a | b"`` accepts either form. Exit status 1 when something is missing.
"""

from __future__ import annotations

import argparse
import io
import re
import sys
import tokenize

import tomllib

from tools.course import NOTEBOOKS, notebook_json, notebook_paths

SHOWN_FILE = NOTEBOOKS / "shown.toml"
MAGIC_RE = re.compile(r"^\s*[%!]")


def code_only(source: str) -> str:
    """``source`` without comments and string literals; IPython magic and shell lines are kept
    as they are (they are code the learner runs)."""
    kept, python = [], []
    for line in source.splitlines():
        (kept if MAGIC_RE.match(line) else python).append(line)
    out = list(kept)
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO("\n".join(python) + "\n").readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return "\n".join(out + python)
    skip = {tokenize.COMMENT, tokenize.STRING}
    skip |= {getattr(tokenize, n) for n in ("FSTRING_START", "FSTRING_MIDDLE", "FSTRING_END")
             if hasattr(tokenize, n)}
    out.append(" ".join(t.string for t in tokens if t.type not in skip))
    return "\n".join(out)


def squeeze(text: str) -> str:
    return re.sub(r"\s+", "", text)


def missing(nb: dict, wanted: dict) -> list[str]:
    """The entries of ``wanted`` (``{"code": [...], "text": [...]}``) the notebook lacks."""
    cells = [c for c in nb.get("cells", []) if c.get("cell_type") == "code"]
    sources = ["".join(c.get("source", "")) for c in cells]
    code = squeeze("\n".join(code_only(s) for s in sources))
    text = squeeze("\n".join(sources))
    gaps = []
    for kind, haystack in (("code", code), ("text", text)):
        for entry in wanted.get(kind, []):
            options = [squeeze(o) for o in entry.split(" | ")]
            if not any(o in haystack for o in options):
                gaps.append(f"{kind}: {entry}")
    return gaps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="(the default) report only")
    parser.add_argument("names", nargs="*", help="notebook stems; default: all")
    args = parser.parse_args(argv)
    with open(SHOWN_FILE, "rb") as f:
        lists = tomllib.load(f)
    failed = 0
    paths = [p for p in notebook_paths() if not args.names or p.stem in args.names]
    for path in paths:
        if path.stem not in lists:
            print(f"{path.name}: no entry in {SHOWN_FILE.name}")
            failed += 1
            continue
        gaps = missing(notebook_json(path), lists[path.stem])
        failed += bool(gaps)
        for gap in gaps:
            print(f"{path.name}: its code cells do not show {gap}")
    print(f"shown: {len(paths) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
