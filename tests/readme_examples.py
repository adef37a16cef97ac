"""The code examples of the README and the documentation pages, and a run of some from a wheel.

:func:`examples` lists every ```python, ```{testcode} and ```{doctest} block
of ``README.md`` and ``docs/**/*.md``; ``tests/pages/test_doc_examples.py`` runs each
alone in a fresh interpreter, as a user pastes it. A block whose first line is
:data:`FRAGMENT` continues the block above it (its page says so), and one whose
first line is :data:`LONG_RUNNING` trains longer than a smoke run: both are
left out of those runs.

Run as a script, this file executes the README's Quickstart and the Gymnasium
page's examples against the installed package: the ``wheel`` nox session runs
it with a clean environment's Python that has only the built wheel (with its
``gymnasium`` extra), from outside the checkout, so a module or data file
missing from the wheel fails here. It also checks that an adapter whose
framework is not installed (gymnax) names the extra to install.
"""

import doctest
import pathlib
import re
from typing import NamedTuple

ROOT = pathlib.Path(__file__).parents[1]
README = ROOT / "README.md"
GYMNASIUM_PAGE = ROOT / "docs" / "suites" / "gymnasium.md"
FRAGMENT = "# fragment"
"""The first line of a block that continues the one above it on its page."""
LONG_RUNNING = "# long-running"
"""The first line of a block that trains longer than a smoke run."""
BLOCK = re.compile(r"^```(python|\{testcode\}|\{doctest\})\n(.*?)^```", re.MULTILINE | re.DOTALL)


OUTPUT = re.compile(r"\n*```(\{testoutput\})?\n(.*?)^```", re.MULTILINE | re.DOTALL)
"""A plain ``` or ```{testoutput} block right after a code block: what that block prints."""


class Example(NamedTuple):
    """A code block: its page, the line its fence opens on, its code and the output it shows."""

    page: str
    line: int
    code: str
    output: str | None = None  # the plain or testoutput block after it, where the page shows one
    fence: str = "python"  # "python", "{testcode}" (code) or "{doctest}" (>>> prompts)
    output_fence: str = ""  # "" (printed exactly) or "{testoutput}" (doctest's ELLIPSIS applies)

    @property
    def source(self) -> str:
        """The Python code, without a doctest block's prompts and outputs."""
        if self.fence != "{doctest}":
            return self.code
        return "".join(part.source for part in doctest.DocTestParser().get_examples(self.code))

    @property
    def kind(self) -> str:
        """``"fragment"``, ``"long-running"`` or ``"runnable"``, from the first line."""
        first = self.code.lstrip().partition("\n")[0]
        if first.startswith(FRAGMENT):
            return "fragment"
        if first.startswith(LONG_RUNNING):
            return "long-running"
        return "runnable"


def examples() -> list[Example]:
    """Every code block (```python, ```{testcode}, ```{doctest}) of the README and the pages."""
    pages = [README, *sorted((ROOT / "docs").rglob("*.md"))]
    found = []
    for page in pages:
        if "_build" in page.parts:
            continue
        text = page.read_text()
        for match in BLOCK.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            shown = OUTPUT.match(text, match.end())
            output, output_fence = (shown.group(2), shown.group(1) or "") if shown else (None, "")
            page_name = str(page.relative_to(ROOT))
            found.append(
                Example(page_name, line, match.group(2), output, match.group(1), output_fence)
            )
    return found


def python_blocks(section: str) -> list[str]:
    """The ```python blocks of the README's ``## section``, in order."""
    (body,) = [
        part
        for part in re.split(r"^## ", README.read_text(), flags=re.MULTILINE)
        if part.startswith(section + "\n")
    ]
    return re.findall(r"^```python\n(.*?)^```", body, flags=re.MULTILINE | re.DOTALL)


def testcode_blocks(page: pathlib.Path) -> list[str]:
    """The ```{testcode} blocks of a documentation page, in order."""
    return re.findall(r"^```\{testcode\}\n(.*?)^```", page.read_text(), re.MULTILINE | re.DOTALL)


def main() -> None:
    import rewardnorm_jax

    installed = pathlib.Path(rewardnorm_jax.__file__)
    if installed.parent.parent.name != "site-packages":
        raise SystemExit(f"imported {installed}, not an installed package")
    examples = {
        "README.md, Quickstart": python_blocks("Quickstart"),
        "docs/suites/gymnasium.md": testcode_blocks(GYMNASIUM_PAGE),
    }
    for name, blocks in examples.items():
        namespace: dict = {}  # the blocks of a page build on each other
        for block in blocks:
            exec(compile(block, name, "exec"), namespace)
        print(f"{name}: {len(blocks)} example(s) ran")
    try:
        import rewardnorm_jax.gymnax
    except ImportError as error:
        if 'pip install "rewardnorm-jax[gymnax]"' not in str(error):
            raise
        print(f"without gymnax: {type(error).__name__}: {error}")
    else:
        raise SystemExit("rewardnorm_jax.gymnax imported although gymnax is not installed")
    print(f"rewardnorm_jax {rewardnorm_jax.__version__} from {installed.parent}")


if __name__ == "__main__":
    main()
