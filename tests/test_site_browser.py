"""The built course site, opened in headless Chromium by Playwright: the home page is the
README with the notebooks in course order, and every notebook page renders with its title and
every figure its executed copy holds, loaded; notebook 04's page shows its GIF.

Run by `make site-test` (after `make test`), which builds the site and sets $COURSE_SITE.
Playwright drives the system's Chromium ($CHROMIUM, else chromium on PATH: Debian's package),
through ``executable_path``; it never downloads a browser of its own (`playwright install` is
never run). Every host but 127.0.0.1 is made unresolvable, so a page is checked as it works
offline. Without Chromium it skips with the reason, unless $COURSE_REQUIRE_BROWSER is set, as in
CI. Screenshots of the home page and the DCGAN page go to build/site-shots/.
"""

import functools
import http.server
import json
import os
import re
import shutil
import threading
from pathlib import Path

import pytest

from tools import course

pytestmark = pytest.mark.site

SHOTS = course.BUILD / "site-shots"
IMAGE_MIMES = ("image/png", "image/jpeg", "image/gif", "image/svg+xml")
# Chromium's flags: no sandbox (CI runs as root), and no background connections, which this
# machine's closed network refuses; no host but loopback resolves.
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--hide-scrollbars",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
]
# Waits for every image to load or fail (lazy ones are made eager), then reads the page.
READ_PAGE = """(async () => {
  const images = [...document.images];
  images.forEach(i => { i.loading = "eager"; });
  await Promise.all(images.map(i => i.complete ? null : new Promise(done => {
    i.addEventListener("load", done); i.addEventListener("error", done); setTimeout(done, 15000);
  })));
  const text = e => { const c = e.cloneNode(true);
    c.querySelectorAll(".headerlink").forEach(a => a.remove()); return c.textContent.trim(); };
  return {
    h1: [...document.querySelectorAll("article.bd-article h1")].map(text),
    images: images.map(i => ({src: i.currentSrc || i.src, width: i.naturalWidth})),
    nav: [...document.querySelectorAll(".bd-sidenav a.reference.internal")].map(a => a.href),
    links: [...document.querySelectorAll("article.bd-article a[href]")].map(a => a.href),
    text: document.body.innerText,
  };
})()"""


def fail_or_skip(reason: str):
    if os.environ.get("COURSE_REQUIRE_BROWSER"):
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def site() -> Path:
    if "COURSE_SITE" not in os.environ:
        fail_or_skip("$COURSE_SITE names no built site: `make site-test` sets it "
                     "(or COURSE_SITE=build/site after `make site`)")
    folder = Path(os.environ["COURSE_SITE"])
    if not (folder / "index.html").is_file():
        fail_or_skip(f"no built site in {folder}: run `make site-test` (after `make test`)")
    return folder.resolve()


@pytest.fixture(scope="module")
def base_url(site):
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = functools.partial(Quiet, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def find_chromium() -> str | None:
    """The system's Chromium: $CHROMIUM, else chromium or chromium-browser on PATH."""
    names = [os.environ.get("CHROMIUM", ""), "chromium", "chromium-browser"]
    return next((found for n in names if n and (found := shutil.which(n))), None)


@pytest.fixture(scope="module")
def chromium():
    executable = find_chromium()
    if not executable:
        fail_or_skip("Chromium is not installed: apt-get install chromium (CI installs it)")
    try:  # the site's stack (requirements-site.txt), which `make site-test` installs
        from playwright.sync_api import sync_playwright
    except ImportError:
        fail_or_skip("Playwright is not installed: `make site-test` installs it")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, headless=True,
                                             args=CHROMIUM_ARGS)
        yield browser
        browser.close()


def open_page(browser, url: str):
    """A new page showing ``url`` at 1280 x 900, once its load event has fired."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(url, wait_until="load")
    return page


def staged_notebooks(site: Path) -> list[Path]:
    """The executed notebooks the site was built from (tools.site stages them in <site>-src)."""
    return sorted((site.parent / (site.name + "-src") / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def title_and_figures(path: Path) -> tuple[str, int]:
    """A notebook's H1 (as text) and how many image outputs its executed copy holds."""
    nb = json.loads(path.read_text())
    sources = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown"]
    h1 = next(line[2:] for s in sources for line in s.splitlines() if line.startswith("# "))
    figures = sum(any(m in o.get("data", {}) for m in IMAGE_MIMES)
                  for c in nb["cells"] for o in c.get("outputs", []))
    return re.sub(r"[`*]", "", h1).strip(), figures


def plain_quotes(text: str) -> str:
    return text.translate(str.maketrans({"\u2019": "'", "\u2018": "'", "\u201c": '"',
                                         "\u201d": '"'}))


def local(images, base_url):
    return [i for i in images if i["src"].startswith((base_url, "data:"))]


def test_the_home_page_is_the_readme_with_the_notebooks_in_course_order(chromium, base_url, site):
    page = open_page(chromium, f"{base_url}/index.html")
    seen = page.evaluate(READ_PAGE)
    page.screenshot(path=SHOTS / "home.png")
    readme = (course.ROOT / "README.md").read_text()
    assert seen["h1"] == [readme.splitlines()[0].removeprefix("# ")]
    names = [p.stem for p in course.notebook_paths()]
    linked = [n for href in seen["nav"] for n in names if href.endswith(f"notebooks/{n}.html")]
    assert linked == names, "the sidebar lists every notebook, in course order"
    mapped = [n for n in names if f"{base_url}/notebooks/{n}.html" in seen["links"]]
    assert mapped == names, "the README's notebook map links every notebook's page"
    assert all((site / "notebooks" / f"{n}.html").is_file() for n in names)
    assert all(i["width"] > 0 for i in local(seen["images"], base_url)), seen["images"]


@pytest.fixture(scope="module")
def notebook_pages(site):
    pages = staged_notebooks(site)
    assert [p.name for p in pages] == [p.name for p in course.notebook_paths()]
    return pages


@pytest.mark.parametrize("index", range(len(course.notebook_paths())),
                         ids=[p.stem for p in course.notebook_paths()])
def test_every_notebook_page_renders_its_title_and_figures(chromium, base_url, notebook_pages,
                                                           index):
    path = notebook_pages[index]
    title, figures = title_and_figures(path)
    page = open_page(chromium, f"{base_url}/notebooks/{path.stem}.html")
    seen = page.evaluate(READ_PAGE)
    assert [plain_quotes(h) for h in seen["h1"]] == [title]  # Sphinx curls its quotes
    mine = local(seen["images"], base_url)
    broken = [i["src"] for i in mine if i["width"] == 0]
    assert not broken, f"images that did not load: {broken}"
    assert len(mine) >= figures, f"{figures} figures in the notebook, {len(mine)} on the page"
    fallback = re.search(r"<(Figure size [^>]*|IPython\.core\.display\.\w+ object)>", seen["text"])
    assert not fallback, f"an output shown as its text repr: {fallback and fallback.group(0)}"
    code = ["".join(c["source"]) for c in json.loads(path.read_text())["cells"]
            if c["cell_type"] == "code"]
    exercises = {m[1] for s in code if (m := re.match(r"# Exercise (\d\d\.\d+):", s))}
    verdicts = set(re.findall(r"Exercise (\d\d\.\d+) \(", seen["text"]))
    assert exercises and verdicts == exercises, "each exercise shows its check's verdict"


def test_the_dcgan_page_shows_its_progress_gif(chromium, base_url, site):
    page = open_page(chromium, f"{base_url}/notebooks/04_dcgan.html")
    seen = page.evaluate(READ_PAGE)
    gifs = [i for i in local(seen["images"], base_url)
            if i["src"].endswith(".gif") or i["src"].startswith("data:image/gif")]
    assert gifs and all(i["width"] > 0 for i in gifs), seen["images"]
    assert "IPython.core.display.Image object" not in seen["text"]
    page.screenshot(path=SHOTS / "04_dcgan.png")
    page.evaluate("""(() => { const g = [...document.images].find(i => /\\.gif$|^data:image\\/gif/
        .test(i.currentSrc)); g.scrollIntoView({block: "center"}); return g.currentSrc; })()""")
    page.screenshot(path=SHOTS / "04_dcgan_gif.png")
