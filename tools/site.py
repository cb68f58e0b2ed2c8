"""Build the course site: the executed notebooks as a static Sphinx site, README.md its home.

It executes nothing; pages are staged in ``<out>-src``, links to other files go to GitHub.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat

from helpers import workdirs
from helpers.devices import DEVICE_MIME
from helpers.exercises import EXERCISE_MIME
from tools.course import BUILD, ROOT, notebook_paths, settings
from tools.run_notebooks import first_error

PAGES = [Path("docs/instructor_notes.md")]  # markdown pages after the notebooks, if present
IMAGES = Path("docs/images")  # pictures the pages show (README's first screen), copied as they are
LINK = re.compile(r"(\]\()([^)\s]+)")  # [text](target) or ![alt](target)
SITE_MARKER = ".course_site"  # in every folder this tool makes: the only ones it deletes
SITE_MARKER_TEXT = "Made by `python -m tools.site`, which replaces this folder when it runs.\n"


class SiteError(Exception):
    """Why the site cannot be built, in one line."""


def slug(heading: str) -> str:
    """A heading's anchor on the site (and GitHub): lower case, no punctuation, hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def jupyter_anchors(markdown: str) -> dict[str, str]:
    """Jupyter's anchor of each heading (its text, spaces as hyphens) -> the site's anchor."""
    headings = re.findall(r"^#{1,6}\s+(.+?)\s*$", markdown, flags=re.MULTILINE)
    return {h.replace(" ", "-"): slug(h) for h in headings}


def rewrite_links(text: str, page: Path, pages: set[Path], repository: str, ref: str,
                  anchors: dict[str, str] | None = None) -> str:
    """Point relative links of ``page`` that are not site ``pages`` at GitHub; fix ``anchors``."""

    def fix(match: re.Match) -> str:
        target = match.group(2)
        if target.startswith("#") and anchors and target[1:] in anchors:
            return match.group(1) + "#" + anchors[target[1:]]
        if re.match(r"[a-z][a-z0-9+.-]*:|#|/", target):
            return match.group(0)
        path, _, anchor = target.partition("#")
        resolved = Path(os.path.normpath(page.parent / path))
        if resolved in pages or str(resolved).startswith(".."):
            return match.group(0)
        url = f"https://github.com/{repository}/blob/{ref}/{resolved.as_posix()}"
        return match.group(1) + url + (f"#{anchor}" if anchor else "")

    return LINK.sub(fix, text)


def home_page(readme: str, notebooks: list[Path], pages: list[Path], kept=(), **repo) -> str:
    """README.md with its links fixed (but to the files ``kept``), then the hidden navigation."""
    all_pages = {Path("notebooks") / p.name for p in notebooks} | set(pages) | set(kept)
    text = rewrite_links(readme, Path("README.md"), all_pages, **repo)
    nav = "\n".join(f"notebooks/{p.stem}" for p in notebooks)
    text += f"\n\n```{{toctree}}\n:hidden:\n:caption: Notebooks\n\n{nav}\n```\n"
    if pages:
        others = "\n".join(p.with_suffix("").as_posix() for p in pages)
        text += f"\n```{{toctree}}\n:hidden:\n:caption: For instructors\n\n{others}\n```\n"
    return text


def stage(executed: Path, source: Path, notebooks: list[Path] | None = None) -> list[str]:
    """Fill ``source`` (emptied first) with the site's pages; returns notices worth a line."""
    notebooks = notebook_paths() if notebooks is None else notebooks
    if missing := [p.name for p in notebooks if not (executed / p.name).is_file()]:
        which = "notebooks" if len(missing) == len(notebooks) else ", ".join(missing)
        raise SiteError(f"{executed} has no executed {which}: run `make run` first "
                        "(or `make site EXECUTED=build/test-compat/executed` after `make test`)")
    repo, pages = settings(), [p for p in PAGES if (ROOT / p).is_file()]
    all_pages = {Path("notebooks") / p.name for p in notebooks} | set(pages)
    replace(source)
    (source / "notebooks").mkdir(parents=True)
    (source / SITE_MARKER).write_text(SITE_MARKER_TEXT)
    notices = []
    for path in notebooks:
        copy = executed / path.name
        if path.stat().st_mtime > copy.stat().st_mtime:
            notices.append(f"{path.name} changed after it was executed: `make run` refreshes it")
        nb = nbformat.read(copy, as_version=4)
        if (cell := first_error(nb))[0]:
            notices.append(f"{path.name} stopped with an error in cell {cell[0]}: {cell[1]}")
        for output in (o for c in nb.cells for o in c.get("outputs", [])):
            for record in (DEVICE_MIME, EXERCISE_MIME):  # for the tools: text and HTML stay
                output.get("data", {}).pop(record, None)
        markdown = [c for c in nb.cells if c.cell_type == "markdown"]
        anchors = jupyter_anchors("\n".join(c.source for c in markdown))
        for c in markdown:
            c.source = rewrite_links(c.source, Path("notebooks") / path.name, all_pages, **repo,
                                     anchors=anchors)
        nbformat.write(nb, source / "notebooks" / path.name)
    pictures = sorted(p.relative_to(ROOT) for p in (ROOT / IMAGES).glob("*") if p.is_file())
    for path in [*pictures, *pages]:
        (source / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / path, source / path)
    for page in pages:
        text = rewrite_links((ROOT / page).read_text(encoding="utf-8"), page, all_pages, **repo)
        (source / page).write_text(text, encoding="utf-8")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    (source / "index.md").write_text(home_page(readme, notebooks, pages, pictures, **repo), "utf-8")
    return notices


def replace(folder: Path) -> None:
    """Delete ``folder`` if this tool made it (:data:`SITE_MARKER`) or it is empty, else raise."""
    if folder.is_dir() and ((folder / SITE_MARKER).is_file() or not any(folder.iterdir())):
        shutil.rmtree(folder)
    elif folder.exists():
        raise SiteError(f"{folder} exists and was not made by tools.site: nothing was deleted; "
                        "give --out a new folder, or one this tool made")


def build(executed: Path, out: Path) -> Path:
    """Stage the pages and run Sphinx; warnings fail the build. Returns ``out/index.html``."""
    if (why := "it is a link" if out.is_symlink() else workdirs.protected(out)) is not None:
        raise SiteError(f"--out {out}: {why}; nothing was deleted; give --out a folder of its own")
    out = out.resolve()
    source = out.with_name(out.name + "-src")
    for notice in stage(executed, source):
        print(f"note: {notice}", flush=True)
    replace(out)
    command = [sys.executable, "-m", "sphinx", "-b", "html", "-c", str(ROOT / "docs" / "site"),
               "-q", "-W", "--keep-going", "-d", str(source / ".doctrees"), str(source), str(out)]
    if subprocess.run(command).returncode:
        raise SiteError(f"sphinx-build failed (its messages are above): {' '.join(command)}")
    (out / SITE_MARKER).write_text(SITE_MARKER_TEXT)
    return out / "index.html"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--executed", type=Path, default=BUILD / "executed")
    parser.add_argument("--out", type=Path, default=BUILD / "site")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    try:
        index = build(args.executed, args.out)
    except SiteError as error:
        print(f"site: {error}", file=sys.stderr)
        return 2
    print(f"site: {index} built from {args.executed} in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
