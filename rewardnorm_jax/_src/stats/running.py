r"""Running mean and variance as an immutable pytree, merged exactly.

The statistics follow Gymnasium's and Stable-Baselines3's ``RunningMeanStd``:
they start from a prior of weight ``PRIOR_COUNT = 1e-4`` with mean 0 and
variance 1, and every batch joins them through the parallel algorithm of
Chan et al. (:func:`rewardnorm_jax._src.stats.formulas.add_batch_moments`), in
:func:`merge_stats`, the statistics' one merge.

Precision. Float32 is JAX's default, and a naive float32 accumulator fails in
three known ways: a float32 count stops growing at :math:`2^{24}`; once the
count is large, small mean increments are rounded away; and with one sample
per update the variance drifts by percents. Here:

* the count is two ``uint32`` words (``count_hi``, ``count_lo``) added with
  carry: exact to the sample up to :math:`2^{64} - 1`, in float32 and float64
  alike, where it stays (weighted batches may fill it: :func:`merge_checked`);
* the mean and the sum of squared deviations :math:`M` are each kept as an
  unevaluated sum of two floats (``mean + mean_low``, ``m2 + m2_low``) and
  every increment is added with an error-free two-sum, so rounding errors are
  carried instead of lost (about twice the working precision).

Range. Every increment of :math:`M` is a sum of squares, so the variance is
never negative, and the prior keeps it above 0. The variance must fit the
dtype: float32 statistics hold values up to about :math:`10^{19}` in
magnitude (and :math:`M` up to :math:`3.4 \times 10^{38}`). Past that,
:math:`M` saturates at ``+inf`` (variance ``+inf``, so rewards normalize to
0), the mean keeps its last representable value, and nothing becomes NaN;
float64 statistics (x64) reach about :math:`10^{154}`.

The variance is :math:`M / n`, with :math:`n` the total weight: for
cumulative statistics the samples plus the prior,
:math:`n_{hi} 2^{32} + n_{lo} + 10^{-4}`. Both are properties
(``var``, ``total_weight``; ``count`` is an alias of ``total_weight``).

Shapes. The statistics have a shape of their own (``()`` for one statistics
object). :func:`merge_stats` reduces the leading axes of the batch down to that
shape: ``init_stats(())`` shares one set across every environment of a batch,
``init_stats((num_envs,))`` keeps one set per environment.

Exponential moving statistics. ``init_stats(..., decay=beta)`` makes every
update first discount the weight of everything seen so far by :math:`\beta`,
then merge the batch with the same Chan et al. step: the cumulative statistics
are the case :math:`\beta = 1`, so both paths are one merge. The discounted
weight :math:`W` (prior included) is kept in ``weight`` and is then the total
weight; see :func:`merge_stats` for the formulas and the bias correction.
"""

import math
from collections.abc import Callable, Hashable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from rewardnorm_jax._src.core import base, checks
from rewardnorm_jax._src.stats import formulas, summation

PRIOR_COUNT = 1e-4
_WORD = 2.0**32
_COUNT_LIMIT = 2.0**64  # the weight the two count words hold (2^64 - 1 samples, rounded)
_KEYED_BLOCK = 1024  # entries per block of the keyed segment sums


# Positions along the last axis of ``RunningStats.moments`` and ``.count_words``.
_MEAN, _MEAN_LOW, _M2, _M2_LOW, _WEIGHT = range(5)
_HI, _LO = range(2)


class RunningStats(struct.PyTreeNode):
    """Running mean, variance and count; see the module docstring for the layout.

    The floats are packed along the last axis of one array and the count
    words along another, so a scan carries two arrays, whatever the number
    of quantities. Read them through the properties.
    """

    # (*shape, 4) float: mean, mean_low, m2, m2_low; (*shape, 5) with the
    # discounted weight W last for exponential moving statistics.
    moments: jax.Array
    count_words: jax.Array  # (*shape, 2) uint32: high and low word of the sample count
    decay: float | None = struct.field(pytree_node=False, default=None)  # static
    step_size: float | None = struct.field(pytree_node=False, default=None)  # static
    prior_count: float = struct.field(pytree_node=False, default=PRIOR_COUNT)  # static

    @classmethod
    def from_parts(
        cls,
        mean,
        mean_low,
        m2,
        m2_low,
        count_hi,
        count_lo,
        weight=None,
        decay=None,
        step_size=None,
        prior_count=PRIOR_COUNT,
    ) -> "RunningStats":
        """Packs the statistics' quantities (arrays of one shape) into the layout."""
        floats = [mean, mean_low, m2, m2_low] + ([] if weight is None else [weight])
        words = [jnp.asarray(count_hi, jnp.uint32), jnp.asarray(count_lo, jnp.uint32)]
        return cls(
            jnp.stack(floats, axis=-1), jnp.stack(words, axis=-1), decay, step_size, prior_count
        )

    @property
    def mean(self) -> jax.Array:
        """Running mean (its high word: ``mean + mean_low`` is the exact sum)."""
        return self.moments[..., _MEAN]

    @property
    def mean_low(self) -> jax.Array:
        """Rounding error carried with ``mean``."""
        return self.moments[..., _MEAN_LOW]

    @property
    def m2(self) -> jax.Array:
        """Sum of squared deviations, the prior's included (high word)."""
        return self.moments[..., _M2]

    @property
    def m2_low(self) -> jax.Array:
        """Rounding error carried with ``m2``."""
        return self.moments[..., _M2_LOW]

    @property
    def weight(self) -> jax.Array | None:
        """Discounted weight W of exponential moving statistics (None otherwise)."""
        return None if self.decay is None else self.moments[..., _WEIGHT]

    @property
    def count_hi(self) -> jax.Array:
        """High word (uint32) of the sample count."""
        return self.count_words[..., _HI]

    @property
    def count_lo(self) -> jax.Array:
        """Low word (uint32) of the sample count."""
        return self.count_words[..., _LO]

    @property
    def sample_count(self) -> jax.Array:
        """Samples merged so far (prior excluded), as a float of the statistics dtype.

        Undiscounted, with or without ``decay``; :func:`count_as_int` gives
        the exact integer on the host.
        """
        dtype = self.moments.dtype
        return self.count_hi.astype(dtype) * _WORD + self.count_lo.astype(dtype)

    @property
    def total_weight(self) -> jax.Array:
        r"""The weight :math:`n` of the statistics, prior included: the variance's divisor.

        ``sample_count + prior_count`` for cumulative statistics; the discounted
        weight ``weight`` (:math:`W`) for exponential moving statistics;
        :math:`1 / \alpha` for fixed-step statistics.
        """
        if self.decay is not None:
            return self.moments[..., _WEIGHT]
        if self.step_size is not None:
            return jnp.full(self.mean.shape, 1.0 / self.step_size, self.mean.dtype)
        return self.sample_count + self.prior_count

    @property
    def var(self) -> jax.Array:
        """Population variance ``M / total_weight`` (the prior's 1 before any sample).

        Statistics without a prior (``prior_count=0``) have no variance before
        their first sample: it is NaN there (``0 / 0``).
        """
        return (self.m2 + self.m2_low) / self.total_weight

    @property
    def std(self) -> jax.Array:
        """Population standard deviation, ``sqrt(var)``."""
        return jnp.sqrt(self.var)

    def check_values(self, name: str = "stats") -> None:
        r"""Raises a ValueError unless ``stats`` holds values a merge can produce.

        The mean and the rounding-error terms are finite, :math:`M` is in
        :math:`[0, +\infty]` (``+inf`` once saturated, never NaN) and so is
        :math:`M` with its rounding error, ``m2 + m2_low`` (the variance's
        numerator: a negative one makes the divisor NaN), and the weight of
        exponential moving statistics is positive and finite. Any count is one
        some number of updates reaches.

        Example:
          >>> stats = init_stats()
          >>> stats.replace(moments=jnp.array([0.0, 0.0, -1.0, 0.0])).check_values("stats")
          Traceback (most recent call last):
          ...
          ValueError: stats.m2 holds -1.0; expected M >= 0 (+inf when saturated).
        """
        rules: list[tuple[str, Callable[[np.ndarray], np.ndarray], str]] = [
            ("mean", np.isfinite, "a finite mean"),
            ("mean_low", np.isfinite, "a finite rounding error"),
            ("m2", lambda m2: m2 >= 0, "M >= 0 (+inf when saturated)"),
            ("m2_low", np.isfinite, "a finite rounding error"),
        ]
        if self.weight is not None:
            rules.append(
                ("weight", lambda w: np.isfinite(w) & (w > 0), "a positive, finite weight")
            )
        for field, rule, expected in rules:
            values = np.asarray(getattr(self, field))
            checks.refuse_where(f"{name}.{field}", values, ~rule(values), expected)
        if self.prior_count == 0 and self.decay is None and self.step_size is None:
            empty = (np.asarray(self.count_hi) == 0) & (np.asarray(self.count_lo) == 0)
            for field in ("mean", "mean_low", "m2", "m2_low"):
                values = np.asarray(getattr(self, field))
                checks.refuse_where(
                    f"{name}.{field}",
                    values,
                    empty & (values != 0),
                    "0 before any sample (statistics without a prior)",
                )
        m2, m2_low = np.asarray(self.m2), np.asarray(self.m2_low)
        with np.errstate(over="ignore"):
            total = m2 + m2_low  # in the statistics dtype, as the variance is computed
        checks.refuse_where(
            f"{name}.m2_low",
            m2_low,
            ~(total >= 0),
            f"a rounding error that keeps m2 + m2_low >= 0 (m2 is {m2.flat[0].item()!r} there)"
            if m2.size == 1
            else "a rounding error that keeps m2 + m2_low >= 0",
        )


def default_dtype() -> np.dtype:
    """float64 when JAX's x64 mode is on, float32 otherwise."""
    return jnp.dtype(jax.dtypes.canonicalize_dtype(jnp.float64))


def check_dtype(dtype) -> np.dtype:
    """The statistics dtype: float32 or float64, never lower."""
    try:
        dtype = default_dtype() if dtype is None else jnp.dtype(dtype)
    except TypeError as error:
        raise TypeError(
            f"dtype should be float32, float64 or None (the default), got dtype={dtype!r}."
        ) from error
    if dtype not in (jnp.dtype(jnp.float32), jnp.dtype(jnp.float64)):
        raise ValueError(
            f"dtype={dtype} is not supported for statistics: use float32 or "
            "float64 (lower precision would lose the statistics)."
        )
    if dtype != jax.dtypes.canonicalize_dtype(dtype):
        raise ValueError(
            "dtype=float64 needs JAX's x64 mode: wrap the code in "
            "`with jax.enable_x64(True):` or set JAX_ENABLE_X64=1."
        )
    return dtype


def check_decay(decay, dtype) -> float | None:
    """Validates the decay of exponential moving statistics kept in ``dtype``."""
    if decay is None:
        return None
    # decay = 1 is the cumulative statistics (decay=None, with an exact count);
    # decay > 1 or < 0 would weight old samples more than new ones, or negatively.
    # A decay that rounds to 1 in dtype would never forget.
    if not (
        checks.is_real(decay, "decay") and 0.0 <= decay < 1.0 and np.asarray(decay, dtype) < 1.0
    ):
        raise ValueError(
            f"decay should be in the interval [0, 1) in {np.dtype(dtype).name} (the "
            f"statistics dtype) or None, got decay={decay!r}."
        )
    return float(decay)


def check_step_size(step_size, dtype) -> float | None:
    """Validates the step size of fixed-step statistics kept in ``dtype``."""
    if step_size is None:
        return None
    # step_size 0 (or one that rounds to 0 in dtype) never learns; above 1 one
    # sample would outweigh everything, the past taking a negative weight.
    step_size = checks.check_positive("step_size", step_size, dtype)
    if step_size > 1.0:
        raise ValueError(
            f"step_size should be in the interval (0, 1] or None, got step_size={step_size!r}."
        )
    return step_size


def check_prior_count(prior_count, dtype) -> float:
    """Validates the prior's weight: a finite number >= 0 (0 for none) that the dtype holds."""
    return checks.check_non_negative("prior_count", prior_count, dtype)


def init_stats(
    shape: base.ShapeLike = (),
    dtype=None,
    *,
    decay=None,
    step_size=None,
    prior_count=PRIOR_COUNT,
) -> RunningStats:
    r"""Statistics of the prior alone: mean 0, variance 1, count 1e-4.

    Args:
      shape: shape of the statistics (``()`` for one shared set).
      dtype: float32 or float64; default float64 under x64, else float32.
      decay: ``None`` for cumulative statistics (every sample weighs the same,
        Gymnasium's ``RunningMeanStd``), or :math:`\beta \in [0, 1)` for
        exponential moving statistics that discount older updates by
        :math:`\beta` each update (see :func:`merge_stats`).
      step_size: ``None``, or :math:`\alpha \in (0, 1]` for fixed-step
        statistics, where every sample weighs :math:`\alpha` within a total
        weight of 1 (rlax's PopArt; see :func:`merge_stats`). The prior then
        weighs the whole: mean 0 and variance 1, as rlax's ``PopArtState``
        starts. :math:`M` is the variance over :math:`\alpha`, so the
        variance's range shrinks by the factor :math:`\alpha` (float32: a
        spread up to about :math:`\sqrt{\alpha}\, 10^{19}`).
      prior_count: the weight of the prior (mean 0, variance 1) of
        cumulative statistics: ``PRIOR_COUNT`` (1e-4, Gymnasium's and SB3's),
        or 0 for none (Brax's ``running_statistics``: the first batch sets
        the mean and variance alone; the variance is NaN before it).

    Raises:
      ValueError: for a dtype other than float32 / float64, a decay outside
        [0, 1), a step size outside (0, 1], both a decay and a step size, a
        negative prior count, or a prior count other than ``PRIOR_COUNT``
        with a decay or a step size.

    Example:
      >>> stats = init_stats()
      >>> float(stats.mean), float(stats.var), round(float(stats.total_weight), 6)
      (0.0, 1.0, 0.0001)
    """
    shape = checks.check_batch_shape(shape, "shape")
    dtype = check_dtype(dtype)
    decay = check_decay(decay, dtype)
    step_size = check_step_size(step_size, dtype)
    prior_count = check_prior_count(prior_count, dtype)
    if decay is not None and step_size is not None:
        raise ValueError(
            f"decay={decay!r} and step_size={step_size!r}: exponential moving statistics "
            "(decay) and fixed-step ones (step_size) weigh samples two ways; choose one."
        )
    if prior_count != PRIOR_COUNT and (decay is not None or step_size is not None):
        raise ValueError(
            f"prior_count={prior_count!r} is for cumulative statistics: exponential moving "
            f"(decay={decay!r}) and fixed-step (step_size={step_size!r}) statistics weigh "
            "their prior as their own rule says."
        )
    prior_weight = prior_count if step_size is None else 1.0 / step_size
    zeros = jnp.zeros(shape, dtype)
    words = jnp.zeros(shape, jnp.uint32)
    return RunningStats.from_parts(
        mean=zeros,
        mean_low=zeros,
        m2=jnp.full(shape, prior_weight, dtype),  # variance 1
        m2_low=zeros,
        count_hi=words,
        count_lo=words,
        weight=None if decay is None else jnp.full(shape, PRIOR_COUNT, dtype),
        decay=decay,
        step_size=step_size,
        prior_count=prior_count,
    )


def _add_count(stats: RunningStats, batch_count: jax.Array):
    """Adds a uint32 ``batch_count`` to the two-word count, with carry, saturating at 2^64 - 1."""
    low = stats.count_lo + batch_count
    carry = (low < stats.count_lo).astype(jnp.uint32)
    high = stats.count_hi + carry
    full = high < stats.count_hi  # a full count (weighted batches fill it) stays full
    return _saturated(high, low, full)


def _saturated(high, low, full):
    """The count words, or :math:`2^{64} - 1` where ``full``."""
    most = jnp.uint32(2**32 - 1)
    return jnp.where(full, most, high), jnp.where(full, most, low)


def _add_whole_count(stats: RunningStats, batch_count: jax.Array, full: jax.Array):
    """Adds a whole float ``batch_count`` to the two-word count, saturating at 2^64 - 1.

    The float is split into its two words exactly (a float below :math:`2^{64}`
    is :math:`h 2^{32} + l` with both parts floats); a count that would pass
    :math:`2^{64} - 1`, or is ``full``, stays there.
    """
    fits = batch_count < _COUNT_LIMIT
    batch_count = jnp.where(fits, batch_count, 0.0)
    high = jnp.floor(batch_count * (1.0 / _WORD))
    low = (batch_count - high * _WORD).astype(jnp.uint32)
    count_lo = stats.count_lo + low
    carry = (count_lo < stats.count_lo).astype(jnp.uint32)
    partial = stats.count_hi + high.astype(jnp.uint32)
    count_hi = partial + carry
    full = full | ~fits | (partial < stats.count_hi) | (count_hi < partial)
    return _saturated(count_hi, count_lo, full)


def _within_count_limit(weight, m2, m2_low, batch_count):
    r"""The past (``weight``, :math:`M`) and the batch's weight, scaled alike to fit the count.

    Where :math:`n + n_b` passes :math:`2^{64}` (``_COUNT_LIMIT``, what the
    count words hold) both are scaled by :math:`k = 2^{64} / (n + n_b)`, and
    :math:`M` with the past's weight: the past keeps its mean and variance,
    the batch its share :math:`n_b / (n + n_b)`, so the merged mean and
    variance are those of the whole weight. Returns them, and where they were
    scaled (the count is then full).
    """
    total = weight + batch_count
    full = total > _COUNT_LIMIT
    keep = jnp.where(full, _COUNT_LIMIT / total, 1.0).astype(weight.dtype)
    return weight * keep, m2 * keep, m2_low * keep, batch_count * keep, full


def _float_count_is_exact(batch, num_batch_axes: int, axis_name) -> bool:
    """Whether the batch's float sum of ones counts its selected entries exactly.

    It does whenever all participants together reduce at most :math:`2^{p}`
    entries (``p`` the mantissa bits plus one: :math:`2^{24}` in float32):
    every partial sum, on a device or across ``axis_name``, is then an integer
    the float holds, in any summation order. It is converted rather than
    summed again as ``uint32``, which on CPU is a slow scalar loop beside the
    vectorized float sums and across devices a second collective. Larger
    batches count in ``uint32``.
    """
    mantissa_bits = jnp.finfo(batch.dtype).nmant + 1
    entries: Any = _entries(batch, num_batch_axes, axis_name)
    # A symbolic batch (jax.export) may be of any size: it counts in uint32.
    return isinstance(entries, int) and entries <= 2**mantissa_bits


def _entries(batch, num_batch_axes: int, axis_name) -> int:
    """Entries per statistic that all participants along ``axis_name`` reduce together."""
    return participants(axis_name) * math.prod(batch.shape[:num_batch_axes])


def participants(axis_name) -> int:
    """The number of participants along ``axis_name`` (1 for ``None``), known at trace time.

    Every function with an ``axis_name`` calls it before its first collective,
    so a name that no enclosing map binds is a ValueError that says which maps
    bind it, not JAX's ``NameError`` from inside a collective. A ``psum`` of a
    Python 1 is the axis size as a Python int: nothing enters the compiled code.

    Raises:
      ValueError: if a name is not bound by an enclosing ``jax.vmap``,
        ``jax.pmap`` or ``shard_map``.
    """
    axis_name = check_axis_name(axis_name)
    names = axis_name if isinstance(axis_name, tuple) else () if axis_name is None else (axis_name,)
    size = 1
    for name in names:
        try:
            size *= jax.lax.psum(1, name)
        except NameError as error:
            raise ValueError(
                f"axis_name={axis_name!r}: no map binds the axis {name!r} here. Call the "
                f"function inside a map that names it: jax.vmap(..., axis_name={name!r}), "
                f"jax.pmap(..., axis_name={name!r}) or shard_map over a mesh with an axis "
                f"{name!r}; or use axis_name=None for statistics of this batch alone."
            ) from error
    return size


def check_axis_name(axis_name):
    """``axis_name`` checked: ``None``, a name, or a tuple of names (a list becomes one).

    A name is any hashable but an integer, which JAX's collectives read as a
    positional axis, not as the name of a map's axis.

    Raises:
      TypeError: naming the value.
    """
    if isinstance(axis_name, list):
        axis_name = tuple(axis_name)
    for name in axis_name if isinstance(axis_name, tuple) else (axis_name,):
        positional = isinstance(name, (int, np.integer))  # bool included
        if positional or not isinstance(name, Hashable):
            raise TypeError(
                "axis_name should be None, the name of a mapped axis (a string, as given to "
                f"jax.vmap, jax.pmap or a mesh) or a tuple of names, got axis_name={axis_name!r}"
                + (
                    " (JAX's collectives read an integer as a positional axis)."
                    if positional
                    else "."
                )
            )
    return axis_name


def make_reduce(num_batch_axes: int, axis_name=None):
    """Sum over the leading ``num_batch_axes`` axes, then across ``axis_name``."""

    def reduce(x):
        total = jnp.sum(x, axis=tuple(range(num_batch_axes))) if num_batch_axes else x
        return total if axis_name is None else jax.lax.psum(total, axis_name)

    return reduce


def check_share(stats: RunningStats, entries: int) -> None:
    r"""Raises unless ``entries`` samples per update fit fixed-step statistics.

    A batch of :math:`n_b` samples takes the share :math:`n_b \alpha`; above
    1 the past would take a negative weight and the update overshoot (rlax's
    PopArt then oscillates and diverges). The bound holds for the number of
    samples one set may receive, so for keyed statistics it is the whole
    batch: every entry may carry one key.

    Raises:
      ValueError: naming the step size, the samples and the largest step size
        that fits.
    """
    # A share within the dtype's rounding of 1 (a float32 step size of 1/n) fits.
    tolerance = float(jnp.finfo(stats.mean.dtype).eps)
    if stats.step_size is not None and entries * stats.step_size > 1.0 + tolerance:
        raise ValueError(
            f"step_size={stats.step_size!r} with {entries} samples per update gives the batch "
            f"the share {entries * stats.step_size:.6g} > 1 of the statistics, and the past a "
            "negative weight (the update overshoots and can diverge): use "
            f"step_size <= 1/{entries} = {1 / entries:.4g}, or fewer samples per update."
        )


def _first_of_pair(a, b):
    return a[0] | b[0], jnp.where(a[0], a[1], b[1])


def first_selected(batch, mask, num_batch_axes: int):
    """``(found, entry)``: a selected entry per statistic, by one reduction.

    The first one in XLA's reduction order, a serial loop on XLA:CPU; 0 where
    none is selected.
    """
    return jax.lax.reduce(
        (mask, jnp.where(mask, batch, 0.0)),
        (jnp.bool_(False), jnp.zeros((), batch.dtype)),
        _first_of_pair,
        tuple(range(num_batch_axes)),
    )


def _shift(stats, batch, mask, num_batch_axes: int, axis_name, unselected_alike: bool):
    r"""An entry of the batch per statistic, subtracted from it before summing.

    Shifted by one of its own entries, the sums of a batch stay well
    conditioned however far its mean is from 0 (the classic shifted-data
    algorithm): :math:`|d_i|` is of the order of the batch's spread.

    When the entries outside ``mask`` are finite (``unselected_alike``: a
    normalizer's returns), the first entry is taken if it is selected, so no
    search over the batch is needed; otherwise the running mean once samples
    have been merged (an unselected return may be far from the selected ones:
    an environment that ended its episode and waits), and the first entry
    before; a non-finite one falls back to the running mean. Otherwise (they may be NaN)
    the first selected entry is searched for (:func:`first_selected`). Under
    ``axis_name`` the participants agree on one (:func:`agreed_shift`).
    """
    if math.prod(batch.shape[:num_batch_axes]) == 0:
        return stats.mean
    if mask is None or unselected_alike:
        first = batch[(0,) * num_batch_axes]
        found = jnp.isfinite(first)
        if mask is not None:
            found = found & (mask[(0,) * num_batch_axes] | (stats.sample_count == 0))
    else:
        found, first = first_selected(batch, mask, num_batch_axes)
    return agreed_shift(stats, found, first, axis_name)


def agreed_shift(stats: RunningStats, found, first, axis_name):
    """``first`` where ``found``, else the running mean; the same on every participant.

    Under ``axis_name`` every participant takes the largest participant's
    ``first``, so that their shifted sums add up.
    """
    if axis_name is not None:
        first = jax.lax.pmax(jnp.where(found, first, -jnp.inf), axis_name)
        found = first > -jnp.inf
    return jnp.where(found, first, stats.mean)


def _add_shifted_sums(
    stats: RunningStats, sums, shift, count_increment, weight_scale=None
) -> RunningStats:
    """The statistics with a batch, given by its shifted sums, added (elementwise).

    ``sums`` is ``(sum d, sum d^2, n_b)`` (:func:`~rewardnorm_jax._src.stats.summation.merge_sums`,
    totals over every participant). The batch's moments
    (:func:`~rewardnorm_jax._src.stats.formulas.moments_from_shifted_sums`) join the
    statistics by :func:`~rewardnorm_jax._src.stats.formulas.add_batch_moments`, after
    exponential moving statistics discount their past. ``count_increment`` is
    the count as ``uint32`` when its float ``n_b`` may not be exact, else ``None``.
    Weighted sums are ``(sum w d, sum w d^2, W)`` of the weights times
    ``weight_scale`` (a power of two per statistic; ``None`` for unweighted
    sums): the weighted moments join as ``round(W)`` samples, within the
    count's limit (:func:`merge_checked`).
    """
    deviation_sum, square_sum, count_b = sums
    # A sum at the end of the dtype's range has overflowed (or summed clamped terms).
    largest = jnp.finfo(shift.dtype).max
    deviation_sum = jnp.where(abs(deviation_sum) < largest, deviation_sum, deviation_sum * jnp.inf)
    square_sum = jnp.where(square_sum < largest, square_sum, jnp.inf)
    batch_count, mean_deviation, batch_var = formulas.moments_from_shifted_sums(
        jnp, count_b, deviation_sum, square_sum
    )
    if weight_scale is not None:  # a whole number of samples: the count stays an integer
        largest_count = jnp.finfo(shift.dtype).max  # W beyond the dtype: its largest float
        batch_count = jnp.round(jnp.minimum(batch_count / weight_scale, largest_count))
    samples = batch_count  # the count words' increment, before any limit
    # The batch mean's deviation from mean + mean_low, the batch mean never rounded
    # to the size of the shift: shift - mean is exact when they are close (Sterbenz),
    # and the sum's rounding error is kept (delta_low).
    delta, delta_low = formulas.two_sum(
        jnp, (shift - stats.mean) - stats.mean_low, 0.0, mean_deviation
    )
    weight, m2, m2_low = stats.total_weight, stats.m2, stats.m2_low
    if stats.prior_count == 0 and stats.decay is None:
        # No weight and no sample: a placeholder weight makes the merge a no-op, not 0 / 0.
        weight = jnp.where(weight + batch_count > 0, weight, 1.0)
    if stats.decay is not None:  # forget: the past keeps the weight decay * W
        decay = jnp.where(batch_count > 0, stats.decay, 1.0).astype(stats.mean.dtype)
        weight, m2, m2_low = decay * weight, decay * m2, decay * m2_low
    if stats.step_size is not None:  # the past keeps 1 - n_b * step_size of the whole
        # M minus the batch's share of it, compensated: a rounded 1 - share would
        # bias M by its rounding error at every update, compounding.
        taken = (batch_count * stats.step_size).astype(stats.mean.dtype)
        decrement = jnp.where(m2 < jnp.inf, taken * m2, 0.0)  # a saturated M stays +inf
        m2, m2_low = formulas.two_sum(jnp, m2, m2_low - taken * m2_low, -decrement)
        weight = weight - batch_count
    full = jnp.bool_(False)
    if weight_scale is not None:
        weight, m2, m2_low, batch_count, full = _within_count_limit(weight, m2, m2_low, batch_count)
    mean, mean_low, m2, m2_low = formulas.add_batch_moments(
        jnp,
        stats.mean,
        stats.mean_low,
        m2,
        m2_low,
        weight,
        batch_count,
        delta,
        batch_var,
        delta_low,
    )
    if weight_scale is not None:  # the decayed weight's limit is not the sample count's
        count_hi, count_lo = _add_whole_count(stats, samples, full & (stats.decay is None))
    else:
        if count_increment is None:  # the float count is exact (_float_count_is_exact)
            count_increment = batch_count.astype(jnp.uint32)
        count_hi, count_lo = _add_count(stats, count_increment)
    return RunningStats.from_parts(
        mean=mean,
        mean_low=mean_low,
        m2=m2,
        m2_low=m2_low,
        count_hi=count_hi,
        count_lo=count_lo,
        weight=None if stats.decay is None else weight + batch_count,
        decay=stats.decay,
        step_size=stats.step_size,
        prior_count=stats.prior_count,
    )


def _weight_scale(largest, axis_name):
    """The power of two that brings each statistic's ``largest`` weight into [1, 2).

    The same on every participant along ``axis_name``. Weights scaled by it sum
    without overflow (their total is at most the number of entries times 2),
    and their sums are exact scalings of the unscaled ones, so every weighted
    mean and variance is unchanged. A statistic with an entry of weight > 0
    totals at least 1, the divisor its batch moments need.
    """
    if axis_name is not None:
        largest = jax.lax.pmax(largest, axis_name)
    return 2 * summation.power_of_two(largest)


def merge_checked(
    stats: RunningStats,
    batch,
    mask,
    *,
    axis_name=None,
    unselected_alike=False,
    shift=None,
    weights=None,
):
    r""":func:`merge_stats` of arrays already checked, with the options it leaves out.

    Weights. An entry of integer weight :math:`w` counts as :math:`w`
    repeated entries. With :math:`d_i = x_i - s` (``shift``) and
    :math:`W = \sum_i w_i` over the selected entries, the batch's moments are
    the weighted ones,

    .. math::
      \mu_b = s + \frac{\sum_i w_i d_i}{W}, \qquad
      \sigma_b^2 = \frac{\sum_i w_i d_i^2}{W} - \Big(\frac{\sum_i w_i d_i}{W}\Big)^2,

    and the batch joins the statistics as :math:`\operatorname{round}(W)`
    samples (the same Chan merge), so the count stays a whole number. Integer
    weights give the statistics of the entries repeated, the count exact
    while :math:`W` is within the float's integers (:math:`2^{24}` in float32,
    :math:`2^{53}` in float64). Fractional weights weigh the entries within
    the batch, and the batch weighs its total rounded to the nearest integer
    (half to even): a batch of total weight below 1/2 changes nothing.

    Range. The weights are summed at the power of two that brings each
    statistic's largest into [1, 2) (:func:`_weight_scale`): an exact scaling,
    so the weighted moments are unchanged and a total past the dtype's range
    (float32 weights of 3e38) is summed. :math:`\operatorname{round}(W)`
    joins the count in both of its words. Where the statistics' weight
    :math:`n` and :math:`W` together pass :math:`2^{64}`, what the count
    holds, both are scaled to a total of :math:`2^{64}` (:math:`M` with the
    past): the merged mean and variance are those of the whole weight, and
    the count stays at :math:`2^{64} - 1`.

    Args:
      stats: the statistics.
      batch: values of shape ``(*B, *S)``, in the statistics' dtype.
      mask: boolean of the batch's shape, or ``None`` to select every entry.
      axis_name: as for :func:`merge_stats`.
      unselected_alike: whether the entries outside ``mask`` are finite and
        near the selected ones (a normalizer's returns: a skipped step's
        return is still a return), so that any entry may serve as the shift
        (:func:`_shift`) and the sums may weight entries instead of selecting
        them (:func:`~rewardnorm_jax._src.stats.summation.merge_sums`).
      shift: the value per statistic subtracted from the batch before summing
        (near its data, the same on every participant), or ``None`` for
        :func:`_shift`'s.
      weights: ``None``, or weights of the batch's shape, finite and ``>= 0``
        where ``mask`` selects (the others weigh 0), for cumulative or
        exponential moving statistics (the share of fixed-step statistics,
        :func:`check_share`, counts entries, not weights).

    Returns:
      The merged statistics.
    """
    batch = jax.lax.stop_gradient(batch)  # statistics are constants of what they normalize
    num_batch_axes = batch.ndim - stats.mean.ndim
    entries = _entries(batch, num_batch_axes, axis_name)  # before the first collective
    check_share(stats, entries)
    if shift is None:
        shift = _shift(stats, batch, mask, num_batch_axes, axis_name, unselected_alike)
    if weights is not None and mask is not None:
        weights = jnp.where(mask, weights, 0.0)
    weight_scale = None
    if weights is not None:
        largest = jnp.max(weights, axis=tuple(range(num_batch_axes)), initial=0.0)
        weight_scale = _weight_scale(largest, axis_name)
        weights = weights * weight_scale
    count_increment = None
    if weights is None and not _float_count_is_exact(batch, num_batch_axes, axis_name):
        if mask is None:
            count_increment = jnp.full(stats.mean.shape, entries, jnp.uint32)
        else:
            reduce = make_reduce(num_batch_axes, axis_name)
            count_increment = reduce(mask.astype(jnp.uint32)).astype(jnp.uint32)

    def add(stats, sums):
        return _add_shifted_sums(stats, sums, shift, count_increment, weight_scale)

    return summation.merge_sums(
        add,
        stats,
        batch - shift,
        mask,
        num_batch_axes,
        axis_name=axis_name,
        weighted=unselected_alike,
        weights=weights,
    )


def merge_keyed(
    stats: RunningStats, batch, mask, keys, *, axis_name=None, weights=None
) -> RunningStats:
    r"""Merges each entry of a batch into the statistics its key selects, in one pass.

    ``stats`` holds :math:`K` sets of statistics along its first axis; entry
    :math:`i` of the batch joins set ``keys[i]``. Each set gets the batch's
    sums over its own entries by segment sums (exact when many entries share a
    key), shifted by the mean of its entries (summed in a first pass, so the
    deviations are of the order of the set's spread whatever its mean), then
    the same Chan merge as :func:`merge_stats`. A set with no entry in the
    batch is unchanged, and an entry whose key is outside :math:`[0, K)`
    joins no set.

    Args:
      stats: statistics of shape ``(K, *S)``.
      batch: values of shape ``(*E, *S)``, in the statistics' dtype.
      mask: boolean of the batch's shape, or ``None`` to select every entry.
      keys: integers of shape ``E``, the set of each entry.
      axis_name: as for :func:`merge_stats`: the sets merge across it.
      weights: ``None``, or weights of shape ``E``, finite and ``>= 0`` where
        ``mask`` selects: each set then gets the weighted moments of its
        entries and joins them as its total weight rounded, as in
        :func:`merge_checked`.

    Returns:
      The merged statistics.
    """
    batch = jax.lax.stop_gradient(batch)  # statistics are constants of what they normalize
    num_keys, stats_shape = stats.mean.shape[0], stats.mean.shape[1:]
    entries = math.prod(keys.shape)
    check_share(stats, entries * participants(axis_name))  # before the first collective
    keys = keys.reshape(entries)
    batch = batch.reshape(entries, *stats_shape)
    inside = (keys >= 0) & (keys < num_keys)
    selected = inside.reshape(entries, *(1,) * len(stats_shape))
    selected = jnp.broadcast_to(selected, batch.shape)
    if mask is not None:
        selected = selected & mask.reshape(batch.shape)
    blocks = -(-entries // _KEYED_BLOCK)
    # Each block of entries is summed apart: a scatter-add accumulates serially.
    blocked_keys = keys + num_keys * (jnp.arange(entries) // _KEYED_BLOCK)
    blocked_keys = jnp.where(inside, blocked_keys, num_keys * blocks)  # dropped by the scatter

    def segment_totals(terms):
        sums = jax.ops.segment_sum(terms, blocked_keys, num_keys * blocks)
        return jnp.sum(sums.reshape(blocks, num_keys, *terms.shape[1:]), axis=0)

    selected_values = jnp.where(selected, batch, 0.0)
    weight = selected.astype(batch.dtype)
    weight_scale = None
    if weights is not None:
        weight = jnp.where(selected, weights.reshape(entries, *(1,) * len(stats_shape)), 0.0)
        key_or_none = jnp.where(inside, keys, num_keys)  # an id out of range: dropped
        largest = jax.ops.segment_max(weight, key_or_none, num_keys)  # -inf for no entry
        weight_scale = _weight_scale(largest, axis_name)
        weight = weight * weight_scale[jnp.where(inside, keys, 0)]
        selected_values = weight * selected_values
    first_pass = segment_totals(jnp.stack([selected_values, weight], axis=1))
    if axis_name is not None:
        first_pass = jax.lax.psum(first_pass, axis_name)
    total, count = first_pass[:, 0], first_pass[:, 1]
    shift = jnp.where(count > 0, total / jnp.where(count > 0, count, 1.0), stats.mean)
    shift = jnp.where(jnp.isfinite(shift), shift, stats.mean)  # a sum past the dtype's range
    deviation = jnp.where(selected, batch - shift[jnp.where(inside, keys, 0)], 0.0)
    weighted = deviation if weights is None else weight * deviation
    squares = segment_totals(jnp.stack([weighted, weighted * deviation], axis=1))
    count_increment = None
    if weights is None and not _float_count_is_exact(batch, 1, axis_name):
        count_increment = jax.ops.segment_sum(selected.astype(jnp.uint32), keys, num_keys)
    if axis_name is not None:
        squares = jax.lax.psum(squares, axis_name)
        if count_increment is not None:
            count_increment = jax.lax.psum(count_increment, axis_name)
    sums = jnp.stack([squares[:, 0], squares[:, 1], count])  # the count of the first pass
    return _add_shifted_sums(stats, sums, shift, count_increment, weight_scale)


def per_key(values: jax.Array, keys: jax.Array | None) -> jax.Array:
    """Values of keyed statistics ``(K, *S)`` as each entry sees them: its key's.

    ``keys`` of shape ``E`` give values of shape ``(*E, *S)``; an entry whose
    key is outside ``[0, K)`` reads NaN, so that nothing is scaled silently by
    another key's statistics. ``keys=None`` (shared statistics) returns
    ``values`` as they are.
    """
    if keys is None:
        return values
    inside = (keys >= 0) & (keys < values.shape[0])
    gathered = values[jnp.where(inside, keys, 0)]
    return jnp.where(inside.reshape(keys.shape + (1,) * (values.ndim - 1)), gathered, jnp.nan)


def merge_stats(
    stats: RunningStats,
    batch: jax.typing.ArrayLike,
    mask: jax.typing.ArrayLike | None = None,
    *,
    axis_name=None,
) -> RunningStats:
    r"""Merges a batch into the statistics: the statistics' one merge.

    The batch's count :math:`n_b`, mean :math:`\mu_b` and population variance
    :math:`\sigma_b^2` join the total weight :math:`n` (``total_weight``), the
    mean :math:`\mu` and the sum of squared deviations :math:`M` by the
    parallel algorithm of Chan et al., as :doc:`/semantics` writes it out
    (:func:`~rewardnorm_jax._src.stats.formulas.chan_increments` computes it).

    Exponential moving statistics (``stats.decay`` :math:`= \beta`): the old
    weight and sum of squares are discounted first, :math:`(n, M) \leftarrow
    (\beta W, \beta M)`, then the same merge runs and :math:`W' = n'`. A batch
    with no selected entry discounts nothing. Unrolled, the mean and variance
    are the weighted mean and weighted population variance of every sample,
    a sample merged :math:`k` updates ago weighing :math:`\beta^k`, normalised
    by the total weight :math:`W = \sum \beta^k n_k` (plus the decayed prior):

    .. math::
      \mu_t = \frac{1}{W_t} \sum_{k \le t} \beta^{t-k} \sum_i x_{k,i}

    Bias correction. A moving average started at 0,
    :math:`m_t = \beta m_{t-1} + (1 - \beta) \mu_{b,t}`, is biased towards 0 by
    the factor :math:`1 - \beta^t`; Adam divides it out. Dividing by the
    tracked weight is that correction, built in: with a constant batch size
    :math:`W_t = n_b (1 - \beta^t) / (1 - \beta)` and :math:`\mu_t = m_t /
    (1 - \beta^t)` exactly (up to the prior's weight :math:`10^{-4} \beta^t`),
    and it stays exact when masks make batch sizes vary. The effective number
    of samples converges to :math:`n_b / (1 - \beta)`; the variance then
    tracks the last :math:`\approx 1 / (1 - \beta)` updates.

    Fixed-step statistics (``stats.step_size`` :math:`= \alpha`): each sample
    weighs :math:`\alpha` of a whole that stays 1, so the past is scaled by
    :math:`1 - n_b \alpha` and the same merge runs with the weight
    :math:`1 / \alpha - n_b` for the past. The mean and the second moment
    :math:`\nu = \sigma^2 + \mu^2` then follow rlax's PopArt exactly:

    .. math::
      \mu' = \mu + \alpha \sum_i (x_i - \mu), \qquad
      \nu' = \nu + \alpha \sum_i (x_i^2 - \nu)

    Args:
      stats: current statistics, of shape ``S``.
      batch: values of shape ``(*B, *S)``; the leading axes ``B`` are reduced.
      mask: optional boolean of the batch's shape; ``False`` entries are left
        out of the moments and the count (they may hold NaN).
      axis_name: optional name (or tuple of names) of mapped axes
        (``vmap``, ``pmap``, ``shard_map``) to merge the batch across, so every
        participant ends with identical statistics.

    Returns:
      The merged statistics; unchanged when no entry is selected.

    Raises:
      ValueError: if the batch's trailing axes are not the statistics' shape,
        the mask's shape differs from the batch's, no enclosing map binds
        ``axis_name``, or fixed-step statistics would give the batch a share
        above 1 (:func:`check_share`).
      TypeError: for a batch that is not real numbers (complex ones included)
        or a mask that is not numbers.

    Example:
      >>> stats = merge_stats(init_stats(), jnp.array([1.0, 2.0, 3.0]))
      >>> round(float(stats.mean), 3), round(float(stats.var), 3)
      (2.0, 0.667)
    """
    check_stats_type(stats)
    batch = jnp.asarray(checks.check_reward("batch", batch), stats.mean.dtype)
    num_batch_axes = batch.ndim - stats.mean.ndim
    if num_batch_axes < 0 or batch.shape[num_batch_axes:] != stats.mean.shape:
        raise ValueError(
            f"batch of shape {batch.shape} does not end with the statistics' "
            f"shape {stats.mean.shape}."
        )
    if mask is not None:
        mask = jnp.asarray(checks.check_flag("mask", mask), bool)
        if mask.shape != batch.shape:
            raise ValueError(f"mask has shape {mask.shape}, expected {batch.shape}.")
    return merge_checked(stats, batch, mask, axis_name=axis_name)


def check_stats_type(stats) -> None:
    """Raises a TypeError unless ``stats`` is a :class:`RunningStats`."""
    if not isinstance(stats, RunningStats):
        raise TypeError(
            f"stats should be a RunningStats (from init_stats), got {type(stats).__name__}."
        )


def count_as_int(stats: RunningStats) -> np.ndarray:
    """The exact number of samples seen (prior excluded), as host integers.

    Raises:
      TypeError: for statistics traced under ``jit`` (use ``stats.sample_count`` there).
    """
    check_stats_type(stats)
    if isinstance(stats.count_words, jax.core.Tracer):
        raise TypeError(
            "count_as_int reads the count on the host: call it outside jit, or use "
            "stats.sample_count (a float of the statistics dtype) inside."
        )
    return np.asarray(stats.count_hi, np.uint64) * np.uint64(2**32) + np.asarray(
        stats.count_lo, np.uint64
    )
