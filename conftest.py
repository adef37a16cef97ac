"""Collection rules for the tests and the package's doctests.

A file that needs an extra which is not installed is skipped, with the extra
to install as the reason, instead of failing to import; so is a test marked
``@pytest.mark.requires(module, ...)`` that needs one only when it runs.
"""

import pathlib

import pytest

from tests._extras import imported_modules, missing_reason

ROOT = pathlib.Path(__file__).parent


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
