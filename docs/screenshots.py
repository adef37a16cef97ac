"""Screenshots of every page of the documentation site, and a check that none overflows.

Builds the site (``sphinx-build -W -b html docs docs/_build/html``), or takes one
already built (``--html``), opens each page in headless Chromium at 1280 px wide and
writes a PNG of it to ``docs/_build/screenshots/``. It fails (exit status 1) where a
page is wider than the window, or where an element of a page's article runs past the
article's right edge without a scrolling box around it (a wide table or a long line
that is cut off or spills into the margin), naming the page and the element::

    python docs/screenshots.py                      # build, then check and screenshot
    python docs/screenshots.py --html docs/_build/html --full-page api.html faq.html

Needs the ``docs`` extra (to build) and Chromium (Debian: ``apt-get install chromium``).
The pages load MathJax from its CDN; without a network, ``npm install mathjax@4`` and pass
``--mathjax node_modules`` to see the math typeset. Not part of ``nox``: its pictures are
for a person to look at (``nox -s docs`` checks the width of every code block with
``check_code_width.py``, beside this file).
"""

import argparse
import contextlib
import html
import json
import pathlib
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator

from check_code_width import find_browser, pages  # beside this file

DOCS = pathlib.Path(__file__).resolve().parent
# Measures the page after its scripts (the theme's, MathJax) have run; the result goes to an
# attribute of <html>, which --dump-dom prints.
CHECK = """<script>
window.addEventListener("load", () => setTimeout(() => {
  const root = document.documentElement;
  const width = root.clientWidth;
  const found = [];
  if (root.scrollWidth > width) found.push(`the page is ${root.scrollWidth} px wide`);
  const article = document.querySelector("article") || document.body;
  const edge = article.getBoundingClientRect().right + 1;
  const name = (el) => el.tagName.toLowerCase() + (el.id ? "#" + el.id : "") +
    (typeof el.className === "string" && el.className.trim() ?
      "." + el.className.trim().split(/\\s+/).join(".") : "");
  const reported = [];
  for (const el of article.querySelectorAll("*")) {
    const box = el.getBoundingClientRect();
    if (box.width === 0 || box.right <= edge) continue;
    if (reported.some((outer) => outer.contains(el))) continue;
    let scrolled = false;
    for (let up = el.parentElement; up && up !== article; up = up.parentElement) {
      if (getComputedStyle(up).overflowX !== "visible") { scrolled = true; break; }
    }
    if (scrolled) continue;
    reported.push(el);
    const text = (el.textContent || "").trim().replace(/\\s+/g, " ").slice(0, 60);
    found.push(`${name(el)} ends at ${Math.round(box.right)} px, past the article's ` +
      `${Math.round(edge - 1)} px: "${text}"`);
  }
  root.setAttribute("data-layout-check", JSON.stringify({height: root.scrollHeight, found}));
}, 500));
</script>"""
ATTRIBUTE = re.compile(r'data-layout-check="([^"]*)"')
SLICE = 16000  # px of a page in one --full-page screenshot: Chromium's limit is 16384
MATHJAX = re.compile(r'<script[^>]*src="[^"]*/tex-mml-chtml\.js"[^>]*>')


def build(out: pathlib.Path) -> None:
    """Builds the HTML site into ``out``, warnings as errors, as ``nox -s docs`` does."""
    command = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html"]
    subprocess.run([*command, str(DOCS), str(out)], check=True)


def chromium(browser: str, width: int, height: int, *arguments: str) -> str:
    """Runs headless Chromium on one page and returns what it printed."""
    command = [
        browser,
        "--headless",
        "--no-sandbox",  # run as root in containers and CI
        "--disable-gpu",
        "--allow-file-access-from-files",
        "--virtual-time-budget=10000",  # lets the page's scripts and fonts finish first
        f"--window-size={width},{height}",
        *arguments,
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)
    return result.stdout


@contextlib.contextmanager
def prepared(page: pathlib.Path, mathjax: pathlib.Path | None, offset: int = 0) -> Iterator[str]:
    """A copy of ``page`` beside it with CHECK added, as a URI.

    With ``mathjax`` (a ``node_modules`` folder holding ``mathjax`` and its fonts), the
    copy loads MathJax from there instead of its CDN. With ``offset``, the page starts that
    many pixels further down (headless Chromium's screenshots do not scroll).
    """
    text = page.read_text(encoding="utf-8").replace("</body>", CHECK + "</body>", 1)
    if offset:
        style = f"<style>body {{ margin-top: -{offset}px !important; }}</style>"
        text = text.replace("</head>", style + "</head>", 1)
    if mathjax is not None:
        root = mathjax.resolve()
        fonts = json.dumps((root / "@mathjax").as_uri())
        local = (
            f"<script>window.MathJax = window.MathJax || {{}};"
            f" MathJax.loader = {{...MathJax.loader, paths: {{fonts: {fonts}}}}};</script>"
            f'<script defer src="{(root / "mathjax" / "tex-mml-chtml.js").as_uri()}">'
        )
        text = MATHJAX.sub(lambda _: local, text)
    with tempfile.NamedTemporaryFile(
        "w", suffix=".html", dir=page.parent, encoding="utf-8", delete=False
    ) as copy:
        copy.write(text)
    try:
        yield pathlib.Path(copy.name).as_uri()
    finally:
        pathlib.Path(copy.name).unlink()


def check(browser: str, uri: str, width: int, height: int) -> tuple[int, list[str]]:
    """The page's height and what overflows in it."""
    match = ATTRIBUTE.search(chromium(browser, width, height, "--dump-dom", uri))
    if match is None:
        return 0, ["the check did not run (no result in the page)"]
    result = json.loads(html.unescape(match[1]))
    return int(result["height"]), list(result["found"])


def main() -> int:
    """Builds or takes the site, checks and screenshots every page; 1 where one overflows."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--html", type=pathlib.Path, help="a built site (default: build one)")
    parser.add_argument("--out", type=pathlib.Path, default=DOCS / "_build" / "screenshots")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=1600)
    parser.add_argument(
        "--full-page",
        action="store_true",
        help="the whole height of each page (in screenshots of 16000 px: api.png, api-2.png)",
    )
    parser.add_argument("--browser", help="the Chromium executable (default: found on PATH)")
    parser.add_argument(
        "--mathjax",
        type=pathlib.Path,
        help="node_modules of `npm install mathjax@4`: render the math without reaching its CDN",
    )
    parser.add_argument(
        "page", nargs="*", type=pathlib.Path, help="pages to take, as api.html (default: all)"
    )
    args = parser.parse_args()

    browser = find_browser(args.browser)
    site = args.html
    if site is None:
        site = DOCS / "_build" / "html"
        build(site)
    site = site.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    taken = args.page or pages(site)
    failed = 0
    for relative in taken:
        with prepared(site / relative, args.mathjax) as uri:
            height, found = check(browser, uri, args.width, args.height)
        stem = "__".join(relative.with_suffix("").parts)
        offsets = range(0, max(height, 1), SLICE) if args.full_page else range(1)
        for number, offset in enumerate(offsets, 1):
            png = (args.out / f"{stem}{f'-{number}' if number > 1 else ''}.png").resolve()
            tall = min(height - offset, SLICE) if args.full_page else 0
            with prepared(site / relative, args.mathjax, offset) as uri:
                shot = f"--screenshot={png}"
                chromium(browser, args.width, max(tall, args.height), shot, uri)
        print(f"{'OVERFLOW' if found else 'ok':8} {relative} -> {stem}.png ({len(offsets)} taken)")
        for line in found:
            print(f"         {line}")
        failed += bool(found)
    print(f"{len(taken)} pages, {failed} overflowing, screenshots in {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
