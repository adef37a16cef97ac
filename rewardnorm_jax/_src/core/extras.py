"""Optional dependencies: a subpackage whose framework is missing names the extra to install.

The core needs only jax, flax and numpy. Each adapter subpackage imports
its framework inside :func:`requires`, so that importing it without the
framework raises a :class:`MissingExtraError` with the command that fixes it.
"""

import contextlib
from collections.abc import Iterator


class MissingExtraError(ModuleNotFoundError):
    """An optional dependency of a subpackage is not installed; the message says which extra."""


@contextlib.contextmanager
def requires(extra: str, subpackage: str) -> Iterator[None]:
    """Turns a missing module inside the block into an error that names ``extra``.

    Args:
        extra: The extra of ``rewardnorm-jax`` that installs what the block imports.
        subpackage: The importing subpackage's name, for the message.

    Raises:
        MissingExtraError: If an import inside the block raised
            ``ModuleNotFoundError``: names the missing module and the command
            ``pip install "rewardnorm-jax[<extra>]"``.

    Example:
        >>> try:
        ...     with requires("gymnax", "rewardnorm_jax.gymnax"):
        ...         import not_a_module_anywhere
        ... except ImportError as error:
        ...     print(error)
        rewardnorm_jax.gymnax needs not_a_module_anywhere, which is not installed: pip install "rewardnorm-jax[gymnax]"
    """  # noqa: E501  (a doctest's expected output is one line)
    try:
        yield
    except ModuleNotFoundError as error:
        if isinstance(error, MissingExtraError) or _is_own(error.name):
            raise
        message = f"{subpackage} {install_hint(error.name, extra)}"
        raise MissingExtraError(message, name=error.name) from error


def install_hint(module: str | None, extra: str) -> str:
    """``needs <module>, which is not installed: pip install "rewardnorm-jax[<extra>]"``."""
    return f'needs {module}, which is not installed: pip install "rewardnorm-jax[{extra}]"'


def _is_own(module: str | None) -> bool:
    """Whether ``module`` is part of this library (missing means broken, not uninstalled)."""
    return module is not None and module.partition(".")[0] == "rewardnorm_jax"
