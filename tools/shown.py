"""Prove that each notebook shows the code its lesson is about, in its own code cells.

notebooks/shown.toml lists per notebook what its ``code`` (not comments) and ``text`` show.
"""

import argparse
import io
import re
import sys
import tokenize
import tomllib

from tools.course import NOTEBOOKS, notebook_json, notebook_paths

SHOWN_FILE = NOTEBOOKS / "shown.toml"
MAGIC_RE = re.compile(r"^\s*[%!]")
SKIPPED = {getattr(tokenize, name, tokenize.STRING)  # comments, strings, f-strings' pieces
           for name in ("COMMENT", "STRING", "FSTRING_START", "FSTRING_MIDDLE", "FSTRING_END")}


def code_only(source: str) -> str:
    """``source`` without comments and strings; IPython's magic and shell lines are kept."""
    kept = [line for line in source.splitlines() if MAGIC_RE.match(line)]
    python = "\n".join(line for line in source.splitlines() if not MAGIC_RE.match(line)) + "\n"
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(python).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return "\n".join([*kept, python])
    return "\n".join([*kept, " ".join(t.string for t in tokens if t.type not in SKIPPED)])


def missing(nb: dict, wanted: dict) -> list[str]:
    """The entries of ``wanted`` (``{"code": [...], "text": [...]}``) the notebook lacks."""
    sources = ["".join(c.get("source", "")) for c in nb.get("cells", [])
               if c.get("cell_type") == "code"]
    found = {"code": "\n".join(map(code_only, sources)), "text": "\n".join(sources)}
    found = {kind: re.sub(r"\s+", "", text) for kind, text in found.items()}  # no whitespace
    return [f"{kind}: {entry}" for kind, text in found.items() for entry in wanted.get(kind, [])
            if not any(re.sub(r"\s+", "", option) in text for option in entry.split(" | "))]


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    lists = tomllib.loads(SHOWN_FILE.read_text())
    paths = notebook_paths()
    failed = 0
    for path in paths:
        gaps = [f"{path.name}: its code cells do not show {gap}"
                for gap in missing(notebook_json(path), lists.get(path.stem, {}))]
        if path.stem not in lists:
            gaps = [f"{path.name}: no entry in {SHOWN_FILE.name}"]
        failed += bool(gaps)
        for gap in gaps:
            print(gap)
    print(f"shown: {len(paths) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
