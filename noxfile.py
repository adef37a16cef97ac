"""The test environments; ``nox`` runs every session (the README's test command, and CI).

* ``lint``: ruff format --check, ruff check, mypy.
* ``full``: every extra, at the oldest supported Python, JAX and Gymnasium
  (gymnax, which needs JAX < 0.12 and Gymnasium < 1.4; Brax's trainers and
  MuJoCo Playground, which need JAX < 0.10): the adapters, the pages'
  examples, notebooks, demo and benchmark smoke tests, the doctests, the
  families' tests that need an extra, and the contract tests; XLA compiles
  them with its backend optimizations turned down (``QUICK_COMPILE``) and
  its older fusion emitters (``OLDER_EMITTERS``), but for the files that
  compare two compiled programs bit for bit (``conftest.BIT_FOR_BIT``), run
  apart at the default emitters (``nox -s full -- ARGS``: one run of the
  tests ARGS choose, at the default emitters).
* ``newest``: the newest Python, JAX, Flax and Gymnasium, without gymnax: the
  families' tests (core, statistics, reward transforms, value targets,
  language models, observations), the contract tests and the Gymnasium
  adapter's, including the side by side comparison with Gymnasium 1.4's own
  wrappers.
* ``wheel``: builds the wheel and the sdist, checks them with twine, installs
  the wheel into a clean environment and runs the README's examples from it.
* ``docs``: builds the documentation site, warnings as errors, and checks that every
  Markdown table rendered as a table and that no code block scrolls sideways in a window
  1280 px wide (headless Chromium: on the PATH, or installed with apt-get when run as root,
  as in CI); the pages' examples run in ``full``, each alone.

``nox`` runs two sessions at a time: ``lint``, ``wheel`` and ``docs`` one after another
beside ``full`` (they need little CPU, much of it spent waiting on installs), then ``newest``
alone, as its tests and ``full``'s keep both cores busy.

Each test runs once, in the session that has what it needs, but for the contract tests
(every family's promises under jit, vmap, scan, grad and export: every entry in ``newest``,
each family's representatives in ``full``) and the Gymnasium adapter's (Gymnasium 1.3 and
1.4), which run at both ends of the supported versions; see ``conftest.py``. Sessions
install with uv (``pip install nox uv``); ``nox -s newest`` runs one.
"""

import glob
import os
import pathlib
import re
import shutil

import nox

nox.needs_version = ">=2026.8.17"  # sessions in parallel (``allow_parallel``)
nox.options.default_venv_backend = "uv"
nox.options.parallel = 2  # see the module's docstring; ``nox -j 1`` runs one at a time
nox.options.error_on_missing_interpreters = True  # a session must not vanish silently

ROOT = pathlib.Path(__file__).parent
PROJECT = nox.project.load_toml(ROOT / "pyproject.toml")
PYTHONS = nox.project.python_versions(PROJECT)  # from the trove classifiers
OLDEST, NEWEST = PYTHONS[0], PYTHONS[-1]
NEWEST_EXTRAS = "gymnasium,dev"  # what `newest` installs: the families' tests need no more
# -rs: each skip with its reason; -n: one worker per core (at most 4), a file per worker, the
# files in conftest.py's order (slow ones first).
PYTEST = (
    "pytest",
    "-q",
    "-rs",
    "--durations=10",
    "-n",
    "auto",
    "--maxprocesses=4",
    "--dist=loadfile",
    "--no-loadscope-reorder",
)


def lowest(name: str) -> str:
    """``name`` pinned to its lower bound in the project's requirements (``jax>=0.9``)."""
    requirements = PROJECT["project"]["dependencies"] + [
        line for lines in PROJECT["project"]["optional-dependencies"].values() for line in lines
    ]
    for requirement in requirements:
        match = re.fullmatch(rf"{re.escape(name)}>=([\w.]+)", requirement.split(";")[0].strip())
        if match:
            return f"{name}=={match[1]}"
    raise ValueError(f"pyproject.toml has no requirement {name}>=<version>")


def find_pyenv_pythons() -> None:
    """Lets uv find every Python that pyenv installed (pyenv's shims run only the selected one)."""
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    found = sorted(glob.glob(os.path.join(root, "versions", "3.*", "bin")))
    os.environ["PATH"] = os.pathsep.join([os.environ["PATH"], *found])


find_pyenv_pythons()


def caches(session: nox.Session) -> dict[str, str]:
    """Compiled code kept for the session's tests, in empty folders of its environment.

    Tests and the interpreters they start (pages' examples, the demo, the
    multi-device workers) import the same modules and compile many identical
    programs: JAX's persistent compilation cache compiles each program once
    per run and loads it after, and Python's bytecode cache (under
    ``PYTHONPYCACHEPREFIX``, written even where ``PYTHONDONTWRITEBYTECODE``
    is set outside) compiles each imported module once. Both folders start
    empty on every run.
    """
    root = pathlib.Path(session.virtualenv.location).resolve()
    for folder in ("jax-cache", "pycache"):
        shutil.rmtree(root / folder, ignore_errors=True)
    return {
        "JAX_COMPILATION_CACHE_DIR": str(root / "jax-cache"),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1",  # no minimum size
        "PYTHONDONTWRITEBYTECODE": "",  # empty: bytecode is written
        "PYTHONPYCACHEPREFIX": str(root / "pycache"),
    }


# full's tests compile far more than they run (a few steps of each framework's programs, Brax's
# trainers, the pages' examples): XLA's backend spends less time optimizing the machine code
# (QUICK_COMPILE), about a quarter of their CPU time, and XLA's older CPU fusion emitters
# (OLDER_EMITTERS, JAX 0.9) compile a fifth faster again, most of all Brax's trainers. Results
# move by an ulp or so (no fused multiply-adds), within every tolerance; the families' exact
# numbers are checked at XLA's defaults in newest. The files whose bit-for-bit comparisons of
# two compiled programs hold at the default emitters only (conftest.BIT_FOR_BIT) run apart,
# without OLDER_EMITTERS.
QUICK_COMPILE = "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
OLDER_EMITTERS = "--xla_cpu_use_fusion_emitters=false"


@nox.session(python=OLDEST, allow_parallel=True)
def lint(session: nox.Session) -> None:
    """Formatting (ruff format --check), lint (ruff check), types (mypy; every extra installed)."""
    session.install("-e", ".[all,dev]")
    session.run("ruff", "format", "--check", ".")
    session.run("ruff", "check", ".")
    session.run("mypy")


@nox.session(python=OLDEST, allow_parallel=True)
def full(session: nox.Session) -> None:
    """Every extra, at the lowest supported JAX and Gymnasium; what `newest` cannot run."""
    session.install("-e", ".[all,dev]", lowest("jax"), lowest("gymnasium"))
    leave = ("--leave-families-to", NEWEST_EXTRAS)
    env = caches(session)  # one cache for both runs: JAX's cache keys include XLA_FLAGS
    if session.posargs:  # the tests the arguments choose: one run, at the default emitters
        session.run(*PYTEST, *leave, *session.posargs, env={**env, "XLA_FLAGS": QUICK_COMPILE})
        return
    for share, flags in (("leave", f"{QUICK_COMPILE} {OLDER_EMITTERS}"), ("only", QUICK_COMPILE)):
        session.run(*PYTEST, *leave, f"--bit-for-bit={share}", env={**env, "XLA_FLAGS": flags})


@nox.session(python=NEWEST, allow_parallel=False)  # alone: its tests use every core
def newest(session: nox.Session) -> None:
    """The newest JAX, Flax and Gymnasium, without gymnax; the families' tests."""
    session.install("-e", f".[{NEWEST_EXTRAS}]", "jax>=0.12", "gymnasium>=1.4")
    session.run(*PYTEST, "--families-only", *session.posargs, env=caches(session))


@nox.session(python=OLDEST, allow_parallel=True)
def wheel(session: nox.Session) -> None:
    """Builds, checks, and runs the README's examples from the wheel in a clean environment."""
    session.install("build[uv]", "twine")
    dist = pathlib.Path(session.create_tmp()).resolve() / "dist"
    shutil.rmtree(dist, ignore_errors=True)  # only this run's files
    session.run("python", "-m", "build", "--installer", "uv", "--outdir", str(dist), ".")
    built = sorted(str(path) for path in dist.iterdir())
    session.run("twine", "check", "--strict", *built)
    (wheel_file,) = dist.glob("*.whl")
    clean = dist.parent / "clean"
    session.run("uv", "venv", "-q", "--python", OLDEST, str(clean), external=True)
    python = str(clean / "bin" / "python")
    session.run(
        "uv", "pip", "install", "-q", "--python", python, f"{wheel_file}[gymnasium]", external=True
    )
    # From outside the checkout, so that only the installed wheel can be imported.
    session.chdir(dist.parent)
    session.run(python, str(ROOT / "tests" / "readme_examples.py"), external=True)


def chromium(session: nox.Session) -> str:
    """The headless browser of the docs' layout check: ``chromium``, or Debian's, installed by root.

    CI runs as root on a clean Debian machine: the package and the 18 libraries it needs are
    about 120 MB to download and 13 s of CPU time to install.
    """
    found = shutil.which("chromium")
    if found is None and getattr(os, "geteuid", lambda: -1)() == 0 and shutil.which("apt-get"):
        quiet = {"DEBIAN_FRONTEND": "noninteractive"}
        session.run("apt-get", "update", "-qq", external=True, env=quiet)
        install = ("apt-get", "install", "-y", "-qq", "--no-install-recommends", "chromium")
        session.run(*install, external=True, env=quiet)
        found = shutil.which("chromium")
    if found is None:
        session.error("the docs session needs Chromium as `chromium` on the PATH")
    return found


@nox.session(python=OLDEST, allow_parallel=True)
def docs(session: nox.Session) -> None:
    """The documentation site, warnings as errors; its tables and code blocks checked."""
    session.install("-e", ".[docs]")
    site = "docs/_build/html"
    session.run("sphinx-build", "-W", "--keep-going", "-q", "-b", "html", "docs", site)
    session.run("python", "docs/check_tables.py", site)
    session.run("python", "docs/check_code_width.py", "--browser", chromium(session), site)
