"""docs/check_code_width.py: what it reports from the browser's measures, and its pages.

The measure itself runs in headless Chromium under ``nox -s docs``, with a control block
that must be found scrolling; these tests check the rest without a browser.
"""

import importlib.util
import pathlib

ROOT = pathlib.Path(__file__).parents[2]


def load_check():
    spec = importlib.util.spec_from_file_location(
        "check_code_width", ROOT / "docs" / "check_code_width.py"
    )
    assert spec is not None
    assert spec.loader is not None
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    return check


CHECK = load_check()
WIDE = {"fits": 76, "longest": "y" * 90, "over": 117}
CONTROL = {"page": CHECK.CONTROL, "width": 1280, "blocks": [{**WIDE, "longest": "x" * 200}]}


def test_a_block_that_scrolls_is_named_with_its_page_width_and_longest_line(tmp_path):
    (tmp_path / "a.html").write_text("<pre>x</pre><p>text</p><pre class='y'>y</pre>")
    frames = [{"page": "a.html", "width": 1280, "blocks": [None, WIDE]}, CONTROL]
    measured, scrolling, broken = CHECK.report(tmp_path, frames)
    assert measured == 2
    named = "a.html at 1280 px: a code block scrolls by 117 px; 76 characters fit, its longest"
    assert scrolling == [f"{named} line has 90: '{'y' * 90}'"]
    assert broken == []


def test_a_control_that_did_not_scroll_or_blocks_left_unmeasured_fail_the_check(tmp_path):
    (tmp_path / "a.html").write_text("<pre>x</pre><pre>y</pre>")
    frames = [
        {"page": "a.html", "width": 1920, "blocks": [None]},
        {"page": CHECK.CONTROL, "width": 1920, "blocks": [None]},
    ]
    measured, scrolling, broken = CHECK.report(tmp_path, frames)
    assert (measured, scrolling) == (1, [])
    assert broken == [
        "a.html at 1920 px: 1 blocks measured of 2",
        "at 1920 px, the control block did not scroll",
    ]


def test_the_control_page_adds_one_long_line_to_the_article():
    page = "<html><body><article><p>text</p></article></body></html>"
    controlled = CHECK.control(page)
    assert controlled.count("<pre>") == 1
    assert controlled.index("<pre>") < controlled.index("</article>")
    assert "x" * 200 in controlled


def test_every_page_of_the_site_is_measured_at_every_width(tmp_path):
    for name in ("index.html", "suites/gymnax.html", "_modules/a.html", "_static/b.html"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("<pre>x</pre>")
    paths = [path.as_posix() for path in CHECK.pages(tmp_path)]
    assert paths == ["index.html", "suites/gymnax.html"]
    harness = CHECK.harness(paths, [1280, 1920], 1600)
    for width in (1280, 1920):
        for path in paths:
            assert f'data-page="{path}" src="/{path}" width="{width}" height="1600"' in harness
