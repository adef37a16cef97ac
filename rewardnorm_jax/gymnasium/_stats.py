r"""Running statistics of the discounted return for the Gymnasium wrappers (host, float64).

:class:`RunningMeanStd` has the interface of Gymnasium's own
``gymnasium.wrappers.utils.RunningMeanStd`` (``mean``, ``var``, ``count``,
``update``, ``update_from_moments``), so code written against a Gymnasium
wrapper's ``return_rms`` keeps working, and the merge is the library's one
copy of Chan et al.'s algorithm
(:func:`rewardnorm_jax._src.formulas.chan_increments`). The layout follows
the JAX core's :class:`~rewardnorm_jax.RunningStats`: a float64 mean, the
float64 sum of squared deviations ``m2`` (prior included) and an exact
integer sample count, so the statistics convert to and from the core's state.
"""

import math
from collections.abc import Mapping
from typing import Any

import jax.numpy as jnp
import numpy as np

from rewardnorm_jax._src import formulas
from rewardnorm_jax._src import running_stats as rs
from rewardnorm_jax.gymnasium import _namespaces as ns

PRIOR_COUNT = rs.PRIOR_COUNT
_STATE_KEYS = ("mean", "m2", "samples")


class RunningMeanStd:
    r"""Mean, variance and count of a stream of scalars, merged batch by batch.

    Starts from the prior of Gymnasium and Stable-Baselines3 (mean 0,
    variance 1, weight ``1e-4``). Each batch of :math:`n_b` values with mean
    :math:`\mu_b` and population variance :math:`\sigma_b^2` joins as

    .. math::
      n' = n + n_b, \quad
      \mu' = \mu + \delta \frac{n_b}{n'}, \quad
      M' = M + \sigma_b^2 n_b + \delta^2 \frac{n\, n_b}{n'},
      \quad \delta = \mu_b - \mu, \quad \sigma'^2 = M' / n'.

    Attributes:
      mean: running mean (``numpy.float64``).
      var: running population variance ``m2 / count`` (``numpy.float64``).
      count: samples seen plus the prior weight ``1e-4`` (float), as Gymnasium's.
      m2: sum of squared deviations including the prior's ``1e-4`` (float).
      samples: exact number of samples seen (int).

    Save and restore with :meth:`get_state` / :meth:`set_state` (plain Python
    numbers, bit-exact), pickle, or convert to the JAX core's state with
    :meth:`to_running_stats` / :meth:`from_running_stats`.

    Example:
      >>> rms = RunningMeanStd()
      >>> rms.update(np.array([1.0, 2.0, 3.0]))
      >>> round(float(rms.mean), 3), round(float(rms.var), 3), rms.samples
      (2.0, 0.667, 3)
    """

    __slots__ = ("_m2", "_mean", "_samples")

    def __init__(self):
        self._mean = 0.0
        self._m2 = PRIOR_COUNT
        self._samples = 0

    @property
    def mean(self) -> np.float64:
        return np.float64(self._mean)

    @property
    def var(self) -> np.float64:
        return np.float64(self._m2 / (self._samples + PRIOR_COUNT))

    @property
    def count(self) -> float:
        return self._samples + PRIOR_COUNT

    @property
    def m2(self) -> float:
        return self._m2

    @property
    def samples(self) -> int:
        return self._samples

    def update(self, x) -> None:
        """Merges the values of a 1-D array (its moments in its own dtype, as NumPy's)."""
        x = np.asarray(x)
        if x.ndim != 1:
            raise ValueError(f"x should be a 1-D array of values, got shape {x.shape}.")
        if x.size:
            _, batch_mean, batch_var = formulas.batch_moments(ns.numpy, x, True, ns.sum_all)
            self.update_from_moments(batch_mean, batch_var, x.shape[0])

    def update_from_moments(self, batch_mean, batch_var, batch_count: int) -> None:
        """Merges a batch given by its mean, population variance and size.

        The arithmetic promotes as Gymnasium's does: the mean difference is
        float64, while ``batch_var * batch_count`` keeps the dtype of
        ``batch_var`` (float32 moments of float32 returns stay float32 there).
        """
        if batch_count != int(batch_count) or batch_count < 0:
            raise ValueError(f"batch_count should be a non-negative integer, got {batch_count!r}.")
        if not isinstance(batch_mean, float):
            batch_mean = np.float64(batch_mean)
        delta_mean, delta_m2, _ = formulas.chan_increments(
            self._samples + PRIOR_COUNT, self._mean, int(batch_count), batch_mean, batch_var
        )
        self._mean = float(self._mean + delta_mean)
        self._m2 = float(self._m2 + delta_m2)
        self._samples += int(batch_count)

    def get_state(self) -> dict[str, Any]:
        """The statistics as ``{"mean": float, "m2": float, "samples": int}``."""
        return {"mean": self._mean, "m2": self._m2, "samples": self._samples}

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restores statistics saved by :meth:`get_state` (bit-exact).

        Raises:
          ValueError: for missing keys, a non-finite mean, a negative or
            non-finite ``m2``, or a negative or non-integer ``samples``.
        """
        missing = [key for key in _STATE_KEYS if key not in state]
        if missing:
            raise ValueError(f"state is missing {missing}; expected keys {_STATE_KEYS}.")
        mean, m2, samples = float(state["mean"]), float(state["m2"]), state["samples"]
        if not math.isfinite(mean):
            raise ValueError(f"mean should be finite, got mean={mean!r}.")
        if not (math.isfinite(m2) and m2 >= 0.0):
            raise ValueError(f"m2 should be finite and >= 0, got m2={m2!r}.")
        if samples != int(samples) or samples < 0:
            raise ValueError(f"samples should be a non-negative integer, got {samples!r}.")
        self._mean, self._m2, self._samples = mean, m2, int(samples)

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> "RunningMeanStd":
        """New statistics from :meth:`get_state`'s dictionary."""
        rms = cls()
        rms.set_state(state)
        return rms

    def to_running_stats(self, dtype=None) -> rs.RunningStats:
        """The JAX core's :class:`~rewardnorm_jax.RunningStats` holding these statistics.

        In float64 (JAX's x64 mode) the conversion is exact. In float32 the
        mean and ``m2`` are split into a float32 value and its float32
        rounding error (the core's ``mean_low`` / ``m2_low``), which keeps
        about 48 of float64's 53 bits.

        Args:
          dtype: float32 or float64; default float64 under x64, float32 otherwise.
        """
        dtype = rs.check_dtype(dtype)

        def split(value: float):
            high = np.asarray(value, dtype)
            return jnp.asarray(high), jnp.asarray(np.asarray(value - float(high), dtype))

        mean, mean_low = split(self._mean)
        m2, m2_low = split(self._m2)
        return rs.RunningStats.from_parts(
            mean=mean,
            mean_low=mean_low,
            m2=m2,
            m2_low=m2_low,
            count_hi=jnp.asarray(self._samples >> 32, jnp.uint32),
            count_lo=jnp.asarray(self._samples & 0xFFFFFFFF, jnp.uint32),
        )

    @classmethod
    def from_running_stats(cls, stats: rs.RunningStats) -> "RunningMeanStd":
        """Host statistics from the core's :class:`~rewardnorm_jax.RunningStats` of shape ``()``.

        Exact for float32 statistics and for float64 ones whose low words are
        zero (as :meth:`to_running_stats` writes them).
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

        def join(high, low) -> float:
            return float(np.float64(np.asarray(high)) + np.float64(np.asarray(low)))

        return cls.from_state(
            {
                "mean": join(stats.mean, stats.mean_low),
                "m2": join(stats.m2, stats.m2_low),
                "samples": int(rs.count_as_int(stats)),
            }
        )

    def __repr__(self) -> str:
        return f"RunningMeanStd(mean={self._mean!r}, var={float(self.var)!r}, count={self.count!r})"
