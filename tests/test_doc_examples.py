"""Every code example of the README and the documentation pages, run alone as a user pastes it.

Each block runs in a fresh interpreter, from an empty directory, with nothing
defined beforehand; where the page shows the block's output in a plain block
right after it, the printed output must equal it. Blocks marked ``# fragment``
(continuing the block above) and ``# long-running`` (training longer than a
smoke run) are skipped, saying so; a block that imports a framework this
environment lacks is skipped, naming the extra.
"""

import os
import subprocess
import sys

import pytest

from tests._extras import imported_modules, missing_reason
from tests.readme_examples import examples

EXAMPLES = examples()
TIMEOUT_S = 600


def test_the_pages_have_examples_and_most_run_alone():
    kinds = [example.kind for example in EXAMPLES]
    assert len(EXAMPLES) >= 40
    assert kinds.count("runnable") >= 0.8 * len(EXAMPLES), kinds


@pytest.mark.parametrize("example", EXAMPLES, ids=[f"{e.page}:{e.line}" for e in EXAMPLES])
def test_example_runs_alone(example, tmp_path):
    if example.kind != "runnable":
        pytest.skip(f"a {example.kind} block")
    reason = missing_reason(imported_modules(example.code))
    if reason:
        pytest.skip(reason)
    env = {key: value for key, value in os.environ.items() if key != "XLA_FLAGS"}
    result = subprocess.run(
        [sys.executable, "-c", example.code],
        cwd=tmp_path,
        env={**env, "JAX_PLATFORMS": "cpu"},
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert result.returncode == 0, f"{example.page}:{example.line}\n{result.stderr[-3000:]}"
    if example.output is not None:  # the output the page shows under the block
        assert result.stdout == example.output, f"{example.page}:{example.line}"
