"""Every notebook in notebooks/ executes top to bottom (with RN_NOTEBOOK_SMALL=1: small runs).

The notebooks check their own claims (golden numbers, frozen statistics) with
``assert`` cells, so an execution error here is a broken claim or a broken API.
Notebooks run two at a time, each in its own kernel process, and the kernels
compile with XLA's backend optimization level 0: the small runs are dominated
by compilation, which this roughly halves (same programs and results up to
float rounding; the notebooks' own checks hold either way).
"""

import os
import pathlib
from concurrent.futures import ThreadPoolExecutor

import nbformat
import pytest
from nbclient import NotebookClient

from tests._extras import imported_modules, missing_reason
from tests.hang import HANG_TIMEOUT_S

NOTEBOOKS = sorted((pathlib.Path(__file__).parents[2] / "notebooks").glob("*.ipynb"))


def imports(path: pathlib.Path) -> list[str]:
    """The modules that a notebook's code cells import."""
    cells = nbformat.read(path, as_version=4).cells
    return imported_modules("\n".join(cell.source for cell in cells if cell.cell_type == "code"))


IMPORTS = {path: imports(path) for path in NOTEBOOKS}


def execute(path: pathlib.Path):
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook,
        timeout=HANG_TIMEOUT_S,  # per cell: a hang detector
        startup_timeout=HANG_TIMEOUT_S,  # the kernel's start, on a loaded machine too
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
    )
    client.execute()  # raises CellExecutionError, with the cell and traceback, on failure
    return notebook


@pytest.fixture(scope="module")
def executions():
    """Starts every notebook on first use; each test waits for its own."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RN_NOTEBOOK_SMALL", "1")  # inherited by the kernels
        flags = os.environ.get("XLA_FLAGS", "")
        patch.setenv("XLA_FLAGS", f"{flags} --xla_backend_optimization_level=0".strip())
        with ThreadPoolExecutor(max_workers=2) as pool:
            futures = {
                path: pool.submit(execute, path)
                for path in NOTEBOOKS
                if missing_reason(IMPORTS[path]) is None
            }
            yield futures


def test_notebooks_exist():
    names = {path.name for path in NOTEBOOKS}
    assert {"quickstart.ipynb", "semantics.ipynb", "ppo.ipynb"} <= names


@pytest.mark.slow
@pytest.mark.parametrize(
    "path",
    [
        pytest.param(path, marks=pytest.mark.requires(*IMPORTS[path]), id=path.stem)
        for path in NOTEBOOKS
    ],
)
def test_notebook_executes(path, executions):
    notebook = executions[path].result()
    errors = [
        output
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.outputs
        if output.output_type == "error"
    ]
    assert not errors
    assert all(
        cell.execution_count is not None for cell in notebook.cells if cell.cell_type == "code"
    )
