"""Fails if a code block of the built site scrolls sideways in a window 1280 px wide.

Opens every page of a built site (``sphinx-build -b html docs docs/_build/html``) in one
headless Chromium, each in a frame as large as a window of each width asked for (1280 x 1600
unless told), with every tab of a tab set and every dropdown open, and measures each
``<pre>`` (code, a notebook's output, a doctest): it scrolls sideways where its content is
wider than its box. Each one is reported with its page, its longest line and how many
characters fit::

    python docs/check_code_width.py docs/_build/html
    python docs/check_code_width.py docs/_build/html --width 1280 --width 1920 api.html

Pages are served from 127.0.0.1 and nothing else is reached (MathJax's CDN is not: it does
not change the width of code). At each width, a control block, one line of 200 characters
added to the first page, must be found scrolling, and every page must have as many blocks
measured as its HTML holds, or the check itself failed. Needs Chromium (Debian: ``apt-get
install chromium``); ``nox -s docs`` runs it.
"""

import argparse
import functools
import html
import http.server
import json
import pathlib
import re
import shutil
import subprocess
import sys
import threading
from typing import ClassVar

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
HARNESS = "/__code_width__.html"
CONTROL = "__control__.html"  # beside the first page, so that its links and styles resolve
PRE = re.compile(r"<pre[\s>]")
# Runs in the harness once every frame has loaded: opens the hidden blocks of each page, then
# measures every <pre>. The result goes to an attribute of <html>, which --dump-dom prints.
MEASURE = """
window.addEventListener("load", () => setTimeout(() => {
  const frames = [];
  for (const frame of document.querySelectorAll("iframe")) {
    const doc = frame.contentDocument;
    const style = doc.createElement("style");
    style.textContent = ".sd-tab-content { display: block !important; }";
    doc.head.append(style);
    for (const details of doc.querySelectorAll("details")) details.open = true;
    const blocks = [];
    for (const pre of doc.querySelectorAll("pre")) {
      if (pre.scrollWidth <= pre.clientWidth) { blocks.push(null); continue; }
      const css = frame.contentWindow.getComputedStyle(pre);
      const probe = doc.createElement("span");
      probe.textContent = "0".repeat(100);
      pre.append(probe);
      const character = probe.getBoundingClientRect().width / 100;
      probe.remove();
      const inside = pre.clientWidth - parseFloat(css.paddingLeft) - parseFloat(css.paddingRight);
      const lines = pre.textContent.split("\\n");
      const longest = lines.reduce((a, b) => (b.length > a.length ? b : a), "");
      blocks.push({fits: Math.floor(inside / character), longest,
                   over: pre.scrollWidth - pre.clientWidth});
    }
    frames.push({page: frame.dataset.page, width: Number(frame.width), blocks});
  }
  document.documentElement.setAttribute("data-code-width", JSON.stringify(frames));
}, 1000));
"""


def find_browser(name: str | None) -> str:
    """The Chromium executable: ``name``, or the first of BROWSERS on the PATH."""
    for candidate in (name,) if name else BROWSERS:
        path = shutil.which(candidate)
        if path:
            return path
    sys.exit(f"no Chromium found ({name or ', '.join(BROWSERS)}): apt-get install chromium")


def pages(site: pathlib.Path) -> list[pathlib.Path]:
    """Every page of the site, relative to it; not the highlighted source of the modules."""
    return sorted(
        path.relative_to(site)
        for path in site.rglob("*.html")
        if path.relative_to(site).parts[0] not in ("_modules", "_sources", "_static")
    )


def harness(paths: list[str], widths: list[int], height: int) -> str:
    """A page that holds each of ``paths`` in a frame of each width, and MEASURE."""
    frames = "".join(
        f'<iframe data-page="{html.escape(path)}" src="/{html.escape(path)}"'
        f' width="{width}" height="{height}" style="border: 0; display: block"></iframe>'
        for width in widths
        for path in paths
    )
    return f"<!doctype html><html><body style='margin: 0'>{frames}<script>{MEASURE}</script>"


def control(page: str) -> str:
    """``page`` with one more code block, a line of 200 characters, at the end of its article."""
    block = f'<div class="highlight"><pre>{"x" * 200}</pre></div>'
    return page.replace("</article>", block + "</article>", 1)


class Handler(http.server.SimpleHTTPRequestHandler):
    """Serves the site, and the pages of ``extra`` (URL path: HTML) from memory."""

    extra: ClassVar[dict[str, str]] = {}

    def do_GET(self) -> None:
        """A page of ``extra``, or a file of the site."""
        text = self.extra.get(self.path)
        if text is None:
            super().do_GET()
            return
        body = text.encode("utf-8")
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (the base's name)
        """Quiet: the report is the check's."""


def measure(
    browser: str, site: pathlib.Path, paths: list[str], widths: list[int], height: int
) -> list[dict]:
    """What MEASURE found in each frame: every page at each width, then the control page."""
    first = pathlib.PurePosixPath(paths[0])
    control_path = str(first.parent / CONTROL)
    extra = {
        HARNESS: harness([*paths, control_path], widths, height),
        f"/{control_path}": control((site / first).read_text(encoding="utf-8")),
    }
    handler = functools.partial(type("Site", (Handler,), {"extra": extra}), directory=str(site))
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        command = [
            browser,
            "--headless",
            "--no-sandbox",  # run as root in containers and CI
            "--disable-gpu",
            "--disable-dev-shm-usage",  # containers often have a small /dev/shm
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",  # no CDN
            "--virtual-time-budget=60000",  # the pages' scripts and the measure finish first
            f"--window-size={max(widths)},{height}",
            "--dump-dom",
            f"http://127.0.0.1:{server.server_address[1]}{HARNESS}",
        ]
        result = subprocess.run(command, capture_output=True, text=True, timeout=600, check=True)
        server.shutdown()
    match = re.search(r'data-code-width="([^"]*)"', result.stdout)
    if match is None:
        sys.exit(f"the measure did not run in {browser}:\n{result.stderr[-2000:]}")
    return json.loads(html.unescape(match[1]))


def report(site: pathlib.Path, frames: list[dict]) -> tuple[int, list[str], list[str]]:
    """The number of code blocks measured, those that scroll, and signs of a broken check."""
    measured = 0
    scrolling: list[str] = []
    broken: list[str] = []
    for frame in frames:
        path, width, blocks = frame["page"], frame["width"], frame["blocks"]
        if pathlib.PurePosixPath(path).name == CONTROL:
            if not any(blocks):
                broken.append(f"at {width} px, the control block did not scroll")
            continue
        expected = len(PRE.findall((site / path).read_text(encoding="utf-8")))
        if len(blocks) != expected:
            broken.append(f"{path} at {width} px: {len(blocks)} blocks measured of {expected}")
        measured += len(blocks)
        scrolling.extend(
            f"{path} at {width} px: a code block scrolls by {block['over']} px;"
            f" {block['fits']} characters fit, its longest line has {len(block['longest'])}:"
            f" {block['longest']!r}"
            for block in blocks
            if block
        )
    return measured, scrolling, broken


def main() -> int:
    """Checks every page (or those named); 1 where a code block scrolls sideways."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("site", type=pathlib.Path, help="the built site (docs/_build/html)")
    parser.add_argument("page", nargs="*", help="pages to check, as api.html (default: all)")
    parser.add_argument(
        "--width", type=int, action="append", help="a window's width (default: 1280; repeatable)"
    )
    parser.add_argument("--height", type=int, default=1600)
    parser.add_argument("--browser", help="the Chromium executable (default: found on PATH)")
    args = parser.parse_args()

    site = args.site.resolve()
    paths = args.page or [path.as_posix() for path in pages(site)]
    widths = args.width or [1280]
    frames = measure(find_browser(args.browser), site, paths, widths, args.height)
    measured, scrolling, broken = report(site, frames)
    for line in scrolling:
        print(line)
    for line in broken:
        print(f"the check failed: {line}")
    print(
        f"{len(paths)} pages at {', '.join(map(str, widths))} px wide: {len(scrolling)} of"
        f" {measured} code blocks scroll sideways"
    )
    return 1 if scrolling or broken else 0


if __name__ == "__main__":
    sys.exit(main())
