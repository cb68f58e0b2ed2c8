"""Sphinx configuration of the course site. `make site` (tools/site.py) stages the pages and
builds with ``-c docs/site``: README.md as the home page, the executed notebooks in course
order, the instructor notes. Nothing here downloads anything or executes a notebook."""

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
with open(ROOT / "pyproject.toml", "rb") as f:
    COURSE = tomllib.load(f)["tool"]["course"]
REPOSITORY, BRANCH = COURSE["repository"], COURSE.get("branch", "main")

project = next(
    line[2:].strip() for line in (ROOT / "README.md").read_text().splitlines() if line[:2] == "# "
)
author = project
copyright = project  # noqa: A001 - Sphinx's name for it
extensions = ["myst_nb"]
exclude_patterns = ["_build", "**.ipynb_checkpoints"]

# The notebooks arrive executed (build/executed from `make run`): show those outputs.
nb_execution_mode = "off"
# myst-nb ranks image/gif for HTML already; said here so a theme or default change cannot
# turn notebook 04's progress animation back into "<IPython.core.display.Image object>".
nb_mime_priority_overrides = [("html", "image/gif", 60)]
nb_merge_streams = True
# links such as notebooks/05_survive_a_disconnect.ipynb#a-disconnect-for-real
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]

html_theme = "sphinx_book_theme"
html_title = project
html_last_updated_fmt = None
html_theme_options = {
    "repository_url": f"https://github.com/{REPOSITORY}",
    "repository_branch": BRANCH,
    "path_to_docs": "",
    "use_repository_button": True,
    "launch_buttons": {"colab_url": "https://colab.research.google.com"},
    "show_navbar_depth": 1,
    "home_page_in_toc": True,
}
