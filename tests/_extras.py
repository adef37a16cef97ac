"""Which optional dependencies a test file needs, and the skip reason where one is missing.

A file needs a module when it imports it at the top (read with ``ast``,
without importing the file). Two kinds of modules can be missing on purpose:
a framework that an extra of ``rewardnorm-jax`` installs (``OPTIONAL``), and a
``rewardnorm_jax`` subpackage whose import raises ``MissingExtraError`` (the
adapters and the examples). Anything else missing is a real error and is left
to fail.
"""

import ast
import importlib
import importlib.util
from collections.abc import Iterable

from rewardnorm_jax._src.core.extras import MissingExtraError, install_hint

# Modules the tests, notebooks and benchmarks import from an extra: name -> extra (optax is
# not one: flax, a dependency of the core, installs it).
OPTIONAL = {
    "gymnax": "gymnax",
    "six": "gymnax",
    "jaxmarl": "jaxmarl",
    "gymnasium": "gymnasium",
    "brax": "brax",
    "jumanji": "jumanji",
    "mujoco_playground": "playground",
    "craftax": "craftax",
    "mo_gymnasium": "mo-gymnasium",
    "matplotlib": "demo",
    "rlax": "dev",
    "tunix": "tunix",
    "grain": "tunix",
}


# The library's modules that need an extra: rewardnorm_jax.<name> -> extra.
SUBPACKAGES = {
    "gymnax": "gymnax",
    "gymnasium": "gymnasium",
    "brax": "brax",
    "jumanji": "jumanji",
    "jaxmarl": "jaxmarl",
    "tunix": "tunix",
    "demo": "demo",
    "examples": "demo",
}


def extras_needed(modules: Iterable[str]) -> set[str]:
    """The extras that install ``modules`` (frameworks, and the library's adapters)."""
    extras = set()
    for name in modules:
        top, _, rest = name.partition(".")
        if top in OPTIONAL:
            extras.add(OPTIONAL[top])
        elif top == "rewardnorm_jax" and rest.partition(".")[0] in SUBPACKAGES:
            extras.add(SUBPACKAGES[rest.partition(".")[0]])
    return extras


def imported_modules(source: str) -> list[str]:
    """Modules that the top level of ``source`` imports (``from a import b`` gives a and a.b)."""
    names = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names += [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
    return names


def missing_reason(modules: Iterable[str]) -> str | None:
    """Why a file that imports ``modules`` cannot run here, or None if it can."""
    for name in modules:
        top = name.partition(".")[0]
        if top in OPTIONAL and importlib.util.find_spec(top) is None:
            return install_hint(top, OPTIONAL[top])
        if top == "rewardnorm_jax":
            try:
                importlib.import_module(name)
            except MissingExtraError as error:
                return str(error)
            except ImportError:  # a name inside a module, not a module
                pass
    return None
