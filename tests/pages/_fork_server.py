"""Runs each page example in a fresh process forked from an interpreter that imported JAX once.

Started by ``tests/pages/test_doc_examples.py`` as ``python _fork_server.py``. It
imports what every example imports (NumPy, JAX, Flax and the library, and the
frameworks whose import starts no JAX backend), then serves one request per line
of its standard input, a JSON object ``{"argv", "code", "cwd", "timeout"}``: it
forks, and the child runs the request as ``python -c code`` (or ``python -m
doctest ...`` for ``argv[0] == "doctest"``) would, in ``cwd``, with a fresh
``__main__`` and nothing defined beforehand. The reply, one JSON line, holds the
child's exit status and output (UTF-8); its standard input is ``/dev/null``. A
child still running at ``timeout`` is killed (status -9).

The example's names come from its own code only, as when pasted alone: a module
imported here is only found faster. No JAX backend exists before the fork (the
server checks it), so each child starts its own, with its own threads.
"""

import atexit
import contextlib
import importlib
import json
import os
import runpy
import signal
import sys
import tempfile
import threading
import time
import traceback
import types

# Every example imports these; frameworks that start a JAX backend on import
# (gymnax, Jumanji, JaxMARL) are left to the children.
PRELOAD = ("numpy", "jax", "jax.numpy", "flax", "rewardnorm_jax", "gymnasium", "brax")


def preload() -> None:
    """Imports ``PRELOAD`` (those installed), then checks that no JAX backend started."""
    for name in PRELOAD:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    from jax._src import xla_bridge

    # A child inherits only the forking thread: no backend (whose threads would be gone) and
    # no Python thread may exist here.
    if xla_bridge._backends or threading.active_count() != 1:
        raise RuntimeError(
            f"a preloaded module started JAX backends {list(xla_bridge._backends)} or "
            f"threads {threading.enumerate()}"
        )


def run_child(request: dict, outputs: list[str]) -> None:
    """The forked child: runs the request, its output in the files ``outputs``; never returns."""
    status = 1
    try:
        os.chdir(request["cwd"])
        modes = (os.O_RDONLY, os.O_WRONLY, os.O_WRONLY)
        for fd, path, mode in zip((0, 1, 2), (os.devnull, *outputs), modes, strict=True):
            opened = os.open(path, mode)  # stdin from /dev/null: the requests stay the server's
            os.dup2(opened, fd)
            os.close(opened)
        sys.path[0] = ""  # as python -c and python -m put the working directory first
        sys.argv = list(request["argv"])
        main = types.ModuleType("__main__")
        sys.modules["__main__"] = main
        try:
            if sys.argv[0] == "doctest":
                runpy.run_module("doctest", run_name="__main__", alter_sys=True)
            else:
                exec(compile(request["code"], "<string>", "exec"), main.__dict__)
            status = 0
        except SystemExit as exit_:
            code = exit_.code
            status = code if isinstance(code, int) else (0 if code is None else 1)
            if code is not None and not isinstance(code, int):
                print(code, file=sys.stderr)
        except BaseException:  # noqa: BLE001  (reported as python reports it)
            traceback.print_exc()
    finally:
        # The interpreter's own shutdown: non-daemon threads joined, atexit handlers run.
        with contextlib.suppress(BaseException):
            threading._shutdown()  # type: ignore[attr-defined]
            atexit._run_exitfuncs()
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(status)


def serve(request: dict) -> dict:
    """Forks a child for ``request``, waits for it (killing it at the timeout), reads its output."""
    outputs = []
    for _ in range(2):  # stdout, stderr
        fd, path = tempfile.mkstemp(prefix="example-")
        os.close(fd)
        outputs.append(path)
    pid = os.fork()
    if pid == 0:
        run_child(request, outputs)
    deadline = time.monotonic() + request["timeout"]
    done, status = os.waitpid(pid, os.WNOHANG)
    while not done and time.monotonic() < deadline:
        time.sleep(0.01)
        done, status = os.waitpid(pid, os.WNOHANG)
    if not done:  # hung: killed, as subprocess.run's timeout would
        os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
    reply: dict[str, int | str] = {"returncode": os.waitstatus_to_exitcode(status)}
    for key, path in zip(("stdout", "stderr"), outputs, strict=True):
        with open(path, encoding="utf-8", errors="replace") as file:
            reply[key] = file.read()
        os.remove(path)
    return reply


def main() -> None:
    preload()
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        print(json.dumps(serve(json.loads(line))), flush=True)


if __name__ == "__main__":
    main()
