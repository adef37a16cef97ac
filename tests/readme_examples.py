"""Runs the README's Quickstart and the Gymnasium page's examples against the installed package.

The ``wheel`` nox session runs this file with a clean environment's Python
that has only the built wheel (with its ``gymnasium`` extra), from outside the
checkout: a module or data file missing from the wheel fails here. It also
checks that an adapter whose framework is not installed (gymnax) names the
extra to install.
"""

import pathlib
import re

ROOT = pathlib.Path(__file__).parents[1]
README = ROOT / "README.md"
GYMNASIUM_PAGE = ROOT / "docs" / "suites" / "gymnasium.md"


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
