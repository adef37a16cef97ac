r"""Supports whose bounds follow the return scale the reward statistics track.

A categorical critic's support must cover its targets, and the targets'
scale is what the reward statistics already measure: the running maximum of
:math:`|G|` (``normalize_reward(..., g_max=...)``'s ``ret_abs_max``, SimbaV2's
:math:`G_\max`) or the return's standard deviation, shared or per task
(``Statistics(num_tasks=K)``). :func:`scaled_support` reads one of them from a
:class:`~rewardnorm_jax.NormalizeRewardState` and keeps the bound
:math:`b = \max(b_0, m \cdot s)` of the support :math:`[-b, b]`, never
shrinking, so that a multi-task critic needs no hand-typed ``v_min`` /
``v_max`` per task.

When the bound moves, the logits a critic learnt on the old atoms are read
on the new ones: its decoded values scale with the bound. Two remedies,
each with its cost:

* **freeze after a warm-up** (``warmup=N``, implemented): the bound follows the
  statistics for ``N`` updates and is fixed after, so every decoded value is
  stable from then on; a return that later exceeds the bound is clipped
  to it (two-hot: all the mass on the end atom).
* **re-project** what is stored on the old atoms: a target distribution
  computed on them moves to the new atoms with
  :func:`~rewardnorm_jax.categorical_projection` (``source_support=old``,
  ``rewards=0``, ``discounts=1``), which keeps its expected value exactly when
  the new support covers the old one, as a growing bound does. The online
  network's logits cannot be re-projected so (a softmax over other atoms is
  not a reparametrisation of the last layer, as PopArt's is); without a
  warm-up its decoded values move with the bound until it learns again.
"""

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from rewardnorm_jax._src.core import base, checks
from rewardnorm_jax._src.observation import ObservationNormState
from rewardnorm_jax._src.reward import CenterRewardState, NormalizeRewardState
from rewardnorm_jax._src.stats import running as rs
from rewardnorm_jax._src.value.categorical import SPACES, Support, uniform_support
from rewardnorm_jax._src.value.popart import PopArtState
from rewardnorm_jax._src.value.transforms import symlog

STATISTICS = ("ret_abs_max", "std")
"""The return statistics a bound may follow."""


class ScaledSupportState(struct.PyTreeNode):
    """State of :func:`scaled_support`: the bound of ``[-b, b]`` and the updates taken."""

    bound: jax.Array  # () shared, or (num_tasks,): one per task
    updates: jax.Array  # int32 (): updates taken (the bound is frozen from ``warmup`` on)

    def check_values(self, name: str) -> None:
        """A bound in ``(0, widest]`` (no update makes another); updates >= 0."""
        bound = np.asarray(self.bound)
        largest = widest(bound.dtype)
        bad = ~((bound > 0) & (bound <= largest))
        checks.refuse_where(f"{name}.bound", bound, bad, f"a bound > 0 and <= {largest:.4g}")
        updates = np.asarray(self.updates)
        checks.refuse_where(f"{name}.updates", updates, updates < 0, "a count of updates >= 0")


@dataclasses.dataclass(frozen=True)
class ScaledSupportConfig(base.Config):
    """The options of :func:`scaled_support`, checked when it is built."""

    name: ClassVar[str] = "scaled_support"
    num_atoms: int = 101
    statistic: str = "ret_abs_max"
    multiple: float = 1.0
    minimum: float = 1.0
    warmup: int | None = None
    num_tasks: int | None = None
    space: str = "value"
    dtype: Any = None

    def __post_init__(self):
        dtype = rs.check_dtype(self.dtype)
        checks.check_count("num_atoms", self.num_atoms, minimum=2)
        checks.check_choice("statistic", self.statistic, STATISTICS)
        checks.check_choice("space", self.space, SPACES)
        if self.warmup is not None:
            checks.check_count("warmup", self.warmup, minimum=1, maximum=2**30)
        minimum = checks.check_positive("minimum", self.minimum, dtype)
        if minimum > widest(dtype):
            raise ValueError(
                f"minimum should be at most {widest(dtype):.4g}, half the largest "
                f"{np.dtype(dtype).name} number (the widest support [-b, b] whose width 2b "
                f"is finite), got minimum={self.minimum!r}."
            )
        options = {
            "multiple": checks.check_positive("multiple", self.multiple, dtype),
            "minimum": minimum,
            "num_tasks": checks.check_num_tasks(self.num_tasks),
            "dtype": dtype,
        }
        for field, value in options.items():
            object.__setattr__(self, field, value)


class ScaledSupport(NamedTuple):
    """A scale-aware support as a named set of pure functions over a :class:`ScaledSupportState`.

    Attributes:
      init: ``init() -> state``: the bound ``minimum``, no update taken.
      update: ``update(state, reward_state) -> state``: the bound raised to
        ``multiple`` times the statistic of a
        :class:`~rewardnorm_jax.NormalizeRewardState`, if it is larger and
        the warm-up is not over.
      support: ``support(state, task=None) -> Support``: the atoms on
        ``[-b, b]``; with ``num_tasks``, one row of atoms per entry of
        ``task``.
      config: the :class:`ScaledSupportConfig`, the metadata for
        :func:`~rewardnorm_jax.save_state` / :func:`~rewardnorm_jax.load_state`.
    """

    init: Callable[[], ScaledSupportState]
    update: Callable[[ScaledSupportState, Any], ScaledSupportState]
    support: Callable[..., Support]
    config: ScaledSupportConfig


def scaled_support(
    num_atoms: int = 101,
    *,
    statistic: str = "ret_abs_max",
    multiple: base.Real = 1.0,
    minimum: base.Real = 1.0,
    warmup: int | None = None,
    num_tasks: int | None = None,
    space: str = "value",
    dtype=None,
) -> ScaledSupport:
    r"""A support on :math:`[-b, b]` whose bound follows the return statistics.

    :math:`b = \max(b, m \cdot s)` at each ``update`` until ``warmup`` updates
    were taken (for ever with ``warmup=None``), :math:`s` the running maximum
    of :math:`|G|` (``statistic="ret_abs_max"``: a
    ``normalize_reward(..., g_max=...)`` state) or the return's standard
    deviation (``"std"``), and :math:`b` at least ``minimum``. A statistic
    that is NaN or infinite leaves the bound as it is; a finite one whose
    multiple overflows the dtype raises the bound to half the dtype's
    largest finite value (the widest support of finite width). ``update``
    and ``support`` refuse a state this ``scaled_support`` did not make
    (another ``num_tasks`` or ``dtype``).

    Args:
      num_atoms: :math:`K`, the atoms of the support (static).
      statistic: ``"ret_abs_max"`` or ``"std"``.
      multiple: :math:`m`, > 0 (a margin over the largest return seen, or a
        number of standard deviations).
      minimum: the bound before any return is seen, and its floor, > 0.
      warmup: the updates after which the bound is frozen; ``None``: never.
      num_tasks: one bound per task, read from the reward statistics of
        ``Statistics(num_tasks=K)``; ``support(state, task)`` takes each
        target's task.
      space: ``"value"`` (atoms uniform in value) or ``"symlog"`` (uniform in
        symlog space, on :math:`[-\operatorname{symlog} b, \operatorname{symlog} b]`).
      dtype: the dtype of the bound and the atoms (default: JAX's float).

    Returns:
      A :class:`ScaledSupport`; its state checkpoints with
      :func:`~rewardnorm_jax.save_state`.

    Example:
      >>> import numpy as np
      >>> import rewardnorm_jax as rn
      >>> rewards = rn.normalize_reward(0.9, g_max=10.0)
      >>> state = rewards.init((2,))
      >>> for r in (30.0, 50.0):
      ...     _, state = rewards.step(state, np.array([r, -r]), False, False)
      >>> scaled = rn.scaled_support(5, multiple=1.5)
      >>> support = scaled.support(scaled.update(scaled.init(), state))
      >>> [round(a, 2) for a in support.atoms.tolist()]  # |G| reached 50 + 0.9 * 30 = 77
      [-115.5, -57.75, 0.0, 57.75, 115.5]
    """
    config = ScaledSupportConfig.checked(
        num_atoms, statistic, multiple, minimum, warmup, num_tasks, space, dtype
    )
    return ScaledSupport(
        init=lambda: init(config),
        update=lambda state, reward_state: update(config, state, reward_state),
        support=lambda state, task=None: support_of(config, state, task),
        config=config,
    )


def init(config: ScaledSupportConfig) -> ScaledSupportState:
    """The bound ``minimum`` (per task with ``num_tasks``), no update taken."""
    shape = () if config.num_tasks is None else (config.num_tasks,)
    return ScaledSupportState(
        bound=jnp.full(shape, config.minimum, config.dtype), updates=jnp.zeros((), jnp.int32)
    )


def update(config: ScaledSupportConfig, state: ScaledSupportState, reward_state):
    """The bound raised to ``multiple`` times the reward statistic, until the warm-up is over."""
    _check_state(config, state)
    scale = jnp.asarray(_statistic(config, reward_state), config.dtype)
    if scale.shape != state.bound.shape:
        raise ValueError(
            f"the reward statistics have shape {scale.shape}, the bound {state.bound.shape}: "
            f"build scaled_support(num_tasks={config.num_tasks}) with a normalize_reward whose "
            "statistics match (shared, or Statistics(num_tasks=K) with the same K; "
            "per-environment statistics, Statistics(per_env=True), give no one bound)."
        )
    # A finite statistic whose multiple overflows saturates at the largest bound whose support
    # has a finite width 2b (leaving the bound as it was would clip larger returns silently; a
    # wider support gives inf spacings, every encoded target wrong).
    largest = widest(config.dtype)
    wanted = jnp.maximum(
        state.bound,
        jnp.where(jnp.isfinite(scale), jnp.minimum(config.multiple * scale, largest), scale),
    )
    learning = jnp.isfinite(wanted)
    if config.warmup is not None:
        learning &= state.updates < config.warmup
    bound = jax.lax.stop_gradient(jnp.where(learning, wanted, state.bound))
    return ScaledSupportState(bound=bound, updates=jnp.minimum(state.updates + 1, 2**30))


def support_of(config: ScaledSupportConfig, state: ScaledSupportState, task=None) -> Support:
    """The atoms on ``[-b, b]``, one row per entry of ``task`` with ``num_tasks``."""
    _check_state(config, state)
    bound = state.bound
    if config.num_tasks is None:
        if task is not None:
            raise ValueError(
                "task is given but this support has one bound (num_tasks=None): build it "
                "with scaled_support(num_tasks=K)."
            )
    else:
        if task is None:
            raise ValueError(f"scaled_support(num_tasks={config.num_tasks}) needs each task.")
        task = checks.check_task(task, jnp.shape(task), config.num_tasks, "target")
        bound = rs.per_key(bound, task)
    if config.space == "symlog":
        bound = symlog(bound)
    return uniform_support(-bound, bound, config.num_atoms, space=config.space, dtype=config.dtype)


def widest(dtype) -> float:
    """The largest bound ``b`` of ``dtype`` whose support ``[-b, b]`` has a finite width."""
    return float(jnp.finfo(dtype).max) / 2


def _check_state(config: ScaledSupportConfig, state) -> None:
    """A ValueError at trace time for a state of another layout (num_tasks, dtype, type)."""
    checks.check_state(state, checks.expected_layout(init, config), (), config)


def _statistic(config: ScaledSupportConfig, reward_state) -> jax.Array:
    """The reward state's running maximum of ``|G|`` or its return's standard deviation."""
    if not isinstance(reward_state, NormalizeRewardState):
        made_by = _OTHER_STATES.get(type(reward_state), "")
        raise TypeError(
            "reward_state should be the state of a normalize_reward transform (a "
            "NormalizeRewardState: statistics of the discounted return), got "
            f"{type(reward_state).__name__}{made_by}."
        )
    if config.statistic == "std":
        return jnp.sqrt(reward_state.stats.var)
    if reward_state.ret_abs_max is None:
        raise ValueError(
            "statistic='ret_abs_max' reads the running maximum of |G|, which a "
            "normalize_reward state keeps only with g_max set: build it with "
            "normalize_reward(..., g_max=G), or use statistic='std'."
        )
    return reward_state.ret_abs_max


# States whose statistics are of something else than the return, and what they describe.
_OTHER_STATES = {
    CenterRewardState: ", center_reward's state: its statistics are of the rewards, not the return",
    PopArtState: ", popart's state: its statistics are of the value targets it normalizes",
    ObservationNormState: (
        ", normalize_observation's state: its statistics are of the observations"
    ),
}
