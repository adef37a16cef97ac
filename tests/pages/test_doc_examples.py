"""Every code example of the README and the documentation pages, run alone as a user pastes it.

Each block runs in a fresh process, from an empty directory, with nothing
defined beforehand (a ```{doctest} block through ``python -m doctest``): a
process forked from one that imported JAX and the library once
(``_fork_server.py``), so that the examples share that import. Where
the page shows the block's output in a plain block right after it, the printed
output must equal it, and in a ```{testoutput} block match it as Sphinx's
doctest would (``...`` stands for any text). Blocks marked ``# fragment``
(continuing the block above) and ``# long-running`` (training longer than a
smoke run) are skipped, saying so; a block that imports a framework this
environment lacks is skipped, naming the extra.
"""

import doctest
import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
from typing import NamedTuple

import pytest

from tests._extras import imported_modules, missing_reason
from tests.hang import HANG_TIMEOUT_S
from tests.readme_examples import examples

EXAMPLES = examples()
FORK_SERVER = pathlib.Path(__file__).with_name("_fork_server.py")


class Result(NamedTuple):
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture(scope="module")
def run_alone():
    """``run_alone(argv, code, cwd)``: a block run as ``python -c`` (or ``-m doctest``) would.

    Each call forks a fresh process from one server (see ``_fork_server.py``),
    whose environment is the tests', on the CPU: in ``full``, XLA compiles the
    examples with its quick backend settings, as the session's other tests.
    """
    with tempfile.TemporaryFile("w+") as log, tempfile.TemporaryDirectory() as home:
        server = subprocess.Popen(
            [sys.executable, str(FORK_SERVER)],
            cwd=home,
            start_new_session=True,  # its group, a running example included, is ended at the end
            env={**os.environ, "JAX_PLATFORMS": "cpu"},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
        assert server.stdin is not None
        assert server.stdout is not None

        def reply() -> dict:
            line = server.stdout.readline()  # type: ignore[union-attr]
            if not line:
                log.seek(0)
                pytest.fail(f"the fork server stopped:\n{log.read()[-3000:]}")
            return json.loads(line)

        assert reply() == {"ready": True}

        def run(argv: list[str], code: str, cwd: pathlib.Path) -> Result:
            request = {"argv": argv, "code": code, "cwd": str(cwd), "timeout": HANG_TIMEOUT_S}
            server.stdin.write(json.dumps(request) + "\n")  # type: ignore[union-attr]
            server.stdin.flush()  # type: ignore[union-attr]
            return Result(**reply())

        try:
            yield run
        finally:
            server.stdin.close()
            try:
                server.wait(timeout=60)
            except subprocess.TimeoutExpired:  # interrupted while an example ran
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()


def test_the_pages_have_examples_and_most_run_alone():
    kinds = [example.kind for example in EXAMPLES]
    assert len(EXAMPLES) >= 40
    assert kinds.count("runnable") >= 0.8 * len(EXAMPLES), kinds


def expected_output(block: str) -> tuple[str, int]:
    """A ```{testoutput} block's text and doctest flags (Sphinx's, with its ``:options:``)."""
    flags = doctest.ELLIPSIS | doctest.DONT_ACCEPT_TRUE_FOR_1 | doctest.IGNORE_EXCEPTION_DETAIL
    lines = block.splitlines(keepends=True)
    while lines and lines[0].startswith(":options:"):
        for option in lines.pop(0).split(":", 2)[2].replace(",", " ").split():
            if option[:1] not in "+-" or option[1:] not in doctest.OPTIONFLAGS_BY_NAME:
                raise ValueError(f"testoutput option {option!r}: expected +NAME or -NAME")
            flag = doctest.OPTIONFLAGS_BY_NAME[option[1:]]
            flags = flags | flag if option[0] == "+" else flags & ~flag
    return "".join(lines), flags


def test_a_testoutput_block_takes_its_options_and_refuses_other_output():
    want, flags = expected_output(":options: +NORMALIZE_WHITESPACE -ELLIPSIS\nshift 25.80 ...\n")
    checker = doctest.OutputChecker()
    assert want == "shift 25.80 ...\n"
    assert checker.check_output(want, "shift   25.80 ...\n", flags)  # whitespace normalized
    assert not checker.check_output(want, "shift 25.80 scale\n", flags)  # no ellipsis
    want, flags = expected_output("1.6460\n")
    assert not checker.check_output(want, "1.6461\n", flags)
    with pytest.raises(ValueError, match="'ELLIPSIS'"):
        expected_output(":options: ELLIPSIS\n1\n")


@pytest.mark.parametrize("example", EXAMPLES, ids=[f"{e.page}:{e.line}" for e in EXAMPLES])
def test_example_runs_alone(example, tmp_path, run_alone):
    if example.kind != "runnable":
        pytest.skip(f"a {example.kind} block")
    reason = missing_reason(imported_modules(example.source))
    if reason:
        pytest.skip(reason)
    argv = ["-c"]
    if example.fence == "{doctest}":
        (tmp_path / "example.txt").write_text(example.code)
        # Sphinx's flags, but an exception's message is compared too.
        argv = ["doctest", "-o", "ELLIPSIS", "-o", "DONT_ACCEPT_TRUE_FOR_1", "example.txt"]
    result = run_alone(argv, example.code, tmp_path)
    failure = (result.stdout + result.stderr)[-3000:]
    assert result.returncode == 0, f"{example.page}:{example.line}\n{failure}"
    if example.output is None:
        return
    if example.output_fence == "{testoutput}":
        want, flags = expected_output(example.output)
        assert doctest.OutputChecker().check_output(want, result.stdout, flags), (
            f"{example.page}:{example.line}\n{result.stdout}"
        )
    else:  # the output the page shows under the block
        assert result.stdout == example.output, f"{example.page}:{example.line}"
