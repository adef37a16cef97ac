r"""Observation normalization: running mean and variance per feature of an observation pytree.

Every leaf of an observation pytree keeps statistics of its own feature shape
(:class:`~rewardnorm_jax.RunningStats`, one set per feature, shared by the
batch, or kept per environment or per task: the ``statistics`` option),
merged by the library's one merge, so they count exactly, merge across
``axis_name`` like every other statistic, freeze, and checkpoint:

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

========== ============ ================ ============================ ====== ==================
preset     prior weight epsilon          std bounds                   clip   order of ``step``
========== ============ ================ ============================ ====== ==================
gymnasium  1e-4         1e-8             none                         none   update, normalize
purejaxrl  1e-4         1e-8             none                         none   update, normalize
sb3        1e-4         1e-8             none                         10     update, normalize
brax       0            0                [1e-6, 1e6]; 1 before data   none   normalize, update
brax_ema   0            0                [1e-6, 1e6]; 1 before data   none   normalize, update
rsl_rl     0            1e-2, on the std none; 1 before data          none   update, normalize
========== ============ ================ ============================ ====== ==================

``brax_ema`` is Brax's ``mode='ema'``: the same statistics as its Welford
mode (its rate :math:`b / n` update is the exact merge), its state holding
the variance rather than its sum;
:func:`rewardnorm_jax.brax.to_running_statistics` gives a state of that mode.
(Given ``weights``, Brax's EMA mode averages the batch unweighted and counts
their total; the preset weighs the entries, as the Welford mode does.)
``rsl_rl`` is rsl_rl's ``EmpiricalNormalization``, which adds epsilon to
the standard deviation (``epsilon_on="std"``):

.. math::
    \tilde x = \frac{x - \mu}{\sigma + \epsilon}, \qquad
    \sigma = \sqrt{\sigma^2_{run}} \text{ (1 before the first sample)},

and whose ``until`` is ``until_count``: the statistics learn from a batch
while their count before it is below ``until_count`` (the batch that
crosses it is merged whole), and are frozen from then on.

Integer and boolean leaves are returned unchanged (their statistics are
still kept, as Brax keeps them). Non-finite entries are left out of the
statistics (each feature counts its own samples) and come out non-finite.

``denormalize`` inverts the normalization, :math:`x = \tilde x \sigma + \mu`
(Brax's ``running_statistics.denormalize``), and ``update(..., weights=w)``
counts an entry of weight :math:`w` as :math:`w` repeated entries (Brax's
``running_statistics.update(..., weights=w)``): see :func:`denormalize` and
:func:`update`.
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
from rewardnorm_jax._src.stats.placement import SHARED, Statistics


def _preset(
    prior_count, epsilon, std_min, std_max, clip, normalize_first, epsilon_on="variance"
) -> dict[str, Any]:
    """One preset's options, as :class:`ObservationConfig` names them."""
    return {
        "prior_count": prior_count,
        "epsilon": epsilon,
        "std_min": std_min,
        "std_max": std_max,
        "clip": clip,
        "normalize_first": normalize_first,
        "epsilon_on": epsilon_on,
        "until_count": None,
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
    # The same in mode='ema': the statistics are the same, its state holds the variance.
    "brax_ema": _preset(0.0, 0.0, 1e-6, 1e6, None, True),
    # rsl_rl.modules.EmpiricalNormalization (eps=1e-2, until=None): epsilon on the std.
    "rsl_rl": _preset(0.0, 1e-2, None, None, None, False, epsilon_on="std"),
}
"""The presets' options by name; each reproduces its library's numbers (float32 rounding aside)."""

_FROM_PRESET: Any = object()  # an option left to the preset


@dataclasses.dataclass(frozen=True)
class ObservationConfig(base.Config):
    r"""The options of :func:`normalize_observation`, checked and resolved from the preset.

    Attributes:
      preset: the preset the options not given were taken from.
      prior_count: the weight of the prior (mean 0, variance 1); 0 for none.
      epsilon: added to the variance under the square root, or to the
        standard deviation (``epsilon_on``).
      epsilon_on: ``"variance"`` (:math:`\sqrt{\sigma^2 + \epsilon}`) or
        ``"std"`` (:math:`\sqrt{\sigma^2} + \epsilon`, rsl_rl's).
      until_count: ``None``, or the count from which the statistics stop
        learning: a batch is merged while the count before it is below it.
      std_min: lower bound of the standard deviation, or ``None``.
      std_max: upper bound of the standard deviation, or ``None``.
      clip: bound ``c`` of the symmetric clip of normalized values, or ``None``.
      normalize_first: whether ``step`` normalizes with the statistics from
        before its update (Brax's PPO acts on a rollout with the statistics
        from before that rollout's update) rather than after (Gymnasium,
        Stable-Baselines3 and PureJaxRL update, then normalize).
      dtype: the statistics dtype.
      statistics: where the statistics live: shared by the batch, per
        environment or per task (:func:`check_statistics`).
      finite_observations: the caller's promise that every observation is
        finite: the merge then skips the non-finite mask and the search for a
        selected entry to shift by (:func:`normalize_observation`).
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
    statistics: Statistics = SHARED
    finite_observations: bool = False
    epsilon_on: str = "variance"
    until_count: int | None = None
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
        checks.check_choice("epsilon_on", self.epsilon_on, ("variance", "std"))
        if self.until_count is not None:
            until = checks.check_count(
                "until_count", self.until_count, minimum=1, maximum=2**64 - 1
            )
            object.__setattr__(self, "until_count", until)
        finite = checks.check_bool("finite_observations", self.finite_observations)
        object.__setattr__(self, "finite_observations", finite)
        check_statistics(self.statistics)
        object.__setattr__(self, "axis_name", rs.check_axis_name(self.axis_name))


def check_statistics(statistics) -> Statistics:
    """``statistics`` if observations can keep it: shared, per environment or per task.

    Raises:
      TypeError: for a value that is no :class:`~rewardnorm_jax.Statistics`.
      ValueError: for ``components`` (an observation's axes are its features,
        each with statistics of its own already) or ``decay``.
    """
    if not isinstance(statistics, Statistics):
        raise TypeError(
            "statistics should be a rewardnorm_jax.Statistics (e.g. rn.Statistics(per_env=True)), "
            f"got statistics={statistics!r}."
        )
    if statistics.components or statistics.decay is not None:
        raise ValueError(
            f"statistics={statistics!r} is not supported for observations: use Statistics() "
            "(one set shared by the batch), Statistics(per_env=True) (one per environment) or "
            "Statistics(num_tasks=K) (one per task); every feature keeps its own statistics "
            "already (no components), and they are cumulative (no decay)."
        )
    return statistics


class ObservationNormState(struct.PyTreeNode):
    """State of :func:`normalize_observation`: statistics per leaf of the observation.

    ``stats`` has the observation's pytree structure, with a
    :class:`~rewardnorm_jax.RunningStats` where the observation has an array,
    of the leaf's feature shape ``F`` led by the placement's axes:
    ``F`` (shared), ``(*env_shape, *F)`` (per environment) or ``(K, *F)``
    (per task). The placement is static: ``env_shape``, the environments'
    shape of per-environment statistics (``()`` otherwise), ``per_env`` and
    ``num_tasks``, as the :class:`~rewardnorm_jax.Statistics` that made the
    state has them, so that a normalizer refuses a state of another placement
    whose shapes happen to fit it.
    """

    stats: Any
    env_shape: tuple[int, ...] = struct.field(pytree_node=False, default=())
    per_env: bool = struct.field(pytree_node=False, default=False)
    num_tasks: int | None = struct.field(pytree_node=False, default=None)


class ObservationNormalizer(NamedTuple):
    r"""Observation normalization: pure functions over an :class:`ObservationNormState`.

    Attributes:
      init: ``init(observation, batch_shape=None) -> state``: statistics for
        observations like ``observation`` (one observation, unbatched: a
        pytree of arrays or ``jax.ShapeDtypeStruct``; only the shapes are
        read). ``batch_shape``, the environments' shape, is needed by
        per-environment statistics, which it leads; the others ignore it.
      update: ``update(state, observations, *, active=None, weights=None,
        task=None) -> state``: merge a batch: every leaf ``(*B, *feature)``,
        the same leading axes ``B`` (none for one observation; ending with
        the environments' shape for per-environment statistics). ``active``
        (shape ``B``) leaves entries out; ``weights`` (shape ``B``, ``>= 0``)
        counts an entry of weight :math:`w` as :math:`w` repeated entries,
        the batch joining as its total weight rounded to a whole number of
        samples. ``task`` (shape ``B``, integers in ``[0, K)``): each entry's
        task, given exactly with per-task statistics.
      apply: ``apply(state, observations, *, task=None) -> observations``:
        normalized with the current statistics, which are left unchanged.
      step: ``step(state, observations, update_stats=True, *, active=None,
        weights=None, task=None) -> (observations, state)``: ``update`` and
        ``apply``, in the preset's order; ``update_stats=False`` (Python or
        traced) freezes the statistics.
      config: the :class:`ObservationConfig`, for checkpoints and messages.
      denormalize: ``denormalize(state, observations, *, task=None) ->
        observations``: the inverse of ``apply``, :math:`x = \tilde x \sigma +
        \mu`, where it does not clip (a clipped value comes back as
        :math:`\mu \pm c \sigma`).
    """

    init: Any
    update: Any
    apply: Any
    step: Any
    config: ObservationConfig
    denormalize: Any

    @property
    def num_tasks(self) -> int | None:
        """``None``, or the number of tasks of per-task statistics (calls then need ``task``)."""
        return self.config.statistics.num_tasks


def normalize_observation(
    preset: str = "gymnasium",
    *,
    epsilon=_FROM_PRESET,
    clip=_FROM_PRESET,
    std_min=_FROM_PRESET,
    std_max=_FROM_PRESET,
    prior_count=_FROM_PRESET,
    epsilon_on=_FROM_PRESET,
    until_count=_FROM_PRESET,
    statistics: Statistics = SHARED,
    finite_observations: bool = False,
    dtype=None,
    axis_name=None,
) -> ObservationNormalizer:
    r"""Normalizes observations by the running mean and variance of each feature.

    Args:
      preset: ``"gymnasium"`` (default), ``"purejaxrl"``, ``"sb3"``,
        ``"brax"``, ``"brax_ema"`` or ``"rsl_rl"``: whose arithmetic to
        reproduce (the table above, and :doc:`/observations`).
      epsilon: added to the variance under the square root, or to the
        standard deviation with ``epsilon_on="std"`` (preset's if not given).
      clip: bound of the symmetric clip of the normalized values, or ``None``.
      std_min: lower bound of the standard deviation, or ``None``.
      std_max: upper bound of the standard deviation, or ``None``.
      prior_count: the prior's weight (mean 0, variance 1), or 0 for none.
      epsilon_on: where epsilon goes: ``"variance"`` (every preset but
        ``rsl_rl``) or ``"std"`` (``rsl_rl``). The divisor is

        .. math::
            \sigma = \operatorname{clip}\!\left(\sqrt{\sigma^2_{run} + \epsilon},
            \sigma_{min}, \sigma_{max}\right) \quad\text{or}\quad
            \sigma = \operatorname{clip}\!\left(\sqrt{\sigma^2_{run}},
            \sigma_{min}, \sigma_{max}\right) + \epsilon,

        where, without a prior, the clipped root is 1 before the first sample.
      until_count: ``None`` (default: always learn), or a count
        :math:`u \ge 1` (rsl_rl's ``until``): each feature learns from a batch
        while the samples it counted before the batch number fewer than
        :math:`u`, so the batch that takes it to :math:`u` or past is merged
        whole, and every later one is left out, as ``update_stats=False``
        leaves it out. (Brax's ``until_count`` is a different rule, of its
        trainer: see :func:`rewardnorm_jax.brax.to_running_statistics`.)
      statistics: where the statistics live
        (:class:`~rewardnorm_jax.Statistics`): ``Statistics()`` (default),
        one set per feature shared by the batch; ``Statistics(per_env=True)``,
        one set per feature of each environment (``init(observation,
        batch_shape=(N,))``: statistics ``(N, *feature)``), for environments
        of scales of their own (domain randomisation); ``Statistics(num_tasks=K)``,
        one set per feature of each task (statistics ``(K, *feature)``), every
        call taking ``task=`` ids. Set :math:`s` (an environment, or a task
        :math:`k`) learns from its entries alone and normalizes them,

        .. math::
            \mu_s, \sigma^2_s \text{ from } \{x_i : s(i) = s\}, \qquad
            \tilde x_i = \frac{x_i - \mu_{s(i)}}{\sigma_{s(i)}},

        as separate normalizers of the slices would. An entry whose task id
        is outside ``[0, K)`` under ``jit`` joins no set and normalizes to
        NaN (outside ``jit`` it is refused), as on the reward side.
      finite_observations: the caller's promise that every observation is
        finite (``finite_rewards`` of :func:`~rewardnorm_jax.normalize_reward`
        for observations). The merge then builds no mask of non-finite
        entries, counts none, and shifts its sums by the batch's first entry
        without searching the first rows for a selected one: with the
        ``"brax"`` preset the step took 0.74-1.0x the default's time at
        N = 64 and 1024 with 4 to 244 features (:doc:`/observations`). On
        finite observations it computes what the default computes (the same
        shift, sums, count and merge; equal to the default's outputs within a
        few ulps), so its error is the default's: within :math:`10^{-4}`
        standard deviations of float64 (at most 5e-6 measured there, where
        Brax's float32 statistics err by 8e-3 to 5e-2). A non-finite entry
        is then merged: its feature's variance saturates at ``+inf`` (the
        mean keeps its value) and the feature normalizes to 0 from then on
        (to :math:`(x - \mu) / \sigma_{max}` with ``std_max``); the other
        features are unaffected. ``active``, ``weights`` and ``update_stats``
        still select entries.
      dtype: statistics dtype, float32 or float64 (default: float64 under x64).
      axis_name: name(s) of mapped axes (``vmap``, ``pmap``, ``shard_map``)
        whose batches merge into one set of statistics: of each task with
        per-task statistics; position-wise with per-environment ones
        (environment :math:`i` of every participant shares a set).

    Returns:
      An :class:`ObservationNormalizer`.

    Raises:
      ValueError: naming an option, its value and what is valid.
      TypeError: for ``finite_observations`` that is not a bool, naming it
        and the value.

    Example:
      >>> import jax.numpy as jnp
      >>> norm = normalize_observation()
      >>> state = norm.init(jnp.zeros(2))
      >>> obs, state = norm.step(state, jnp.array([[1.0, 10.0], [3.0, 30.0]]))
      >>> [round(float(x), 4) for x in obs[0]]  # -1, but for the prior of weight 1e-4
      [-0.9998, -0.9998]

      One set per task: the two observations of task 1 share theirs.

      >>> import rewardnorm_jax as rn
      >>> norm = normalize_observation("brax", statistics=rn.Statistics(num_tasks=2))
      >>> state = norm.init(jnp.zeros(()))
      >>> obs, state = norm.step(state, jnp.array([5.0, 1.0, 3.0]), task=jnp.array([0, 1, 1]))
      >>> state.stats.mean.tolist(), obs.tolist()  # brax normalizes first
      ([5.0, 2.0], [5.0, 1.0, 3.0])

      rsl_rl's arithmetic, learning until the count reaches 2:

      >>> norm = normalize_observation("rsl_rl", until_count=2)
      >>> obs, state = norm.step(norm.init(jnp.zeros(())), jnp.array([1.0, 3.0]))
      >>> [round(float(x), 4) for x in obs]  # (x - 2) / (1 + 0.01)
      [-0.9901, 0.9901]
      >>> obs, state = norm.step(state, jnp.array([9.0]))  # frozen: count 2
      >>> float(state.stats.mean), round(float(obs[0]), 4)
      (2.0, 6.9307)
    """
    chosen = OBSERVATION_PRESETS[checks.check_choice("preset", preset, tuple(OBSERVATION_PRESETS))]
    given = {
        "prior_count": prior_count,
        "epsilon": epsilon,
        "std_min": std_min,
        "std_max": std_max,
        "clip": clip,
        "epsilon_on": epsilon_on,
        "until_count": until_count,
    }
    options = {**chosen, **{name: v for name, v in given.items() if v is not _FROM_PRESET}}
    config = ObservationConfig.checked(
        preset=preset,
        dtype=rs.check_dtype(dtype),
        statistics=statistics,
        finite_observations=finite_observations,
        axis_name=axis_name,
        **options,
    )
    return ObservationNormalizer(
        init=functools.partial(init, config),
        update=functools.partial(update, config),
        apply=functools.partial(apply, config),
        denormalize=functools.partial(denormalize, config),
        step=functools.partial(step, config),
        config=config,
    )


def init(config: ObservationConfig, observation, batch_shape=None) -> ObservationNormState:
    """Statistics of the prior alone for every leaf of ``observation`` (one, unbatched).

    Each leaf of feature shape ``F`` gets statistics of shape
    ``config.statistics.shape(batch_shape) + F``: ``F`` shared,
    ``(*batch_shape, *F)`` per environment, ``(K, *F)`` per task.

    Raises:
      ValueError: for per-environment statistics without ``batch_shape``.
    """
    leaves = jax.tree.leaves(observation)
    if not leaves:
        raise ValueError("observation has no arrays: init needs one observation's leaves.")
    for leaf in leaves:
        checks.check_reward("observation", leaf)
    if batch_shape is None and config.statistics.per_env:
        raise ValueError(
            "batch_shape=None: statistics=Statistics(per_env=True) keeps one set per "
            "environment, so init needs the environments' shape: "
            "norm.init(observation, batch_shape=(num_envs,))."
        )
    env_shape = checks.check_batch_shape(() if batch_shape is None else batch_shape, "batch_shape")
    placed = config.statistics.shape(env_shape)
    stats = jax.tree.map(
        lambda leaf: rs.init_stats(
            placed + checks.shape_of(leaf), config.dtype, prior_count=config.prior_count
        ),
        observation,
    )
    statistics = config.statistics
    return ObservationNormState(
        stats,
        env_shape if statistics.per_env else (),
        per_env=statistics.per_env,
        num_tasks=statistics.num_tasks,
    )


def _placement(per_env: bool, num_tasks: int | None) -> str:
    """A placement in words, as the ``statistics`` option says it."""
    if per_env:
        return "one set per environment (Statistics(per_env=True))"
    if num_tasks is not None:
        return f"one set per task (Statistics(num_tasks={num_tasks}))"
    return "one set shared by the batch (Statistics())"


def check_state(config: ObservationConfig, state, name: str = "state") -> list[rs.RunningStats]:
    """The statistics of ``state`` in tree order, after checking this normalizer made them.

    Raises:
      TypeError: for a ``state`` that is no :class:`ObservationNormState`.
      ValueError: naming ``name``, for statistics of another placement (shared,
        per environment, per task and its number of tasks), prior or shape.
    """
    if not isinstance(state, ObservationNormState):
        raise TypeError(
            f"{name} should be an ObservationNormState (from init), got {type(state).__name__}."
        )
    statistics = config.statistics
    if state.env_shape and not statistics.per_env:
        raise ValueError(
            f"{name} holds statistics per environment (env_shape={state.env_shape}), but this "
            f"normalizer keeps statistics={statistics!r}: pass a state of this "
            "normalizer (norm.init)."
        )
    placed = config.statistics.shape(state.env_shape)
    stats_leaves = jax.tree.leaves(state.stats, is_leaf=lambda x: isinstance(x, rs.RunningStats))
    for stats in stats_leaves:
        if not isinstance(stats, rs.RunningStats) or stats.prior_count != config.prior_count:
            found = getattr(stats, "prior_count", type(stats).__name__)
            raise ValueError(
                f"{name} holds statistics with prior_count={found!r}, but this normalizer "
                f"({config.preset!r} preset) has prior_count={config.prior_count!r}: pass a "
                "state of this normalizer (norm.init), or build the normalizer that made it "
                "(rnb.from_running_statistics returns both)."
            )
        if stats.mean.shape[: len(placed)] != placed:
            raise ValueError(
                f"{name} holds statistics of shape {stats.mean.shape}, but this normalizer "
                f"keeps statistics={config.statistics!r}, whose shapes start with {placed}: "
                "pass a state of this normalizer (norm.init)."
            )
    if (state.per_env, state.num_tasks) != (statistics.per_env, statistics.num_tasks):
        raise ValueError(
            f"{name} holds {_placement(state.per_env, state.num_tasks)}, but this normalizer "
            f"keeps {_placement(statistics.per_env, statistics.num_tasks)}: pass a state of "
            "this normalizer (norm.init), or build the normalizer with the statistics option "
            "that made the state."
        )
    return stats_leaves


def _pairs(config: ObservationConfig, state: ObservationNormState, observations, name: str):
    """``[(leaf, stats)]`` in tree order, and the batch shape every leaf shares.

    A leaf ends with its statistics' feature shape, led by the environments'
    shape for per-environment statistics; the batch shape is the axes before
    the feature shape.
    """
    rs.participants(config.axis_name)  # an unbound axis_name is named before any collective
    stats_leaves = check_state(config, state)
    stats_def = jax.tree.structure(state.stats, is_leaf=lambda x: isinstance(x, rs.RunningStats))
    obs_leaves, obs_def = jax.tree.flatten(observations)
    if obs_def != stats_def:  # type: ignore[operator, unused-ignore]
        raise ValueError(
            f"{name} have the structure {obs_def}; the statistics were made for {stats_def}."
        )
    placed = config.statistics.shape(state.env_shape)
    batch_shape = None
    for leaf, stats in zip(obs_leaves, stats_leaves, strict=True):
        checks.check_reward(name, leaf)
        shape = checks.shape_of(leaf)
        feature = stats.mean.shape[len(placed) :]
        ending = state.env_shape + feature  # env_shape is () unless per environment
        leading = shape[: len(shape) - len(ending)]
        if len(shape) < len(ending) or shape[len(leading) :] != ending:
            raise ValueError(
                f"{name} has a leaf of shape {shape}, which does not end with {ending}, its "
                f"statistics' feature shape {feature} led by the environments' shape "
                f"{state.env_shape}."
            )
        if batch_shape is None:
            batch_shape = leading + state.env_shape
        elif leading + state.env_shape != batch_shape:
            raise ValueError(
                f"{name} have leaves with batch shapes {batch_shape} and "
                f"{leading + state.env_shape}: every leaf needs the same leading axes."
            )
    return list(zip(obs_leaves, stats_leaves, strict=True)), obs_def, batch_shape


def _task_ids(config: ObservationConfig, task, batch_shape):
    """Checked ``task`` ids (int32, ``-1`` out of range under ``jit``), ``None`` without tasks.

    Raises:
      ValueError: for ``task`` given without per-task statistics, missing
        with them, or not of the batch shape.
    """
    num_tasks = config.statistics.num_tasks
    if num_tasks is None:
        checks.refuse_task(task, config.name)
        return None
    if task is None:
        raise ValueError(
            f"{config.name} keeps one set of statistics per task (num_tasks={num_tasks}) and "
            f"needs each observation's task id on every call: pass task=ids (integers in "
            f"[0, {num_tasks}), shape {batch_shape}), e.g. norm.step(state, observations, "
            "task=ids); an adapter's wrapper reads them with task_of=."
        )
    return checks.check_task(task, batch_shape, num_tasks, "observation")


_HEAD_ROWS = 8  # the batch's leading entries a fresh feature's shift is taken from


def _merge(config: ObservationConfig, stats: rs.RunningStats, leaf, selected, weights):
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
    entries, so they must be finite. ``weights`` (of the batch shape, or
    ``None``) weigh the selected entries (:func:`update`). The statistics are
    not differentiated: they are constants of the normalization.

    With ``finite_observations`` and every entry selected there is no mask:
    the shift is the first entry (the mean if it is not finite), which is the
    entry the search above picks for finite observations, so the merge
    computes the same numbers without building, counting or searching a mask
    (3-5 fewer kernels per step on XLA:CPU, and no pass over the batch for
    the count).
    """
    values = jax.lax.stop_gradient(jnp.asarray(leaf).astype(stats.mean.dtype))
    mask = _learned(config, values, selected)
    entries: Any = math.prod(values.shape[: values.ndim - stats.mean.ndim])  # symbolic: export
    flat = values.reshape(entries, *stats.mean.shape)
    if mask is None and isinstance(entries, int):
        # Finite observations, every one selected: the first entry is the shift (a
        # finite one; the mean after it), with no mask to build or search.
        rows = min(1, entries)
        head_mask = jnp.isfinite(flat[:rows])
    else:
        if mask is None:  # a symbolic batch (jax.export) of finite observations
            mask = jnp.ones(values.shape, bool)
        flat_mask = mask.reshape(entries, *stats.mean.shape)
        if isinstance(entries, int):
            rows = min(_HEAD_ROWS, entries)
        else:  # a symbolic batch (jax.export): unselected rows after it, so that it has enough
            padding = jnp.broadcast_to(stats.mean, (_HEAD_ROWS, *stats.mean.shape))
            flat = jnp.concatenate([flat, padding.astype(flat.dtype)])
            flat_mask = jnp.concatenate([flat_mask, jnp.zeros(padding.shape, bool)])
            rows = _HEAD_ROWS
        head_mask = flat_mask[:rows]
    fresh = stats.sample_count == 0
    first_row = (jnp.arange(rows) == 0).reshape(rows, *(1,) * stats.mean.ndim)
    # The running mean last: chosen when nothing before it is. Under axis_name only a
    # fresh feature offers it, so that a participant with data wins the agreement.
    mean_offered = True if config.axis_name is None else fresh & jnp.isfinite(stats.mean)
    candidates = jnp.concatenate([flat[:rows], stats.mean[None]])
    chosen = jnp.concatenate(
        [head_mask & (first_row | fresh), jnp.broadcast_to(mean_offered, (1, *fresh.shape))]
    )
    found, shift = _first_chosen(candidates, chosen)
    if config.axis_name is not None:
        shift = rs.agreed_shift(stats, found, shift, config.axis_name)
    if mask is not None:
        values = jnp.where(mask, values, shift)
    if weights is not None:
        weights = checks.spread(weights, values.shape)
    return rs.merge_checked(
        stats,
        values,
        mask,
        axis_name=config.axis_name,
        unselected_alike=True,
        shift=shift,
        weights=weights,
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


def _merge_per_task(config: ObservationConfig, stats, leaf, selected, weights, task):
    """One leaf merged into its tasks' statistics ``(K, *F)``: entry ``i`` into ``task[i]``'s.

    :func:`~rewardnorm_jax._src.stats.running.merge_keyed`, the reward
    side's keyed merge, shifts each task's sums by its entries' mean; an entry
    with a task id outside ``[0, K)`` (``-1``) joins no set.
    """
    values = jnp.asarray(leaf).astype(stats.mean.dtype)
    mask = _learned(config, values, selected)
    return rs.merge_keyed(stats, values, mask, task, axis_name=config.axis_name, weights=weights)


def _learned(config: ObservationConfig, values, selected):
    """The entries a merge learns from: finite and ``selected``; ``None`` for all.

    With ``finite_observations`` the values are promised finite: ``selected`` alone.
    """
    if config.finite_observations:
        return selected
    finite = jnp.isfinite(values)
    return finite if selected is None else finite & selected


def _selected(active, weights, update_stats, batch_shape, leaf_shape):
    """The entries to learn from, ``None`` for all: ``active``, a weight > 0 and ``update_stats``.

    A weight that is NaN (a traced one out of range) is not > 0: its entry is left out.
    """
    everything = isinstance(update_stats, (bool, np.bool_)) and update_stats
    if active is None and weights is None and everything:
        return None
    flags = jnp.asarray(update_stats, bool)
    if active is not None:
        flags = flags & jnp.asarray(active, bool)
    if weights is not None:
        flags = flags & (weights > 0)
    return checks.spread(jnp.broadcast_to(flags, batch_shape), leaf_shape)


def _learning(config: ObservationConfig, stats: rs.RunningStats, task, selected, leaf_shape):
    """``selected``, and with ``until_count`` only the features whose count is below it.

    The count's two words are compared with ``until_count``'s, exactly at any
    count. With per-task statistics each entry reads its task's count; an id
    outside ``[0, K)`` (NaN there) learns nothing, as it joins no set anyway.
    """
    if config.until_count is None:
        return selected
    hi, lo = (jnp.uint32(word) for word in divmod(config.until_count, 2**32))
    below = (stats.count_hi < hi) | ((stats.count_hi == hi) & (stats.count_lo < lo))
    if task is not None:
        below = rs.per_key(below.astype(stats.mean.dtype), task) > 0
    below = jnp.broadcast_to(below, leaf_shape)
    return below if selected is None else selected & below


def _check_batch_shape(name: str, value, batch_shape):
    if jnp.shape(value) != batch_shape:
        raise ValueError(
            f"{name} has shape {jnp.shape(value)}; expected {batch_shape}, the observations' "
            "batch shape."
        )


def _check_active(active, batch_shape):
    if active is None:
        return None
    checks.check_flag("active", active)
    _check_batch_shape("active", active, batch_shape)
    return active


def _check_weights(config: ObservationConfig, weights, batch_shape):
    """``weights`` in the statistics dtype; a traced one that is negative or not finite is NaN."""
    if weights is None:
        return None
    weights = checks.as_weights("weights", weights, config.dtype)
    _check_batch_shape("weights", weights, batch_shape)
    return weights


def _update(config, state, observations, update_stats, active, weights, task):
    """The merged state, and ``weights`` checked (NaN where a traced one is refused)."""
    pairs, treedef, batch_shape = _pairs(config, state, observations, "observations")
    active = _check_active(active, batch_shape)
    weights = _check_weights(config, weights, batch_shape)
    task = _task_ids(config, task, batch_shape)
    if isinstance(update_stats, (bool, np.bool_)) and not update_stats:
        return state, weights  # frozen by a Python flag: nothing to compile
    merge = _merge if task is None else functools.partial(_merge_per_task, task=task)
    merged = [
        merge(
            config,
            stats,
            leaf,
            _learning(
                config,
                stats,
                task,
                _selected(active, weights, update_stats, batch_shape, checks.shape_of(leaf)),
                checks.shape_of(leaf),
            ),
            weights,
        )
        for leaf, stats in pairs
    ]
    return state.replace(stats=treedef.unflatten(merged)), weights


def update(config: ObservationConfig, state, observations, *, active=None, weights=None, task=None):
    r"""``state`` with a batch of observations merged (see :class:`ObservationNormalizer`).

    ``weights`` (shape ``B``, real, finite, ``>= 0``) counts an entry of
    weight :math:`w` as :math:`w` repeated entries: with :math:`W = \sum_i
    w_i`, the batch's mean and variance are the weighted ones,

    .. math::
        \mu_b = \frac{1}{W} \sum_i w_i x_i, \qquad
        \sigma_b^2 = \frac{1}{W} \sum_i w_i (x_i - \mu_b)^2,

    and it joins the statistics as :math:`\operatorname{round}(W)` samples
    (half to even), so that the count stays a whole number. Integer weights
    (of any real dtype: Brax's float 0/1 weights) give the statistics of the
    entries repeated, with the count exact while a batch's weights total at
    most :math:`2^{24}` (float32 statistics; :math:`2^{53}` in float64), and
    equal Brax's ``running_statistics.update(..., weights=w)`` under the
    ``"brax"`` preset. Any weights the dtype holds are taken: their total
    may pass its range, and the statistics' weight past :math:`2^{64}`,
    where the past and the batch merge in their proportions and the count
    stays at :math:`2^{64} - 1`
    (:func:`~rewardnorm_jax._src.stats.running.merge_checked`). Fractional
    weights weigh the entries within their batch, and the batch weighs its
    total rounded: a batch of total weight below 1/2 changes nothing. (Brax
    adds the total's integer part to its
    count and divides its weighted sums by that count, which is a weighted
    mean only for totals that are integers.) A weight of 0 is
    ``active=False`` for its entry; ``active`` and ``weights`` together both
    apply. Concrete weights are checked; a traced weight that is negative or
    not finite leaves its entry out, as a weight of 0 (NaN never enters the
    statistics), and makes the entry's output of ``step`` NaN.

    Raises:
      ValueError: for ``active`` or ``weights`` not of the batch shape, or a
        concrete weight that is negative or not finite (naming it).
      TypeError: for weights that are not real numbers.

    Example:
      >>> import jax.numpy as jnp
      >>> norm = normalize_observation("brax")
      >>> state = norm.update(norm.init(jnp.zeros(())), jnp.array([1.0, 4.0]),
      ...                     weights=jnp.array([2.0, 1.0]))  # as [1, 1, 4]
      >>> float(state.stats.mean[()]), int(state.stats.sample_count[()])
      (2.0, 3)
    """
    return _update(config, state, observations, True, active, weights, task)[0]


def std(config: ObservationConfig, stats: rs.RunningStats) -> jax.Array:
    r"""The divisor :math:`\mathrm{clip}(\sqrt{\sigma^2 + \epsilon}, \sigma_{min}, \sigma_{max})`.

    With ``epsilon_on="std"``, :math:`\mathrm{clip}(\sqrt{\sigma^2},
    \sigma_{min}, \sigma_{max}) + \epsilon`. Statistics without a prior have
    no variance before their first sample: the clipped root is 1 there (Brax's
    and rsl_rl's initial ``std``).
    """
    on_variance = config.epsilon_on == "variance"
    divisor = jnp.sqrt(stats.var + config.epsilon) if on_variance else jnp.sqrt(stats.var)
    if config.std_min is not None or config.std_max is not None:
        divisor = jnp.clip(divisor, config.std_min, config.std_max)
    if config.prior_count == 0:
        divisor = jnp.where(stats.sample_count > 0, divisor, 1.0)
    return divisor if on_variance else divisor + config.epsilon


def _on_floating_leaves(config: ObservationConfig, state, observations, transform, task):
    """``transform(config, values, mean, mean_low, divisor)`` on each floating leaf.

    Integer and boolean leaves pass unchanged. The mean's two words and the
    divisor are each entry's: its task's with per-task statistics
    (:func:`~rewardnorm_jax._src.stats.running.per_key`, NaN for an id
    outside ``[0, K)``), else the statistics themselves, which broadcast over
    the batch. The values are computed in the wider of their dtype and the
    statistics' (float64 statistics: float64 math) and returned in their own.
    """
    pairs, treedef, batch_shape = _pairs(config, state, observations, "observations")
    task = _task_ids(config, task, batch_shape)

    def leaf_of(leaf, stats):
        if not jnp.issubdtype(jnp.result_type(leaf), jnp.inexact):
            return leaf  # integer and boolean leaves pass unchanged
        values = jnp.asarray(leaf)
        dtype = jnp.promote_types(values.dtype, stats.mean.dtype)
        words = (stats.mean, stats.mean_low, std(config, stats))
        if task is None and not state.env_shape and stats.mean.size >= _ONCE_FROM:
            words = _computed_once(words)
        seen = [rs.per_key(x, task) for x in words]
        return transform(config, values.astype(dtype), *seen).astype(values.dtype)

    return treedef.unflatten([leaf_of(leaf, stats) for leaf, stats in pairs])


_ONCE_FROM = 32  # statistics from which the normalization's words are computed apart


def _computed_once(words):
    """``words`` (arrays of one shape), computed by a kernel of their own, unchanged.

    XLA:CPU fuses the mean's words, read from the packed moments, and the
    divisor, computed from the count words and clamped, into the loop over
    the batch's entries, where they are read and computed again for every
    entry: with 64 and 244 features that loop took about 2x Brax's. A small
    reduction (:func:`_first_chosen` of the words over a row of zeros, which
    returns them exactly) is computed once, and the loop reads its output:
    0.84-1.03x the step's time (0.96 the median) with 32 to 244 features at
    N = 64 and 1024, with and without ``finite_observations`` (each the median
    of 5 interleaved rounds, jaxlib 0.9.0); with fewer features its
    kernel costs more than it saves, and per-environment or per-task
    statistics are read per entry anyway.
    """
    stacked = jnp.stack(words)
    rows = jnp.stack([stacked, jnp.zeros_like(stacked)])
    chosen = jnp.stack([jnp.ones(stacked.shape, bool), jnp.zeros(stacked.shape, bool)])
    return tuple(_first_chosen(rows, chosen)[1])


def _normalize_leaf(config: ObservationConfig, values, mean, mean_low, divisor):
    normalized = ((values - mean) - mean_low) / divisor
    if config.clip is not None:
        normalized = jnp.clip(normalized, -config.clip, config.clip)
    return normalized


def _denormalize_leaf(config: ObservationConfig, values, mean, mean_low, divisor):
    return (values * divisor + mean_low) + mean


def apply(config: ObservationConfig, state, observations, *, task=None):
    """``observations`` normalized by the current statistics, which are left unchanged."""
    return _on_floating_leaves(config, state, observations, _normalize_leaf, task)


def denormalize(config: ObservationConfig, state, observations, *, task=None):
    r"""``observations`` of the normalized scale read back: the inverse of ``apply``.

    .. math::
        x = \tilde x\, \sigma + \mu

    with :math:`\sigma` the divisor ``apply`` uses (:func:`std`: epsilon and
    the bounds included, 1 before the first sample without a prior) and
    :math:`\mu` the mean's two words, added low word first. Integer and
    boolean leaves pass unchanged, as in ``apply``. Under the ``"brax"``
    preset it equals Brax's ``running_statistics.denormalize(observations,
    brax_state)`` (``x * std + mean``) for the same statistics. A value that
    ``apply`` clipped cannot be restored: its clip bound :math:`\pm c` comes
    back as :math:`\mu \pm c \sigma`. The statistics are left unchanged.

    Example:
      >>> import jax.numpy as jnp
      >>> norm = normalize_observation("brax")
      >>> state = norm.update(norm.init(jnp.zeros(())), jnp.array([1.0, 3.0]))
      >>> float(norm.denormalize(state, norm.apply(state, jnp.array(4.0))))
      4.0
    """
    return _on_floating_leaves(config, state, observations, _denormalize_leaf, task)


def step(
    config: ObservationConfig,
    state,
    observations,
    update_stats=True,
    *,
    active=None,
    weights=None,
    task=None,
):
    """``update`` and ``apply`` in the preset's order; ``(observations, state)``.

    An entry whose traced weight is negative or not finite is NaN in the
    output (each floating leaf), and left out of the statistics.
    """
    checks.check_update_stats(update_stats)
    new_state, weights = _update(config, state, observations, update_stats, active, weights, task)
    if config.normalize_first:
        normalized = apply(config, state, observations, task=task)
    else:
        # The barrier keeps the merge out of the normalization's fused loop, which XLA:CPU
        # otherwise recomputes per entry (2.2x the step's time at N = 4096, 17 features).
        barrier = jax.lax.optimization_barrier(new_state)
        normalized = apply(config, barrier, observations, task=task)
    if weights is not None:
        normalized = _nan_where_refused(normalized, weights)
    return normalized, new_state


def _nan_where_refused(observations, weights):
    """``observations`` with each floating leaf NaN in the entries whose weight is NaN.

    ``weights`` are checked (:func:`_check_weights`): NaN marks a traced weight
    refused. Integer and boolean leaves pass unchanged.
    """
    refused = jnp.isnan(weights)

    def leaf_of(leaf):
        if not jnp.issubdtype(jnp.result_type(leaf), jnp.inexact):
            return leaf
        return jnp.where(checks.spread(refused, jnp.shape(leaf)), jnp.nan, leaf)

    return jax.tree.map(leaf_of, observations)
