"""Importing a subpackage whose framework is missing names the extra that installs it.

The framework is hidden (forgotten by ``sys.modules``, refused by a finder
first on ``sys.meta_path``, as if not installed), so this runs whatever is
installed; the ``wheel`` nox session checks the same in a clean environment
without gymnax.
"""

import importlib
import re
import sys

import pytest

from rewardnorm_jax._src.core.extras import MissingExtraError, requires
from tests._extras import extras_needed, imported_modules

CASES = [  # subpackage, the framework it imports, the extra that installs it
    ("rewardnorm_jax.gymnax", "gymnax", "gymnax"),
    ("rewardnorm_jax.gymnasium", "gymnasium", "gymnasium"),
    ("rewardnorm_jax.examples.ppo", "gymnax", "demo"),
]


class NotInstalled:
    """A module finder that finds ``name`` nowhere, as if it were not installed."""

    def __init__(self, name: str):
        self.name = name

    def find_spec(self, name, path=None, target=None):
        if name == self.name:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None  # let the other finders look


@pytest.mark.parametrize(("subpackage", "framework", "extra"), CASES)
def test_subpackage_without_its_framework_names_the_extra(
    subpackage, framework, extra, monkeypatch
):
    for name in list(sys.modules):
        if name.startswith((subpackage, framework)):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [NotInstalled(framework), *sys.meta_path])
    expected = f"{subpackage} needs {framework}, which is not installed: "
    expected += f'pip install "rewardnorm-jax[{extra}]"'
    with pytest.raises(MissingExtraError, match=re.escape(expected)) as excinfo:
        importlib.import_module(subpackage)
    assert isinstance(excinfo.value, ModuleNotFoundError)  # `except ImportError` still catches it
    assert excinfo.value.name == framework


def test_a_missing_module_of_the_library_itself_is_not_blamed_on_an_extra():
    with pytest.raises(ModuleNotFoundError) as excinfo, requires("gymnax", "rewardnorm_jax.gymnax"):
        importlib.import_module("rewardnorm_jax._no_such_module")
    assert not isinstance(excinfo.value, MissingExtraError)


def test_the_sessions_share_finds_the_extras_a_test_needs():
    # conftest.py leaves a family's test to `newest` only where it needs nothing beyond
    # `newest`'s extras: a framework, an adapter subpackage or a requires marker names them.
    assert (
        extras_needed(["jax.numpy", "numpy", "rewardnorm_jax", "rewardnorm_jax._src.stats"])
        == set()
    )
    assert extras_needed(["gymnax.wrappers.purerl", "rewardnorm_jax.brax"]) == {"gymnax", "brax"}
    assert extras_needed(["rewardnorm_jax.examples.ppo", "tunix.rl", "rlax"]) == {
        "demo",
        "tunix",
        "dev",
    }
    source = "import matplotlib\nfrom rewardnorm_jax import gymnasium\nfrom . import x\n"
    assert extras_needed(imported_modules(source)) == {"demo", "gymnasium"}
