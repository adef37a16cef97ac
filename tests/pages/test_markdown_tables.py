"""Every Markdown table of the docs, the README and the benchmark results renders as a table.

A table whose header row is not followed by its ``|---|`` separator row renders as
a paragraph of pipes; Sphinx builds it without a warning.
"""

import importlib.util
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).parents[2]
PAGES = sorted(
    [ROOT / "README.md", ROOT / "CHANGELOG.md", *ROOT.glob("benchmarks/*.md")]
    + [path for path in ROOT.glob("docs/**/*.md") if "_build" not in path.parts]
)
SEPARATOR = re.compile(r"^\|(\s*:?-{3,}:?\s*\|)+\s*$")


def tables_without_separator(text: str) -> list[int]:
    """The line numbers of table header rows not followed by a separator row (code excluded)."""
    lines, missing, in_code = text.splitlines(), [], False
    for number, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            in_code = not in_code
        starts_table = line.startswith("|") and (
            number == 0 or not lines[number - 1].startswith("|")
        )
        if starts_table and not in_code:
            following = lines[number + 1] if number + 1 < len(lines) else ""
            if not SEPARATOR.match(following):
                missing.append(number + 1)
    return missing


def test_a_header_row_without_separator_is_found():
    assert tables_without_separator("text\n\n| a | b |\n| 1 | 2 |\n") == [3]
    assert tables_without_separator("| a | b |\n|---|:---:|\n| 1 | 2 |\n") == []
    assert tables_without_separator("```\n| a | b |\n```\n") == []


@pytest.mark.parametrize("page", PAGES, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_table_has_its_separator_row(page):
    assert tables_without_separator(page.read_text()) == [], f"{page}: header rows without |---|"


def test_the_site_check_finds_a_table_rendered_as_text(tmp_path):
    spec = importlib.util.spec_from_file_location("check_tables", ROOT / "docs" / "check_tables.py")
    assert spec is not None
    assert spec.loader is not None
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    (tmp_path / "good.html").write_text("<table><tr><td>| a |</td></tr></table><p>text</p>")
    (tmp_path / "bad.html").write_text("<p>| case | seeds |\n| --- | --- |</p>")
    assert check.tables_as_text(tmp_path) == ["bad.html: | case | seeds |\n| --- | --- |"]
