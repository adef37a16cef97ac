r"""Gymnasium's ``RunningMeanStd`` interface over the library's statistics, on the host.

:class:`RunningMeanStd` holds a :class:`~rewardnorm_jax.RunningStats`, the JAX
core's statistics type, whose arrays are NumPy arrays on the host (float64
``moments``: mean, mean_low, m2, m2_low; uint32 ``count_words``), and merges
batches with :func:`rewardnorm_jax._src.formulas.merge_moments`, the code the
core jits. Gymnasium's attributes (``mean``, ``var``, ``count``, ``update``,
``update_from_moments``) read and write that state, so code written against a
Gymnasium wrapper's ``return_rms`` keeps working.
"""

import math
import numbers
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rewardnorm_jax._src import base, checkpoint, formulas
from rewardnorm_jax._src import running_stats as rs

PRIOR_COUNT = rs.PRIOR_COUNT
_WORD = 2**32
_MAX_SAMPLES = 2**64 - 1  # the two uint32 count words
_FLOAT_FIELDS = ("mean", "mean_low", "m2", "m2_low")
_STATE_KEYS = ("mean", "m2", "samples")


def _prior() -> rs.RunningStats:
    """The core's prior statistics in float64, as writable host arrays."""
    with jax.enable_x64(True):
        return jax.tree.map(np.array, rs.init_stats((), jnp.float64))


def _real(name: str, value) -> float:
    """``value`` as a float, or a ValueError naming ``name``."""
    if not base.is_real(value):
        raise ValueError(f"{name} should be a real number, got {name}={value!r}.")
    return float(value)


def _samples(value) -> int:
    """A sample count: an integer in [0, 2^64 - 1], or a ValueError."""
    if isinstance(value, (numbers.Integral, np.integer)) and not isinstance(value, bool):
        samples = int(value)
    elif base.is_real(value) and math.isfinite(float(value)) and float(value).is_integer():
        samples = int(float(value))
    else:
        raise ValueError(f"samples should be a non-negative integer, got samples={value!r}.")
    if not 0 <= samples <= _MAX_SAMPLES:
        raise ValueError(
            f"samples should be an integer in [0, 2**64 - 1] (two uint32 words), "
            f"got samples={value!r}."
        )
    return samples


class RunningMeanStd:
    r"""Mean, variance and count of a stream of scalars, merged batch by batch.

    Starts from the prior of Gymnasium and Stable-Baselines3 (mean 0,
    variance 1, weight ``1e-4``). Each batch of :math:`n_b` values with mean
    :math:`\mu_b` and population variance :math:`\sigma_b^2` joins as

    .. math::
      n' = n + n_b, \quad
      \mu' = \mu + \delta \frac{n_b}{n'}, \quad
      M' = M + \sigma_b^2 n_b + \delta^2 \frac{n\, n_b}{n'},
      \quad \delta = \mu_b - \mu, \quad \sigma'^2 = M' / n',

    with the JAX core's code (compensated sums, an exact integer count), in
    float64. The state is :attr:`stats`; everything else is a view of it.

    Attributes:
      stats: the :class:`~rewardnorm_jax.RunningStats` (host NumPy arrays).
      mean: running mean (``numpy.float64``); assignable, as in Gymnasium.
      var: running population variance ``M / count`` (``numpy.float64``);
        assignable.
      count: samples seen plus the prior weight ``1e-4`` (float); assignable
        with a value of that form (the variance is kept).
      m2: sum of squared deviations :math:`M`, prior included (float).
      samples: exact number of samples seen (int).

    Save and restore with :meth:`get_state` / :meth:`set_state` (plain Python
    numbers, bit-exact), pickle, or move to the JAX core with
    :meth:`to_running_stats` / :meth:`from_running_stats`.

    Example:
      >>> rms = RunningMeanStd()
      >>> rms.update(np.array([1.0, 2.0, 3.0]))
      >>> round(float(rms.mean), 3), round(float(rms.var), 3), rms.samples
      (2.0, 0.667, 3)
    """

    __slots__ = ("stats",)

    def __init__(self):
        """Statistics of the prior alone: mean 0, variance 1, count ``1e-4``."""
        self.stats = _prior()

    # -- the view ---------------------------------------------------------------

    @property
    def samples(self) -> int:
        """Exact number of samples seen (int)."""
        high, low = self.stats.count_words.tolist()
        return (high << 32) | low

    @property
    def count(self) -> float:
        """Samples seen plus the prior weight ``1e-4``, as Gymnasium's ``count``."""
        return self.samples + PRIOR_COUNT

    @count.setter
    def count(self, value) -> None:
        count = _real("count", value)
        samples = round(count - PRIOR_COUNT) if math.isfinite(count) else -1
        if samples < 0 or not math.isclose(samples + PRIOR_COUNT, count, rel_tol=1e-12):
            raise ValueError(
                "count should be a number of samples plus the prior weight 1e-4 "
                f"(e.g. 10.0001), got count={value!r}."
            )
        var = float(self.var)
        self._set_samples(_samples(samples))
        self._write(float(self.mean), 0.0, var * self.count, 0.0)

    @property
    def mean(self) -> np.float64:
        """Running mean, as Gymnasium's ``mean``."""
        mean, mean_low, _, _ = self.stats.moments.tolist()
        return np.float64(mean + mean_low)

    @mean.setter
    def mean(self, value) -> None:
        self._write(_real("mean", value), 0.0, self.m2, 0.0)

    @property
    def m2(self) -> float:
        """Sum of squared deviations :math:`M`, the prior's included."""
        _, _, m2, m2_low = self.stats.moments.tolist()
        return m2 + m2_low

    @property
    def var(self) -> np.float64:
        """Population variance ``M / count``, as Gymnasium's ``var``."""
        return np.float64(self.m2 / self.count)

    @var.setter
    def var(self, value) -> None:
        var = _real("var", value)
        if not var >= 0.0:
            raise ValueError(f"var should be >= 0, got var={value!r}.")
        self._write(float(self.mean), 0.0, var * self.count, 0.0)

    def _write(self, mean: float, mean_low: float, m2: float, m2_low: float) -> None:
        """Replaces the float fields, after checking the new statistics."""
        moments = np.array([mean, mean_low, m2, m2_low], np.float64)
        stats = self.stats.replace(moments=moments)
        checkpoint.check_statistics(stats, "return_rms")
        self.stats = stats

    def _set_samples(self, samples: int) -> None:
        self.stats = self.stats.replace(count_words=np.array(divmod(samples, _WORD), np.uint32))

    # -- merging ----------------------------------------------------------------

    def update(self, x) -> None:
        """Merges the values of a 1-D array (its moments in its own dtype, as NumPy's)."""
        x = np.asarray(x)
        if x.ndim != 1:
            raise ValueError(f"x should be a 1-D array of values, got shape {x.shape}.")
        if x.size:
            batch_mean, batch_var = formulas.batch_moments(x)
            self.update_from_moments(batch_mean, batch_var, x.shape[0])

    def update_from_moments(self, batch_mean, batch_var, batch_count: int) -> None:
        """Merges a batch given by its mean, population variance and size.

        The arithmetic promotes as Gymnasium's does: the mean difference is
        float64, while ``batch_var * batch_count`` keeps the dtype of
        ``batch_var`` (float32 moments of float32 returns stay float32 there).

        Raises:
          ValueError: for a ``batch_count`` that is not a non-negative integer or
            a negative ``batch_var``.
        """
        if type(batch_count) is not int or batch_count < 0:
            batch_count = _samples(batch_count)
        if batch_var < 0:  # NaN passes: moments of overflowed returns saturate M
            raise ValueError(f"batch_var should be >= 0, got batch_var={batch_var!r}.")
        if type(batch_mean) is not float:  # a float64 mean difference, as Gymnasium's
            batch_mean = np.float64(batch_mean)
        moments, words = self.stats.moments, self.stats.count_words
        high, low = words.tolist()
        samples = (high << 32) | low
        if samples + batch_count > _MAX_SAMPLES:
            raise ValueError(
                f"the sample count would exceed 2**64 - 1 ({samples} + {batch_count})."
            )
        mean, mean_low, m2, m2_low = moments.tolist()
        moments[:] = formulas.merge_moments(
            np,
            mean,
            mean_low,
            m2,
            m2_low,
            samples + PRIOR_COUNT,
            batch_count,
            batch_mean,
            batch_var,
        )
        words[:] = divmod(samples + batch_count, _WORD)

    # -- state --------------------------------------------------------------------

    def get_state(self) -> dict[str, Any]:
        """The statistics as plain Python numbers (bit-exact).

        ``{"mean", "mean_low", "m2", "m2_low": float, "samples": int}``.
        """
        state: dict[str, Any] = dict(zip(_FLOAT_FIELDS, self.stats.moments.tolist(), strict=True))
        return {**state, "samples": self.samples}

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restores statistics saved by :meth:`get_state` (bit-exact).

        ``mean_low`` and ``m2_low`` may be left out (then 0).

        Raises:
          ValueError: for missing or unknown keys, a non-finite mean, an ``m2`` that is
            negative or NaN, a ``samples`` that is not an integer in
            [0, 2^64 - 1], or a value that is not a real number.
        """
        if not isinstance(state, Mapping):
            raise ValueError(f"state should be a mapping from get_state(), got {state!r}.")
        missing = [key for key in _STATE_KEYS if key not in state]
        if missing:
            raise ValueError(f"state is missing {missing}; expected keys {_STATE_KEYS}.")
        unknown = sorted(set(state) - {*_FLOAT_FIELDS, "samples"}, key=str)
        if unknown:
            raise ValueError(
                f"state has unknown keys {unknown}; expected {_STATE_KEYS} and optionally "
                "mean_low, m2_low (as get_state() returns them)."
            )
        values = [_real(key, state.get(key, 0.0)) for key in _FLOAT_FIELDS]
        samples = _samples(state["samples"])
        self._write(*values)
        self._set_samples(samples)

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> "RunningMeanStd":
        """New statistics from :meth:`get_state`'s dictionary."""
        rms = cls()
        rms.set_state(state)
        return rms

    def to_running_stats(self, dtype=None) -> rs.RunningStats:
        """The statistics as the JAX core's :class:`~rewardnorm_jax.RunningStats` (a copy).

        In float64 (JAX's x64 mode) the copy is exact. In float32 each
        float64 pair ``(high, low)`` becomes the float32 value nearest
        ``high`` and the float32 rounding of the remainder, which keeps about
        48 of float64's 53 bits; float32 statistics that came from the core
        convert back exactly.

        Args:
          dtype: float32 or float64; default float64 under x64, float32 otherwise.

        Raises:
          ValueError: for statistics that do not fit ``dtype`` (e.g. a float32
            mean beyond 3.4e38).
        """
        dtype = rs.check_dtype(dtype)
        parts = {}
        mean, mean_low, m2, m2_low = self.stats.moments.tolist()
        for name, high, low in (("mean", mean, mean_low), ("m2", m2, m2_low)):
            with np.errstate(over="ignore"):  # a value beyond float32 is refused below
                rounded = np.asarray(high, dtype)
                remainder = np.asarray((high - float(rounded)) + low, dtype)
            parts[name], parts[name + "_low"] = jnp.asarray(rounded), jnp.asarray(remainder)
        high_word, low_word = self.stats.count_words.tolist()
        stats = rs.RunningStats.from_parts(**parts, count_hi=high_word, count_lo=low_word)
        checkpoint.check_statistics(stats, f"return_rms in {dtype.name}")
        return stats

    @classmethod
    def from_running_stats(cls, stats: rs.RunningStats) -> "RunningMeanStd":
        """Host statistics from the core's :class:`~rewardnorm_jax.RunningStats` of shape ``()``.

        Exact: float32 and float64 values are held in float64 as they are.

        Raises:
          ValueError: for exponential moving statistics, a shape other than
            ``()``, or values no merge produces.
        """
        if getattr(stats, "decay", None) is not None:
            raise ValueError(
                f"exponential moving statistics (decay={stats.decay}) have no sample "
                "count to convert; RunningMeanStd holds equally weighted statistics."
            )
        if np.shape(stats.mean) != ():
            raise ValueError(
                "only statistics of shape () (one set shared by all environments) "
                f"convert to RunningMeanStd, got shape {np.shape(stats.mean)}."
            )
        rms = cls()
        values = [float(np.asarray(getattr(stats, key), np.float64)) for key in _FLOAT_FIELDS]
        rms._write(*values)
        rms._set_samples(int(rs.count_as_int(stats)))
        return rms

    def __getstate__(self):
        return self.get_state()

    def __setstate__(self, state):
        self.stats = _prior()
        self.set_state(state)

    def __repr__(self) -> str:
        mean, var = float(self.mean), float(self.var)
        return f"RunningMeanStd(mean={mean!r}, var={var!r}, count={self.count!r})"
