"""Host array namespaces that run :mod:`rewardnorm_jax._src.formulas` without JAX.

The Gymnasium adapters evaluate the very formulas the JAX transforms jit, but
on the host, where Gymnasium itself computes: a jitted call costs tens of
microseconds of dispatch per step, more than Gymnasium's whole wrapper.

* :data:`scalar`: Python floats and booleans (one environment). Every
  operation is a plain Python expression, well under a microsecond.
* :data:`numpy`: NumPy arrays (vector environments), with scalar fast paths:
  a condition that is the Python constant ``True`` or ``False`` selects
  without touching the arrays (``where(True, a, b)`` is ``a``), and scalar
  ``sqrt`` / ``maximum`` / ``minimum`` stay in Python. NumPy's dtype rules
  are kept everywhere else, so a float32 batch still gives float32 moments.
"""

import math
import types

import numpy as np


def _scalar_where(condition, x, y):
    return x if condition else y


def _scalar_maximum(x, y):
    # NaN in either argument propagates, as with ``numpy.maximum``.
    return x if (x >= y or x != x) else y


def _scalar_minimum(x, y):
    return x if (x <= y or x != x) else y


def _numpy_where(condition, x, y):
    if condition is True:
        return x
    if condition is False:
        return y
    return np.where(condition, x, y)


def _numpy_sqrt(x):
    return math.sqrt(x) if isinstance(x, float) else np.sqrt(x)


def _numpy_maximum(x, y):
    if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
        return np.maximum(x, y)
    return _scalar_maximum(x, y)


def _numpy_minimum(x, y):
    if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
        return np.minimum(x, y)
    return _scalar_minimum(x, y)


scalar = types.SimpleNamespace(
    where=_scalar_where, sqrt=math.sqrt, maximum=_scalar_maximum, minimum=_scalar_minimum
)
numpy = types.SimpleNamespace(
    where=_numpy_where, sqrt=_numpy_sqrt, maximum=_numpy_maximum, minimum=_numpy_minimum
)


def identity(x):
    """The reduction of a single value: nothing to sum."""
    return x


def sum_all(x: np.ndarray):
    """Sum of a 1-D array (NumPy's pairwise order, as ``numpy.mean`` uses)."""
    return x.sum()
