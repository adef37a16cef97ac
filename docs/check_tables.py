"""Fails if a Markdown table of the built site rendered as text instead of as a table.

A table that lost its ``|---|`` separator row, or was broken by a blank line,
comes out of the build as a paragraph that starts with ``|``; Sphinx does not
warn about it. Usage: ``python docs/check_tables.py docs/_build/html``.
"""

import html
import pathlib
import re
import sys

PARAGRAPH = re.compile(r"<p>(.*?)</p>", re.DOTALL)


def tables_as_text(site: pathlib.Path) -> list[str]:
    """``page: paragraph`` for every paragraph of the built pages that starts with ``|``."""
    found = []
    for page in sorted(site.rglob("*.html")):
        for paragraph in PARAGRAPH.findall(page.read_text(encoding="utf-8")):
            text = html.unescape(re.sub(r"<[^>]+>", "", paragraph)).strip()
            if text.startswith("|"):
                found.append(f"{page.relative_to(site)}: {text[:100]}")
    return found


def main() -> None:
    """Checks the site in the directory given as the only argument."""
    site = pathlib.Path(sys.argv[1])
    if not any(site.rglob("index.html")):
        raise SystemExit(f"{site} holds no built site")
    found = tables_as_text(site)
    for line in found:
        print(f"a table rendered as text: {line}")
    if found:
        raise SystemExit(1)
    print(f"{site}: every table rendered as a table")


if __name__ == "__main__":
    main()
