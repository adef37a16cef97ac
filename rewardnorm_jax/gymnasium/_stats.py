"""Gymnasium's ``RunningMeanStd`` interface over the library's statistics, on the host."""

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, ClassVar

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
    if not checks.is_real(value, name):
        raise ValueError(f"{name} should be a real number, got {name}={value!r}.")
    return float(value)


def _count(name: str, value) -> int:
    """A sample count: an integer (or integral float) in [0, 2^64 - 1].

    The core's :func:`~rewardnorm_jax._src.core.checks.check_count`: TypeError for a value that
    is not an integer (a bool, NaN, 2.5), ValueError for one out of range.
    """
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        value = int(value)  # 3.0 samples are 3
    return checks.check_count(name, value, minimum=0, maximum=_MAX_SAMPLES)


def _plain_moments(mean, m2) -> np.ndarray:
    """The moments ``(*shape, 4)`` of this mean and :math:`M`, with zero low words."""
    return np.stack(np.broadcast_arrays(mean, 0.0, m2, 0.0), -1)


def _host_stats(moments: np.ndarray, samples: np.ndarray) -> rs.RunningStats:
    """The core's :class:`~rewardnorm_jax.RunningStats` of these moments and sample counts."""
    words = np.stack([samples >> np.uint64(32), samples & np.uint64(2**32 - 1)], -1)
    return rs.RunningStats(moments, words.astype(np.uint32))  # type: ignore[arg-type]  # host arrays


class RunningMeanStd:
    r"""Mean, variance and count of a stream of arrays of ``shape``, merged batch by batch.

    Starts from Gymnasium's and SB3's prior (mean 0, variance 1, weight ``1e-4``); each batch joins
    by the parallel algorithm of Chan et al. (:doc:`/semantics` writes it out), with the JAX core's
    code (compensated sums, an exact integer count) in float64, entry by entry: each entry of
    ``shape`` keeps its own statistics, as the core's :class:`~rewardnorm_jax.RunningStats` of
    that shape. ``mean``, ``var``, ``count`` and ``stats`` are assignable; values no merge
    produces (a non-finite mean, a negative or NaN :math:`M`, a count outside [0, 2^64 - 1])
    raise ValueError wherever they could enter: assignments, :meth:`set_state`, unpickling,
    conversions.

    Args:
      shape: the shape of one sample (an int ``n`` means ``(n,)``), ``()`` (the default) for a
        stream of numbers.

    Example:
      >>> rms = RunningMeanStd()
      >>> rms.update(np.array([1.0, 2.0, 3.0]))
      >>> round(float(rms.mean), 3), round(float(rms.var), 3), rms.samples
      (2.0, 0.667, 3)
    """

    __slots__ = ("_moments", "_samples")
    _shape_in_repr: ClassVar[bool] = True  # repr names the shape

    def __init__(self, shape: int | tuple[int, ...] = ()):
        shape = checks.check_batch_shape(shape, "shape")
        self._moments = np.zeros((*shape, 4))  # mean, mean_low, m2, m2_low of each entry
        self._moments[..., 2] = PRIOR_COUNT
        self._samples = np.zeros(shape, np.uint64)

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape of one sample (and of ``mean``, ``var`` and ``count``)."""
        return self._samples.shape

    @property
    def samples(self):
        """Exact number of samples seen: an int, or (nested) lists of them for each entry."""
        return self._samples.tolist()

    @property
    def count(self):
        """Samples seen plus the prior weight ``1e-4``, as Gymnasium's ``count`` (float64).

        Assignable with a value of that form (one for every entry, or one each); the variance
        is kept.
        """
        return self._held()[0] + PRIOR_COUNT

    @count.setter
    def count(self, value) -> None:
        count = self._reals("count", value)
        samples = np.round(count - PRIOR_COUNT)
        fits = (samples >= 0) & (samples < 2.0**64)
        exact = np.isclose(samples + PRIOR_COUNT, count, rtol=1e-12, atol=0)
        expected = "a number of samples plus the prior weight 1e-4 (e.g. 10.0001)"
        checks.refuse_where("count", count, ~(fits & exact), expected)
        moments = _plain_moments(self.mean, self.var * (samples + PRIOR_COUNT))
        self._set(moments, samples.astype(np.uint64))

    @property
    def mean(self):
        """Running mean, as Gymnasium's ``mean`` (``numpy.float64``, an array for a shape)."""
        _, mean, mean_low, _, _ = self._held()
        return np.float64(mean + mean_low)

    @mean.setter
    def mean(self, value) -> None:
        self._set(_plain_moments(self._reals("mean", value), self.m2), self._samples)

    @property
    def m2(self):
        """Sum of squared deviations :math:`M`, the prior's included."""
        _, _, _, m2, m2_low = self._held()
        return np.float64(m2 + m2_low)

    @property
    def var(self):
        """Population variance ``M / count``, as Gymnasium's ``var`` (``numpy.float64``)."""
        past, _, _, m2, m2_low = self._held()
        return np.float64((m2 + m2_low) / (past + PRIOR_COUNT))

    @var.setter
    def var(self, value) -> None:
        var = self._reals("var", value)
        checks.refuse_where("var", var, ~(var >= 0.0), "a variance >= 0")
        self._set(_plain_moments(self.mean, var * self.count), self._samples)

    @property
    def stats(self) -> rs.RunningStats:
        """The core's :class:`~rewardnorm_jax.RunningStats` of host arrays (a copy); assignable."""
        return _host_stats(self._moments.copy(), self._samples)

    @stats.setter
    def stats(self, stats: rs.RunningStats) -> None:
        weighting = (stats.decay, stats.step_size, stats.prior_count)
        if weighting != (None, None, PRIOR_COUNT):  # their variance divides by another weight
            raise ValueError(
                f"statistics of (decay, step_size, prior_count)={weighting} have no sample count "
                f"to convert; {type(self).__name__} holds equally weighted statistics."
            )
        if np.shape(stats.mean) != self.shape:  # an ObjectiveStats of k objectives: (k,)
            raise ValueError(
                f"{type(self).__name__} holds statistics of shape {self.shape}, got statistics of "
                f"shape {np.shape(stats.mean)}."
            )
        self._set(np.asarray(stats.moments, np.float64), rs.count_as_int(stats))

    def _reals(self, name: str, value):
        """``value`` as float64 of ``shape`` (one number for every entry broadcasts)."""
        if not self.shape:
            return np.float64(real(name, value))
        array = np.asarray(value)
        if array.dtype.kind not in "iuf" or array.shape not in ((), self.shape):
            expected = f"real numbers of shape {self.shape}"
            raise ValueError(f"{name} should be {expected}, got {name}={value!r}.")
        return np.broadcast_to(array.astype(np.float64), self.shape)

    def _set(self, moments: np.ndarray, samples: np.ndarray) -> None:
        """Checks statistics and writes them in place (views of these statistics see them)."""
        _host_stats(moments, samples).check_values(type(self).__name__)
        self._moments[...], self._samples[...] = moments, samples

    def update(self, x) -> None:
        """Merges a batch of samples along the first axis: each entry's mean and variance.

        NumPy's two passes (``numpy.mean`` / ``numpy.var``), floating samples in their own dtype,
        integer and boolean ones in float64. Non-finite values are left out: each entry counts
        its own samples, and NaN never enters the statistics.
        """
        x = np.asarray(x)
        if x.shape[1:] != self.shape or x.ndim == 0 or x.dtype.kind not in "biuf":
            expected = f"an array of shape (n, {', '.join(map(str, self.shape))})"
            raise ValueError(
                f"x should be {expected if self.shape else 'a 1-D array'} of real values, got "
                f"shape {x.shape} and dtype {x.dtype}."
            )
        x = x if x.dtype.kind == "f" else x.astype(np.float64)
        finite = np.isfinite(x)
        counts = np.add.reduce(finite, dtype=np.int64)
        divisor = np.maximum(counts, 1).astype(x.dtype)  # exact below 2^24 (float32)
        mean = np.add.reduce(np.where(finite, x, 0.0)) / divisor
        deviation = np.where(finite, x - mean, 0.0)
        if x.shape[0]:
            self.update_from_moments(mean, np.add.reduce(deviation * deviation) / divisor, counts)

    def update_from_moments(self, batch_mean, batch_var, batch_count) -> None:
        """Merges a batch given by its mean, population variance (>= 0) and size.

        The arithmetic promotes as Gymnasium's: the mean difference is float64, while
        ``batch_var * batch_count`` keeps the dtype of ``batch_var``. With a ``shape``, each
        argument is one value for every entry or an array of that shape.
        """
        shaped = self._samples.ndim > 0
        python_numbers = type(batch_mean) is type(batch_var) is float and type(batch_count) is int
        if shaped or not python_numbers or batch_count < 0 or batch_var < 0:
            batch_mean, batch_var, batch_count = self._checked_batch(
                batch_mean, batch_var, batch_count
            )
        past, mean, mean_low, m2, m2_low = self._held()
        exceeds = batch_count > _MAX_SAMPLES - past
        if np.any(exceeds) if shaped else exceeds:
            raise ValueError(f"the sample count would exceed 2**64 - 1 ({past} + {batch_count}).")
        delta = (batch_mean - mean) - mean_low
        merged = formulas.add_batch_moments(
            np, mean, mean_low, m2, m2_low, past + PRIOR_COUNT, batch_count, delta, batch_var
        )
        if shaped:  # each field's new values, into the fields' views
            np.moveaxis(self._moments, -1, 0)[...] = merged
        else:
            self._moments[:] = merged
        self._samples[...] = past + batch_count

    def _held(self) -> tuple[Any, ...]:
        """``(samples, mean, mean_low, m2, m2_low)``: numbers for shape ``()``, else views."""
        if self._samples.ndim:
            return self._samples, *np.moveaxis(self._moments, -1, 0)
        return self._samples.item(), *self._moments.tolist()

    def _checked_batch(self, batch_mean, batch_var, batch_count):
        """The batch's moments checked: a float64 mean, a variance >= 0, integer counts."""
        counts = np.asarray(batch_count)
        if counts.dtype.kind not in "ui" or np.any(counts < 0):  # checked one by one
            counts = np.vectorize(_count, otypes=[np.uint64])("batch_count", batch_count)
        if counts.shape not in ((), self.shape):
            raise ValueError(f"batch_count should have shape {self.shape}, got {batch_count!r}.")
        # batch_var * batch_count keeps a floating batch_var's dtype, as Gymnasium's
        floating = np.asarray(batch_var).dtype.kind == "f" and np.ndim(batch_var) == 0
        batch_var = (
            batch_var if floating and not self.shape else self._reals("batch_var", batch_var)
        )
        # NaN passes: moments of overflowed returns saturate M.
        checks.refuse_where("batch_var", batch_var, batch_var < 0, "a variance >= 0")
        return (
            self._reals("batch_mean", batch_mean),
            batch_var,
            counts.astype(np.uint64) if self.shape else int(counts),
        )

    def get_state(self) -> dict[str, Any]:
        """``{"mean", "mean_low", "m2", "m2_low": float, "samples": int}``, bit-exact.

        With a ``shape``, each value is (nested) lists of the entries' values.
        """
        moments = np.moveaxis(self._moments, -1, 0).tolist()
        return {**dict(zip(_FIELDS, moments, strict=True)), "samples": self.samples}

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restores :meth:`get_state`'s dictionary (``mean_low`` and ``m2_low`` may be left out).

        Raises:
          TypeError: for sample counts that are not integers.
          ValueError: for missing or unknown keys, values that are not real numbers (of
            ``shape``), counts out of range, or statistics no merge produces.
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
        words = np.stack([self._reals(key, state.get(key, 0.0)) for key in _FIELDS], -1)
        samples = np.vectorize(_count, otypes=[np.uint64])("samples", state["samples"])
        if np.shape(samples) != self.shape:
            raise ValueError(f"samples should have shape {self.shape}, got {state['samples']!r}.")
        self._set(words, samples)

    # Pickling and copy.deepcopy go through the checked state.
    __getstate__ = get_state

    def __setstate__(self, state: Any) -> None:
        shape = np.shape(state.get("mean", 0.0)) if isinstance(state, Mapping) else ()
        RunningMeanStd.__init__(self, shape)
        self.set_state(state)

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> "RunningMeanStd":
        """New statistics from :meth:`get_state`'s dictionary."""
        rms = cls.__new__(cls)
        rms.__setstate__(state)
        return rms

    def to_running_stats(self, dtype=None) -> rs.RunningStats:
        """The statistics as the JAX core's :class:`~rewardnorm_jax.RunningStats` (a copy).

        Exact in float64 (the default under x64). In float32 (the default otherwise) each pair
        ``(high, low)`` becomes the float32 nearest ``high`` and the float32 rounding of the
        remainder, about 48 bits; the core's float32 statistics convert back exactly. Raises
        ValueError for statistics beyond ``dtype``'s range.
        """
        dtype = rs.check_dtype(dtype)
        high = self._moments[..., ::2]  # mean and M; their low words follow each
        with np.errstate(over="ignore", invalid="ignore"):  # beyond the dtype: refused below
            rounded = high.astype(dtype)
            # A saturated M (+inf) keeps a zero remainder, as the merge leaves it.
            rest = np.where(np.isfinite(high), (high - rounded) + self._moments[..., 1::2], 0.0)
        moments = np.stack([rounded, rest.astype(dtype)], -1).reshape(self._moments.shape)
        stats = jax.tree.map(jnp.asarray, _host_stats(moments, self._samples))
        stats.check_values(f"return_rms in {dtype.name}")
        return stats

    @classmethod
    def from_running_stats(cls, stats: rs.RunningStats) -> "RunningMeanStd":
        """Host statistics from the core's :class:`~rewardnorm_jax.RunningStats` (a copy).

        Exact (as assigning ``stats``). Raises ValueError for exponential moving statistics,
        or values no merge produces.
        """
        rms = cls.__new__(cls)
        RunningMeanStd.__init__(rms, np.shape(stats.mean))
        rms.stats = stats
        return rms

    def __repr__(self) -> str:
        mean, var, count = (np.asarray(x).tolist() for x in (self.mean, self.var, self.count))
        shape = f"shape={self.shape}, " if self.shape and self._shape_in_repr else ""
        return f"{type(self).__name__}({shape}mean={mean!r}, var={var!r}, count={count!r})"


class ObjectiveStats(RunningMeanStd):
    r"""Running statistics of each objective of a vector reward: a :class:`RunningMeanStd` each.

    The statistics of shape ``(k,)``: ``stats[i]`` is objective ``i``'s :class:`RunningMeanStd`
    (a live view), so the statistics of objective :math:`i` are those a scalar
    ``NormalizeReward`` keeps of that objective's rewards alone, as MO-Gymnasium's
    ``MONormalizeReward(env, idx=i)`` does. ``mean``, ``var`` and ``count`` are float64 arrays
    of shape ``(k,)`` (copies), ``samples`` a list of ints; :meth:`get_state` is the list of each
    objective's state.

    Args:
      num_objectives: the number of objectives :math:`k \ge 1`.

    Example:
      >>> stats = ObjectiveStats(2)
      >>> stats[0].update(np.array([1.0, 3.0]))
      >>> stats.mean.round(3).tolist(), stats.samples
      ([2.0, 0.0], [2, 0])
    """

    __slots__ = ()
    _shape_in_repr = False  # (k,): the lists show it

    def __init__(self, num_objectives: int):
        super().__init__((checks.check_count("num_objectives", num_objectives, minimum=1),))

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, index: int) -> RunningMeanStd:
        view = RunningMeanStd.__new__(RunningMeanStd)
        view._moments, view._samples = self._moments[index], self._samples[index, ...]
        return view

    def __iter__(self) -> Iterator[RunningMeanStd]:
        return (self[i] for i in range(len(self)))

    def get_state(self) -> list[dict[str, Any]]:  # type: ignore[override]  # one per objective
        """:meth:`RunningMeanStd.get_state` of each objective, in order."""
        return [stats.get_state() for stats in self]

    def set_state(self, state: Sequence[Mapping[str, Any]]) -> None:  # type: ignore[override]
        """Restores :meth:`get_state`'s list (all objectives checked before any changes)."""
        if isinstance(state, (str, Mapping)) or not isinstance(state, Sequence):
            raise ValueError(f"state should be the list from get_state(), got {state!r}.")
        if len(state) != len(self):
            raise ValueError(
                f"state holds statistics of {len(state)} objectives, expected {len(self)}."
            )
        checked = [RunningMeanStd.from_state(each) for each in state]
        self._set(np.stack([c._moments for c in checked]), np.stack([c._samples for c in checked]))

    __getstate__ = get_state  # type: ignore[assignment]  # the list get_state returns

    def __setstate__(self, state: Sequence[Mapping[str, Any]]) -> None:
        RunningMeanStd.__init__(self, (len(state),))
        self.set_state(state)
