"""Collection rules for the tests and the package's doctests.

A file that needs an extra which is not installed is skipped, with the extra
to install as the reason, instead of failing to import; so is a test marked
``@pytest.mark.requires(module, ...)`` that needs one only when it runs.

The nox sessions share the suite (``noxfile.py``): ``--families-only`` keeps
the families' tests (``tests/core``, ``stats``, ``reward``, ``value``,
``llm``, ``observation``) and the Gymnasium adapter's; ``--leave-families-to
EXTRAS`` leaves out the families' tests that need no extra beyond ``EXTRAS``
(those run where ``--families-only`` runs), but the contract tests, of which
it keeps the cases of each contract module's ``REPRESENTATIVES`` (one entry
per family, or per kind of reward transform: every promise at both ends of
the supported versions, every entry at the newest). A test's extras are read
from its file's top-level imports and its ``requires`` markers: a test that
needs an extra says so there (``@pytest.mark.requires``), never by an import
inside its body.

``--bit-for-bit=only`` keeps the files of ``BIT_FOR_BIT`` and ``--bit-for-bit=leave``
leaves them out: ``full`` runs them apart, compiled at XLA's default fusion emitters.

Files holding a test marked ``slow`` run first, then the others by their
number of tests (``pytest-xdist``'s order, which the sessions turn off with
``--no-loadscope-reorder``): the long single tests start while the many short
ones can still fill the other workers, instead of ending the run on one.
"""

import collections
import functools
import pathlib

import pytest

from tests._extras import extras_needed, imported_modules, missing_reason

ROOT = pathlib.Path(__file__).parent
FAMILIES = ("core", "stats", "reward", "value", "llm", "observation")  # folders of tests/
CONTRACTS = ("test_family_contract.py", "test_transform_contract.py")  # in every session
# Files comparing two compiled programs bit for bit where that holds at XLA's default CPU
# fusion emitters only: the gymnax wrappers' observations with the bare environment's, the
# demo's one-arm evaluation with its two-arm one (the older emitters give the two programs
# different last bits, and the demo's episodes then diverge).
BIT_FOR_BIT = ("tests/adapters/test_gymnax_adapter.py", "tests/pages/test_demo.py")


class NeedsExtra(pytest.File):
    """A file whose imports are not installed: collected as one skip with the reason."""

    def __init__(self, *, reason: str, **kwargs):
        super().__init__(**kwargs)
        self.reason = reason

    def collect(self):
        """Skips, naming what is missing and the extra that installs it."""
        pytest.skip(f"{self.path.relative_to(ROOT)}: {self.reason}")


def _own_module(path: pathlib.Path) -> list[str]:
    """The dotted name of a module of the package (its doctests import it), else nothing."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    if parts[0] != "rewardnorm_jax":
        return []
    return [".".join(parts[:-1] if parts[-1] == "__init__" else parts)]


@pytest.hookimpl(wrapper=True)
def pytest_collect_file(file_path: pathlib.Path, parent):
    """Replaces the collectors of a file that needs a missing extra by one skip."""
    collectors = yield
    if collectors and file_path.suffix == ".py" and file_path.is_relative_to(ROOT):
        modules = _own_module(file_path) + imported_modules(file_path.read_text())
        reason = missing_reason(modules)
        if reason:
            return [NeedsExtra.from_parent(parent, path=file_path, reason=reason)]
    return collectors


def pytest_runtest_setup(item):
    """Skips a test marked ``requires(module, ...)`` where a module is missing."""
    for marker in item.iter_markers("requires"):
        reason = missing_reason(marker.args)
        if reason:
            pytest.skip(reason)


def pytest_configure(config):
    """Refuses a ``BIT_FOR_BIT`` entry that names no file (its run would pass, empty)."""
    missing = [name for name in BIT_FOR_BIT if not (ROOT / name).is_file()]
    if missing:
        raise pytest.UsageError(f"conftest.BIT_FOR_BIT names files that do not exist: {missing}")


def pytest_addoption(parser):
    """The options that share the suite between the nox sessions (the module's docstring)."""
    group = parser.getgroup("rewardnorm_jax")
    group.addoption(
        "--families-only",
        action="store_true",
        help="run only the families' tests and the Gymnasium adapter's",
    )
    group.addoption(
        "--leave-families-to",
        metavar="EXTRAS",
        help="leave out the families' tests that need no extra beyond EXTRAS (comma-separated)",
    )
    group.addoption(
        "--bit-for-bit",
        choices=("only", "leave"),
        help="only the files of conftest.BIT_FOR_BIT, or all but them",
    )


def _in_families(path: pathlib.Path) -> bool:
    parts = path.relative_to(ROOT).parts
    return len(parts) > 2 and parts[0] == "tests" and parts[1] in FAMILIES


def _gymnasium_adapter(path: pathlib.Path) -> bool:
    return path.parent == ROOT / "tests" / "adapters" and "gymnasium" in path.name


@functools.cache
def _imports(path: pathlib.Path) -> tuple[str, ...]:
    return tuple(imported_modules(path.read_text()))


def _gymnasium_doctest(path: pathlib.Path) -> bool:
    return path.is_relative_to(ROOT / "rewardnorm_jax" / "gymnasium")


def _extras_of(item) -> set[str]:
    """The extras a test needs: its file's imports and its ``requires`` markers."""
    markers = [name for marker in item.iter_markers("requires") for name in marker.args]
    return extras_needed([*_imports(item.path), *markers])


def _kept(item, config) -> bool:
    """Whether ``item`` runs in this session."""
    path = item.path
    if _outside_bit_for_bit_share(path, config):
        return False  # a file named on the command line, which pytest collects regardless
    if config.getoption("families_only"):
        return _in_families(path) or _gymnasium_adapter(path) or _gymnasium_doctest(path)
    left_to = config.getoption("leave_families_to")
    if left_to is None or not _in_families(path):
        return True
    if path.name in CONTRACTS:
        return _representative(item)
    return not _extras_of(item) <= set(left_to.split(","))


def _representative(item) -> bool:
    """Whether a contract test case takes no registry entry beyond its module's representatives.

    A contract module names its registry's entries in ``REGISTRY`` and the few that stand for
    the rest in ``REPRESENTATIVES``; a case parametrized by other entries is left out.
    """
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return True
    module = item.module
    entries = [value for value in callspec.params.values() if isinstance(value, str)]
    return all(value in module.REPRESENTATIVES for value in entries if value in module.REGISTRY)


def _in_run_order(items: list) -> list:
    """``items``, files with a ``slow`` test first, then files with the most tests first.

    The sort is stable: a file's tests stay together and in their order.
    """
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    counts = collections.Counter(item.path for item in items)
    return sorted(items, key=lambda item: (item.path not in slow, -counts[item.path]))


def _outside_bit_for_bit_share(path: pathlib.Path, config) -> bool:
    """Whether ``--bit-for-bit`` (``only`` or ``leave``) leaves ``path`` out."""
    share = config.getoption("bit_for_bit")
    if share is None:
        return False
    listed = path.is_relative_to(ROOT) and path.relative_to(ROOT).as_posix() in BIT_FOR_BIT
    return listed != (share == "only")


def pytest_ignore_collect(collection_path: pathlib.Path, config):
    """Files outside ``--families-only`` or ``--bit-for-bit``'s share are not even collected."""
    if collection_path.suffix != ".py":
        return None
    path = collection_path
    if config.getoption("families_only") and not (
        _in_families(path) or _gymnasium_adapter(path) or _gymnasium_doctest(path)
    ):
        return True
    if _outside_bit_for_bit_share(path, config):
        return True
    return None


def pytest_collection_modifyitems(config, items):
    """Keeps the tests of this session's share of the suite, in run order."""
    kept = [item for item in items if _kept(item, config)]
    if len(kept) < len(items):
        chosen = set(map(id, kept))
        config.hook.pytest_deselected(items=[item for item in items if id(item) not in chosen])
    items[:] = _in_run_order(kept)
