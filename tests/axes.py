"""What the contract registries' axes share: values near float32's limits, the outcome of a case."""

import re

import jax
import numpy as np

TINY, HUGE = 1e-45, 3e38  # float32's smallest subnormal, and near its largest number


def as_float32(options):
    """Option values rounded to float32, so that float64 computes with the same numbers."""
    return jax.tree.map(lambda x: np.float32(x).item() if isinstance(x, float) else x, options)


def outcome(fn, *args, **kwargs):
    """``(fn(*args, **kwargs), None)``, or ``(None, error)`` for a TypeError or ValueError."""
    try:
        return fn(*args, **kwargs), None
    except (TypeError, ValueError) as error:
        return None, error


def refused_by_name(error, names) -> bool:
    """Whether ``error``'s message names one of ``names`` (as a word)."""
    return re.search(rf"\b({'|'.join(names)})\b", str(error)) is not None


def assert_float64(actual, desired, rtol=1e-5):
    """``actual`` is ``desired`` (float64) rounded to float32: inf where it is beyond range."""
    for got, want in zip(jax.tree.leaves(actual), jax.tree.leaves(desired), strict=True):
        with np.errstate(over="ignore"):
            want = np.asarray(want, np.float64).astype(np.float32)
        np.testing.assert_allclose(np.asarray(got, np.float32), want, rtol=rtol, atol=1e-5)
