r"""Observation normalization: running mean and variance per feature of an observation pytree.

Every leaf of an observation pytree keeps statistics of its own feature shape
(:class:`~rewardnorm_jax.RunningStats`, one set per feature, shared by the
batch), merged by the library's one merge, so they count exactly, merge
across ``axis_name`` like every other statistic, freeze, and checkpoint:

.. math::
    \tilde x = \operatorname{clip}\!\left(\frac{x - \mu}{\sigma}, -c, c\right),
    \qquad \sigma = \operatorname{clip}\!\left(\sqrt{\sigma^2_{run} + \epsilon},
    \sigma_{min}, \sigma_{max}\right)

Precision: :math:`\mu` is subtracted as its two words, ``(x - mean) -
mean_low``. A float32 mean rounded to one word is off by up to half an ulp of
the mean, which at mean :math:`10^3` and spread 0.1 is :math:`3 \times
10^{-4}` standard deviations; the two words, and a merge that carries its
roundings into the low word, keep the normalized observation within
:math:`10^{-5}` standard deviations of float64 there, from the first batch on.

Presets reproduce the normalizers users have:

========== ============ ========== ============================ ====== ==================
preset     prior weight epsilon    std bounds                   clip   order of ``step``
========== ============ ========== ============================ ====== ==================
gymnasium  1e-4         1e-8       none                         none   update, normalize
purejaxrl  1e-4         1e-8       none                         none   update, normalize
sb3        1e-4         1e-8       none                         10     update, normalize
brax       0            0          [1e-6, 1e6]; 1 before data   none   normalize, update
========== ============ ========== ============================ ====== ==================

Integer and boolean leaves are returned unchanged (their statistics are
still kept, as Brax keeps them). Non-finite entries are left out of the
statistics (each feature counts its own samples) and come out non-finite.
"""

import dataclasses
import functools
import math
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from rewardnorm_jax._src.core import base, checks
from rewardnorm_jax._src.stats import running as rs


def _preset(prior_count, epsilon, std_min, std_max, clip, normalize_first) -> dict[str, Any]:
    """One preset's options, as :class:`ObservationConfig` names them."""
    return {
        "prior_count": prior_count,
        "epsilon": epsilon,
        "std_min": std_min,
        "std_max": std_max,
        "clip": clip,
        "normalize_first": normalize_first,
    }


OBSERVATION_PRESETS: dict[str, dict[str, Any]] = {
    # gymnasium.wrappers.NormalizeObservation and its vector version.
    "gymnasium": _preset(rs.PRIOR_COUNT, 1e-8, None, None, None, False),
    # purejaxrl's NormalizeVecObservation: the same arithmetic, kept per environment there.
    "purejaxrl": _preset(rs.PRIOR_COUNT, 1e-8, None, None, None, False),
    # stable_baselines3's VecNormalize(norm_obs=True): clip_obs=10, epsilon=1e-8.
    "sb3": _preset(rs.PRIOR_COUNT, 1e-8, None, None, 10.0, False),
    # brax.training.acme.running_statistics (Welford mode): no prior, std_eps 0, std clamped.
    "brax": _preset(0.0, 0.0, 1e-6, 1e6, None, True),
}
"""The presets' options by name; each reproduces its library's numbers (float32 rounding aside)."""

_FROM_PRESET: Any = object()  # an option left to the preset


@dataclasses.dataclass(frozen=True)
class ObservationConfig(base.Config):
    """The options of :func:`normalize_observation`, checked and resolved from the preset.

    Attributes:
      preset: the preset the options not given were taken from.
      prior_count: the weight of the prior (mean 0, variance 1); 0 for none.
      epsilon: added to the variance under the square root.
      std_min: lower bound of the standard deviation, or ``None``.
      std_max: upper bound of the standard deviation, or ``None``.
      clip: bound ``c`` of the symmetric clip of normalized values, or ``None``.
      normalize_first: whether ``step`` normalizes with the statistics from
        before its update (Brax's PPO acts on a rollout with the statistics
        from before that rollout's update) rather than after (Gymnasium,
        Stable-Baselines3 and PureJaxRL update, then normalize).
      dtype: the statistics dtype.
      axis_name: mapped axes the statistics merge across (not checkpointed).
    """

    name: ClassVar[str] = "normalize_observation"
    preset: str
    prior_count: float
    epsilon: float
    std_min: float | None
    std_max: float | None
    clip: float | None
    normalize_first: bool
    dtype: np.dtype
    axis_name: Any = dataclasses.field(default=None, metadata={"checkpoint": False})

    def __post_init__(self) -> None:
        checks.check_choice("preset", self.preset, tuple(OBSERVATION_PRESETS))
        dtype = rs.check_dtype(self.dtype)
        object.__setattr__(self, "dtype", dtype)
        object.__setattr__(self, "prior_count", rs.check_prior_count(self.prior_count, dtype))
        epsilon = checks.check_non_negative("epsilon", self.epsilon, dtype, may_vanish=True)
        object.__setattr__(self, "epsilon", epsilon)
        for name in ("std_min", "std_max", "clip"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, checks.check_positive(name, value, dtype))
        if self.std_min is not None and self.std_max is not None and self.std_min > self.std_max:
            raise ValueError(
                f"std_min={self.std_min!r} is above std_max={self.std_max!r}: the bounds of "
                "the standard deviation must be ordered."
            )
        if self.prior_count == 0 and self.epsilon == 0 and self.std_min is None:
            raise ValueError(
                "prior_count=0 with epsilon=0 and no std_min divides a constant feature by 0: "
                "give std_min (Brax's 1e-6), an epsilon > 0, or a prior."
            )
        checks.check_bool("normalize_first", self.normalize_first)
        object.__setattr__(self, "axis_name", rs.check_axis_name(self.axis_name))


class ObservationNormState(struct.PyTreeNode):
    """State of :func:`normalize_observation`: statistics per leaf of the observation.

    ``stats`` has the observation's pytree structure, with a
    :class:`~rewardnorm_jax.RunningStats` of the leaf's feature shape where
    the observation has an array.
    """

    stats: Any


class ObservationNormalizer(NamedTuple):
    """Observation normalization: pure functions over an :class:`ObservationNormState`.

    Attributes:
      init: ``init(observation) -> state``: statistics for observations like
        ``observation`` (one observation, unbatched: a pytree of arrays or
        ``jax.ShapeDtypeStruct``; only the shapes are read).
      update: ``update(state, observations, *, active=None) -> state``: merge
        a batch: every leaf ``(*B, *feature)``, the same leading axes ``B``
        (none for one observation). ``active`` (shape ``B``) leaves entries out.
      apply: ``apply(state, observations) -> observations``: normalized with
        the current statistics, which are left unchanged.
      step: ``step(state, observations, update_stats=True, *, active=None)
        -> (observations, state)``: ``update`` and ``apply``, in the preset's
        order; ``update_stats=False`` (Python or traced) freezes the statistics.
      config: the :class:`ObservationConfig`, for checkpoints and messages.
    """

    init: Any
    update: Any
    apply: Any
    step: Any
    config: ObservationConfig


def normalize_observation(
    preset: str = "gymnasium",
    *,
    epsilon=_FROM_PRESET,
    clip=_FROM_PRESET,
    std_min=_FROM_PRESET,
    std_max=_FROM_PRESET,
    prior_count=_FROM_PRESET,
    dtype=None,
    axis_name=None,
) -> ObservationNormalizer:
    r"""Normalizes observations by the running mean and variance of each feature.

    Args:
      preset: ``"gymnasium"`` (default), ``"purejaxrl"``, ``"sb3"`` or
        ``"brax"``: whose arithmetic to reproduce (the table above, and
        :doc:`/observations`).
      epsilon: added to the variance under the square root (preset's if not given).
      clip: bound of the symmetric clip of the normalized values, or ``None``.
      std_min: lower bound of the standard deviation, or ``None``.
      std_max: upper bound of the standard deviation, or ``None``.
      prior_count: the prior's weight (mean 0, variance 1), or 0 for none.
      dtype: statistics dtype, float32 or float64 (default: float64 under x64).
      axis_name: name(s) of mapped axes (``vmap``, ``pmap``, ``shard_map``)
        whose batches merge into one set of statistics.

    Returns:
      An :class:`ObservationNormalizer`.

    Raises:
      ValueError: naming an option, its value and what is valid.

    Example:
      >>> import jax.numpy as jnp
      >>> norm = normalize_observation()
      >>> state = norm.init(jnp.zeros(2))
      >>> obs, state = norm.step(state, jnp.array([[1.0, 10.0], [3.0, 30.0]]))
      >>> [round(float(x), 4) for x in obs[0]]  # -1, but for the prior of weight 1e-4
      [-0.9998, -0.9998]
    """
    chosen = OBSERVATION_PRESETS[checks.check_choice("preset", preset, tuple(OBSERVATION_PRESETS))]
    given = {
        "prior_count": prior_count,
        "epsilon": epsilon,
        "std_min": std_min,
        "std_max": std_max,
        "clip": clip,
    }
    options = {**chosen, **{name: v for name, v in given.items() if v is not _FROM_PRESET}}
    config = ObservationConfig.checked(
        preset=preset, dtype=rs.check_dtype(dtype), axis_name=axis_name, **options
    )
    return ObservationNormalizer(
        functools.partial(init, config),
        functools.partial(update, config),
        functools.partial(apply, config),
        functools.partial(step, config),
        config,
    )


def init(config: ObservationConfig, observation) -> ObservationNormState:
    """Statistics of the prior alone for every leaf of ``observation`` (one, unbatched)."""
    leaves = jax.tree.leaves(observation)
    if not leaves:
        raise ValueError("observation has no arrays: init needs one observation's leaves.")
    for leaf in leaves:
        checks.check_reward("observation", leaf)
    stats = jax.tree.map(
        lambda leaf: rs.init_stats(
            checks.shape_of(leaf), config.dtype, prior_count=config.prior_count
        ),
        observation,
    )
    return ObservationNormState(stats)


def _pairs(config: ObservationConfig, state: ObservationNormState, observations, name: str):
    """``[(leaf, stats)]`` in tree order, and the batch shape every leaf shares."""
    rs.participants(config.axis_name)  # an unbound axis_name is named before any collective
    if not isinstance(state, ObservationNormState):
        raise TypeError(
            f"state should be an ObservationNormState (from init), got {type(state).__name__}."
        )
    stats_leaves, stats_def = jax.tree.flatten(
        state.stats, is_leaf=lambda x: isinstance(x, rs.RunningStats)
    )
    obs_leaves, obs_def = jax.tree.flatten(observations)
    if obs_def != stats_def:  # type: ignore[operator, unused-ignore]
        raise ValueError(
            f"{name} have the structure {obs_def}; the statistics were made for {stats_def}."
        )
    batch_shape = None
    for leaf, stats in zip(obs_leaves, stats_leaves, strict=True):
        if not isinstance(stats, rs.RunningStats) or stats.prior_count != config.prior_count:
            found = getattr(stats, "prior_count", type(stats).__name__)
            raise ValueError(
                f"state holds statistics with prior_count={found!r}, but this normalizer "
                f"({config.preset!r} preset) has prior_count={config.prior_count!r}: pass a "
                "state of this normalizer (norm.init), or build the normalizer that made it "
                "(rnb.from_running_statistics returns both)."
            )
        checks.check_reward(name, leaf)
        shape, feature = checks.shape_of(leaf), stats.mean.shape
        leading = shape[: len(shape) - len(feature)]
        if len(shape) < len(feature) or shape[len(leading) :] != feature:
            raise ValueError(
                f"{name} has a leaf of shape {shape}, which does not end with its statistics' "
                f"feature shape {feature}."
            )
        if batch_shape is None:
            batch_shape = leading
        elif leading != batch_shape:
            raise ValueError(
                f"{name} have leaves with batch shapes {batch_shape} and {leading}: every "
                "leaf needs the same leading axes."
            )
    return list(zip(obs_leaves, stats_leaves, strict=True)), obs_def, batch_shape


_HEAD_ROWS = 8  # the batch's leading entries a fresh feature's shift is taken from


def _merge(config: ObservationConfig, stats: rs.RunningStats, leaf, selected):
    """One leaf merged: non-finite entries (and unselected ones) left out.

    The sums are shifted by an entry of the batch, so that they stay well
    conditioned however far the data are from 0: the first entry if it is
    selected; else, for a feature without samples, the first selected one
    among the batch's first ``_HEAD_ROWS`` entries (a search of the whole
    batch would cost a serial reduction on every step); else the running
    mean, near the data once samples have been merged. Only a fresh feature
    with none of those entries selected is shifted by its mean, and loses
    precision in that first merge if its data are far from 0. The shift is
    found by one small reduction over those candidates (:func:`_first_chosen`),
    so that XLA computes it once rather than again for every entry of the
    batch. The entries left out are filled with it: the sums may weight
    entries, so they must be finite. The statistics are not differentiated:
    they are constants of the normalization.
    """
    values = jax.lax.stop_gradient(jnp.asarray(leaf).astype(stats.mean.dtype))
    finite = jnp.isfinite(values)
    mask = finite if selected is None else finite & selected
    entries: Any = math.prod(values.shape[: values.ndim - stats.mean.ndim])  # symbolic: export
    flat = values.reshape(entries, *stats.mean.shape)
    flat_mask = mask.reshape(entries, *stats.mean.shape)
    if isinstance(entries, int):
        rows = min(_HEAD_ROWS, entries)
    else:  # a symbolic batch (jax.export): unselected rows after it, so that it has enough
        padding = jnp.broadcast_to(stats.mean, (_HEAD_ROWS, *stats.mean.shape))
        flat = jnp.concatenate([flat, padding.astype(flat.dtype)])
        flat_mask = jnp.concatenate([flat_mask, jnp.zeros(padding.shape, bool)])
        rows = _HEAD_ROWS
    fresh = stats.sample_count == 0
    first_row = (jnp.arange(rows) == 0).reshape(rows, *(1,) * stats.mean.ndim)
    # The running mean last: chosen when nothing before it is. Under axis_name only a
    # fresh feature offers it, so that a participant with data wins the agreement.
    mean_offered = True if config.axis_name is None else fresh & jnp.isfinite(stats.mean)
    candidates = jnp.concatenate([flat[:rows], stats.mean[None]])
    chosen = jnp.concatenate(
        [flat_mask[:rows] & (first_row | fresh), jnp.broadcast_to(mean_offered, (1, *fresh.shape))]
    )
    found, shift = _first_chosen(candidates, chosen)
    if config.axis_name is not None:
        shift = rs.agreed_shift(stats, found, shift, config.axis_name)
    values = jnp.where(mask, values, shift)
    return rs.merge_checked(
        stats, values, mask, axis_name=config.axis_name, unselected_alike=True, shift=shift
    )


def _first_chosen(candidates, chosen):
    """``(found, value)``: the first chosen candidate along axis 0, by one reduction.

    The reduction keeps the smaller row index, so the result does not depend
    on the order in which XLA combines the rows; its output is computed once,
    never again inside the loops that read it.
    """
    rows = candidates.shape[0]
    index = jax.lax.broadcasted_iota(jnp.int32, candidates.shape, 0)
    key = jnp.where(chosen, index, rows)  # rows: none chosen
    value = jnp.where(chosen, candidates, jnp.zeros((), candidates.dtype))
    key, value = jax.lax.reduce(
        (key, value), (jnp.int32(rows), jnp.zeros((), candidates.dtype)), _earlier, (0,)
    )
    return key < rows, value


def _earlier(a, b):
    take_a = a[0] <= b[0]
    return jnp.where(take_a, a[0], b[0]), jnp.where(take_a, a[1], b[1])


def _selected(active, update_stats, batch_shape, feature_shape):
    """The entries to learn from, ``None`` for all: ``active`` and ``update_stats``."""
    if active is None and isinstance(update_stats, (bool, np.bool_)) and update_stats:
        return None
    flags = jnp.asarray(update_stats, bool)
    if active is not None:
        flags = flags & jnp.asarray(active, bool)
    return checks.spread(jnp.broadcast_to(flags, batch_shape), batch_shape + feature_shape)


def _check_active(active, batch_shape):
    if active is None:
        return None
    checks.check_flag("active", active)
    if jnp.shape(active) != batch_shape:
        raise ValueError(
            f"active has shape {jnp.shape(active)}; expected {batch_shape}, the observations' "
            "batch shape."
        )
    return active


def _update(config, state, observations, update_stats, active):
    pairs, treedef, batch_shape = _pairs(config, state, observations, "observations")
    active = _check_active(active, batch_shape)
    if isinstance(update_stats, (bool, np.bool_)) and not update_stats:
        return state  # frozen by a Python flag: nothing to compile
    merged = [
        _merge(config, stats, leaf, _selected(active, update_stats, batch_shape, stats.mean.shape))
        for leaf, stats in pairs
    ]
    return ObservationNormState(treedef.unflatten(merged))


def update(config: ObservationConfig, state, observations, *, active=None):
    """``state`` with a batch of observations merged (see :class:`ObservationNormalizer`)."""
    return _update(config, state, observations, True, active)


def std(config: ObservationConfig, stats: rs.RunningStats) -> jax.Array:
    r"""The divisor :math:`\mathrm{clip}(\sqrt{\sigma^2 + \epsilon}, \sigma_{min}, \sigma_{max})`.

    Statistics without a prior have no variance before their first sample:
    the divisor is 1 there (Brax's initial ``std``).
    """
    divisor = jnp.sqrt(stats.var + config.epsilon)
    if config.std_min is not None or config.std_max is not None:
        divisor = jnp.clip(divisor, config.std_min, config.std_max)
    if config.prior_count == 0:
        divisor = jnp.where(stats.sample_count > 0, divisor, 1.0)
    return divisor


def _normalize_leaf(config: ObservationConfig, leaf, stats: rs.RunningStats):
    if not jnp.issubdtype(jnp.result_type(leaf), jnp.inexact):
        return leaf  # integer and boolean leaves pass unchanged
    values = jnp.asarray(leaf)
    dtype = jnp.promote_types(values.dtype, stats.mean.dtype)  # float64 stats: float64 math
    centred = (values.astype(dtype) - stats.mean) - stats.mean_low
    normalized = centred / std(config, stats)
    if config.clip is not None:
        normalized = jnp.clip(normalized, -config.clip, config.clip)
    return normalized.astype(values.dtype)


def apply(config: ObservationConfig, state, observations):
    """``observations`` normalized by the current statistics, which are left unchanged."""
    pairs, treedef, _ = _pairs(config, state, observations, "observations")
    return treedef.unflatten([_normalize_leaf(config, leaf, stats) for leaf, stats in pairs])


def step(config: ObservationConfig, state, observations, update_stats=True, *, active=None):
    """``update`` and ``apply`` in the preset's order; ``(observations, state)``."""
    checks.check_update_stats(update_stats)
    new_state = _update(config, state, observations, update_stats, active)
    if config.normalize_first:
        return apply(config, state, observations), new_state
    # The barrier keeps the merge out of the normalization's fused loop, which XLA:CPU
    # otherwise recomputes per entry (2.2x the step's time at N = 4096, 17 features).
    return apply(config, jax.lax.optimization_barrier(new_state), observations), new_state
