"""Gymnasium's ``RunningMeanStd`` interface over the library's statistics, on the host."""

import math
import numbers
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rewardnorm_jax._src.core import checks
from rewardnorm_jax._src.stats import formulas
from rewardnorm_jax._src.stats import running as rs

PRIOR_COUNT = rs.PRIOR_COUNT
_MAX_SAMPLES = 2**64 - 1  # the two uint32 count words of RunningStats
_FIELDS = ("mean", "mean_low", "m2", "m2_low")
_STATE_KEYS = ("mean", "m2", "samples")


def real(name: str, value) -> float:
    """``value`` as a Python float (NumPy scalars and 0-d arrays too), or a ValueError."""
    if not checks.is_real(value):
        raise ValueError(f"{name} should be a real number, got {name}={value!r}.")
    return float(value)


def _count(name: str, value) -> int:
    """A sample count: an integer (or integral float) in [0, 2^64 - 1], or a ValueError."""
    integral = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    samples = (
        int(value) if integral or (checks.is_real(value) and float(value).is_integer()) else -1
    )
    if not 0 <= samples <= _MAX_SAMPLES:  # NaN and inf are not integers either
        raise ValueError(f"{name} should be an integer in [0, 2**64 - 1], got {name}={value!r}.")
    return samples


def _host_stats(moments, samples) -> rs.RunningStats:
    """The core's :class:`~rewardnorm_jax.RunningStats` of these values, as host NumPy arrays.

    ``moments`` is one ``(mean, mean_low, m2, m2_low)`` and ``samples`` an int, or a sequence of
    each (statistics of shape ``(k,)``).
    """
    counts = samples if isinstance(samples, Sequence) else [samples]
    words = np.array([divmod(count, 2**32) for count in counts], np.uint32)
    words = words if isinstance(samples, Sequence) else words[0]
    return rs.RunningStats(np.array(moments, np.float64), words)  # type: ignore[arg-type]  # NumPy arrays, not jax.Array


class RunningMeanStd:
    r"""Mean, variance and count of a stream of scalars, merged batch by batch.

    Starts from Gymnasium's and SB3's prior (mean 0, variance 1, weight ``1e-4``); each batch joins
    by the parallel algorithm of Chan et al. (:doc:`/semantics` writes it out), with the JAX core's
    code (compensated sums, an exact integer count) in float64. ``mean``, ``var``, ``count`` and
    ``stats`` are assignable; values no merge produces (a non-finite mean, a negative or NaN
    :math:`M`, a count outside [0, 2^64 - 1]) raise ValueError wherever they could enter:
    assignments, :meth:`set_state`, unpickling, conversions.

    Example:
      >>> rms = RunningMeanStd()
      >>> rms.update(np.array([1.0, 2.0, 3.0]))
      >>> round(float(rms.mean), 3), round(float(rms.var), 3), rms.samples
      (2.0, 0.667, 3)
    """

    __slots__ = ("_moments", "_samples")

    def __init__(self):
        self._moments: tuple[float, float, float, float] = (0.0, 0.0, PRIOR_COUNT, 0.0)
        self._samples = 0

    @property
    def samples(self) -> int:
        """Exact number of samples seen (int)."""
        return self._samples

    @property
    def count(self) -> float:
        """Samples seen plus the prior weight ``1e-4``, as Gymnasium's ``count`` (float).

        Assignable with a value of that form; the variance is kept.
        """
        return self._samples + PRIOR_COUNT

    @count.setter
    def count(self, value) -> None:
        count = real("count", value)
        samples = round(count - PRIOR_COUNT) if math.isfinite(count) else -1
        if not (
            0 <= samples <= _MAX_SAMPLES
            and math.isclose(samples + PRIOR_COUNT, count, rel_tol=1e-12)
        ):
            raise ValueError(
                "count should be a number of samples plus the prior weight 1e-4 "
                f"(e.g. 10.0001), got count={value!r}."
            )
        self._set(float(self.mean), 0.0, float(self.var) * (samples + PRIOR_COUNT), 0.0, samples)

    @property
    def mean(self) -> np.float64:
        """Running mean, as Gymnasium's ``mean`` (``numpy.float64``)."""
        return np.float64(self._moments[0] + self._moments[1])

    @mean.setter
    def mean(self, value) -> None:
        self._set(real("mean", value), 0.0, self.m2, 0.0, self._samples)

    @property
    def m2(self) -> float:
        """Sum of squared deviations :math:`M`, the prior's included."""
        return float(self._moments[2] + self._moments[3])

    @property
    def var(self) -> np.float64:
        """Population variance ``M / count``, as Gymnasium's ``var`` (``numpy.float64``)."""
        return np.float64(self.m2 / self.count)

    @var.setter
    def var(self, value) -> None:
        var = real("var", value)
        if not var >= 0.0:
            raise ValueError(f"var should be >= 0, got var={value!r}.")
        self._set(float(self.mean), 0.0, var * self.count, 0.0, self._samples)

    @property
    def stats(self) -> rs.RunningStats:
        """The core's :class:`~rewardnorm_jax.RunningStats` of host arrays (a copy); assignable."""
        return _host_stats(self._moments, self._samples)

    @stats.setter
    def stats(self, stats: rs.RunningStats) -> None:
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
        mean, mean_low, m2, m2_low = (float(np.asarray(getattr(stats, k))) for k in _FIELDS)
        self._set(mean, mean_low, m2, m2_low, int(rs.count_as_int(stats)))

    def _set(self, mean: float, mean_low: float, m2: float, m2_low: float, samples: int) -> None:
        moments = (mean, mean_low, m2, m2_low)
        _host_stats(moments, samples).check_values("return_rms")
        self._moments, self._samples = moments, samples

    def update(self, x) -> None:
        """Merges the values of a 1-D array (its moments in its own dtype, as NumPy's)."""
        x = np.asarray(x)
        if x.ndim != 1 or x.dtype.kind not in "biuf":
            raise ValueError(
                f"x should be a 1-D array of real values, got shape {x.shape} and dtype {x.dtype}."
            )
        if x.size:
            batch_mean, batch_var = formulas.batch_moments(x)
            self.update_from_moments(batch_mean, batch_var, x.shape[0])

    def update_from_moments(self, batch_mean, batch_var, batch_count: int) -> None:
        """Merges a batch given by its mean, population variance (>= 0) and size.

        The arithmetic promotes as Gymnasium's: the mean difference is float64, while
        ``batch_var * batch_count`` keeps the dtype of ``batch_var``.
        """
        if type(batch_count) is not int or batch_count < 0:
            batch_count = _count("batch_count", batch_count)
        if type(batch_mean) is not float:  # a float64 mean difference, as Gymnasium's
            floating = isinstance(batch_mean, np.floating)
            batch_mean = np.float64(batch_mean if floating else real("batch_mean", batch_mean))
        if type(batch_var) is not float and not isinstance(batch_var, np.floating):
            batch_var = real("batch_var", batch_var)
        if batch_var < 0:  # NaN passes: moments of overflowed returns saturate M
            raise ValueError(f"batch_var should be >= 0, got batch_var={batch_var!r}.")
        samples = self._samples + batch_count
        if samples > _MAX_SAMPLES:
            raise ValueError(
                f"the sample count would exceed 2**64 - 1 ({self._samples} + {batch_count})."
            )
        mean, mean_low, m2, m2_low = self._moments
        weight = self._samples + PRIOR_COUNT
        delta = (batch_mean - mean) - mean_low
        self._moments = formulas.add_batch_moments(
            np, mean, mean_low, m2, m2_low, weight, batch_count, delta, batch_var
        )
        self._samples = samples

    def get_state(self) -> dict[str, Any]:
        """``{"mean", "mean_low", "m2", "m2_low": float, "samples": int}``, bit-exact."""
        moments = map(float, self._moments)
        return {**dict(zip(_FIELDS, moments, strict=True)), "samples": self._samples}

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restores :meth:`get_state`'s dictionary (``mean_low`` and ``m2_low`` may be left out).

        Raises:
          ValueError: for missing or unknown keys, values that are not real numbers, or
            statistics no merge produces.
        """
        if not isinstance(state, Mapping):
            raise ValueError(f"state should be a mapping from get_state(), got {state!r}.")
        missing = [key for key in _STATE_KEYS if key not in state]
        unknown = sorted(set(state) - {*_FIELDS, "samples"}, key=str)
        if missing or unknown:
            raise ValueError(
                f"state is missing {missing} and has unknown keys {unknown}; expected keys "
                f"{_STATE_KEYS} and optionally mean_low, m2_low (as get_state() returns them)."
            )
        mean, mean_low, m2, m2_low = (real(key, state.get(key, 0.0)) for key in _FIELDS)
        self._set(mean, mean_low, m2, m2_low, _count("samples", state["samples"]))

    # Pickling and copy.deepcopy go through the checked state.
    __getstate__ = get_state
    __setstate__ = set_state

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> "RunningMeanStd":
        """New statistics from :meth:`get_state`'s dictionary."""
        rms = cls()
        rms.set_state(state)
        return rms

    def to_running_stats(self, dtype=None) -> rs.RunningStats:
        """The statistics as the JAX core's :class:`~rewardnorm_jax.RunningStats` (a copy).

        Exact in float64 (the default under x64). In float32 (the default otherwise) each pair
        ``(high, low)`` becomes the float32 nearest ``high`` and the float32 rounding of the
        remainder, about 48 bits; the core's float32 statistics convert back exactly. Raises
        ValueError for statistics beyond ``dtype``'s range.
        """
        dtype = rs.check_dtype(dtype)
        parts = {}
        mean, mean_low, m2, m2_low = self._moments
        for name, high, low in (("mean", mean, mean_low), ("m2", m2, m2_low)):
            with np.errstate(over="ignore"):  # a value beyond float32 is refused below
                rounded = np.asarray(high, dtype)
                # A saturated M (+inf) keeps a zero remainder, as the merge leaves it.
                low = (high - float(rounded)) + low if math.isfinite(high) else 0.0
            parts[name], parts[name + "_low"] = jnp.asarray(rounded), jnp.asarray(low, dtype)
        high_word, low_word = divmod(self._samples, 2**32)
        stats = rs.RunningStats.from_parts(**parts, count_hi=high_word, count_lo=low_word)
        stats.check_values(f"return_rms in {dtype.name}")
        return stats

    @classmethod
    def from_running_stats(cls, stats: rs.RunningStats) -> "RunningMeanStd":
        """Host statistics from the core's :class:`~rewardnorm_jax.RunningStats` of shape ``()``.

        Exact (as assigning ``stats``). Raises ValueError for exponential moving statistics,
        another shape, or values no merge produces.
        """
        rms = cls()
        rms.stats = stats
        return rms

    def __repr__(self) -> str:
        mean, var = float(self.mean), float(self.var)
        return f"RunningMeanStd(mean={mean!r}, var={var!r}, count={self.count!r})"


class ObjectiveStats:
    r"""Running statistics of each objective of a vector reward: one :class:`RunningMeanStd` each.

    ``stats[i]`` is objective ``i``'s :class:`RunningMeanStd` (a live reference), so the
    statistics of objective :math:`i` are those a scalar ``NormalizeReward`` keeps of that
    objective's rewards alone, as MO-Gymnasium's ``MONormalizeReward(env, idx=i)`` does.
    ``mean``, ``var`` and ``count`` are float64 arrays of shape ``(k,)`` (copies), ``samples``
    a list of ints; ``stats`` is the core's :class:`~rewardnorm_jax.RunningStats` of shape
    ``(k,)`` (assignable, checked as :attr:`RunningMeanStd.stats`).

    Args:
      num_objectives: the number of objectives :math:`k \ge 1`.

    Example:
      >>> stats = ObjectiveStats(2)
      >>> stats[0].update(np.array([1.0, 3.0]))
      >>> stats.mean.round(3).tolist(), stats.samples
      ([2.0, 0.0], [2, 0])
    """

    __slots__ = ("_each",)
    _each: tuple[RunningMeanStd, ...]

    def __init__(self, num_objectives: int):
        if not (isinstance(num_objectives, numbers.Integral) and num_objectives >= 1):
            raise ValueError(
                f"num_objectives should be an integer >= 1, got num_objectives={num_objectives!r}."
            )
        self._each = tuple(RunningMeanStd() for _ in range(int(num_objectives)))

    def __len__(self) -> int:
        return len(self._each)

    def __getitem__(self, index: int) -> RunningMeanStd:
        return self._each[index]

    def __iter__(self) -> Iterator[RunningMeanStd]:
        return iter(self._each)

    @property
    def mean(self) -> np.ndarray:
        """Running mean of each objective, float64 ``(k,)``."""
        return np.array([stats.mean for stats in self._each])

    @property
    def var(self) -> np.ndarray:
        """Population variance of each objective, float64 ``(k,)``."""
        return np.array([stats.var for stats in self._each])

    @property
    def count(self) -> np.ndarray:
        """Samples of each objective plus the prior weight ``1e-4``, float64 ``(k,)``."""
        return np.array([stats.count for stats in self._each])

    @property
    def samples(self) -> list[int]:
        """Exact number of samples of each objective."""
        return [stats.samples for stats in self._each]

    @property
    def stats(self) -> rs.RunningStats:
        """The core's :class:`~rewardnorm_jax.RunningStats` of shape ``(k,)``, host arrays."""
        moments = [stats._moments for stats in self._each]
        return _host_stats(moments, self.samples)

    @stats.setter
    def stats(self, stats: rs.RunningStats) -> None:
        if np.shape(stats.mean) != (len(self),):
            raise ValueError(
                f"return_rms holds statistics of {len(self)} objectives (shape ({len(self)},)), "
                f"got statistics of shape {np.shape(stats.mean)}."
            )
        moments, words = np.asarray(stats.moments), np.asarray(stats.count_words)
        parts = [rs.RunningStats(moments[i], words[i], stats.decay) for i in range(len(self))]
        self.set_state([RunningMeanStd.from_running_stats(part).get_state() for part in parts])

    def get_state(self) -> list[dict[str, Any]]:
        """:meth:`RunningMeanStd.get_state` of each objective, in order."""
        return [stats.get_state() for stats in self._each]

    def set_state(self, state: Sequence[Mapping[str, Any]]) -> None:
        """Restores :meth:`get_state`'s list (all objectives checked before any changes)."""
        if isinstance(state, (str, Mapping)) or not isinstance(state, Sequence):
            raise ValueError(f"state should be the list from get_state(), got {state!r}.")
        if len(state) != len(self):
            raise ValueError(
                f"state holds statistics of {len(state)} objectives, expected {len(self)}."
            )
        checked = [RunningMeanStd.from_state(each).get_state() for each in state]
        for stats, each in zip(self._each, checked, strict=True):
            stats.set_state(each)

    def __getstate__(self) -> list[dict[str, Any]]:
        return self.get_state()

    def __setstate__(self, state: Sequence[Mapping[str, Any]]) -> None:
        self._each = tuple(RunningMeanStd() for _ in state)
        self.set_state(state)

    def to_running_stats(self, dtype=None) -> rs.RunningStats:
        """The core's :class:`~rewardnorm_jax.RunningStats` of shape ``(k,)`` (a copy).

        Each objective's :meth:`RunningMeanStd.to_running_stats`, stacked: exact in float64.
        """
        each = [stats.to_running_stats(dtype) for stats in self._each]
        return jax.tree.map(lambda *leaves: jnp.stack(leaves), *each)

    def __repr__(self) -> str:
        return (
            f"ObjectiveStats(mean={self.mean.tolist()!r}, var={self.var.tolist()!r}, "
            f"count={self.count.tolist()!r})"
        )
