"""Stateless reward transforms and their composition.

Each factory returns a :class:`~rewardnorm_jax.RewardTransform` whose state is
:class:`~rewardnorm_jax.EmptyState`, so it composes with the stateful
normalizers through :func:`chain`.
"""

import dataclasses
import math
from collections.abc import Callable
from typing import ClassVar

import jax
import jax.numpy as jnp

from rewardnorm_jax._src.core import base, builder, checks


@dataclasses.dataclass(frozen=True)
class ClipRewardConfig(base.Config):
    """The bounds of :func:`clip_reward`: numbers, ``low <= high``."""

    name: ClassVar[str] = "clip_reward"
    low: float = -1.0
    high: float = 1.0

    def __post_init__(self):
        low, high = self.low, self.high
        if not (checks.is_real(low, "low") and checks.is_real(high, "high")):
            raise ValueError(f"low and high should be numbers, got low={low!r}, high={high!r}.")
        if math.isnan(low) or math.isnan(high) or low > high:
            raise ValueError(f"low should not exceed high, got low={low!r} > high={high!r}.")
        object.__setattr__(self, "low", float(low))
        object.__setattr__(self, "high", float(high))


@dataclasses.dataclass(frozen=True)
class ScaleRewardConfig(base.Config):
    """The factor of :func:`scale_reward`: a finite number."""

    name: ClassVar[str] = "scale_reward"
    scale: float = 1.0

    def __post_init__(self):
        if not (checks.is_real(self.scale, "scale") and math.isfinite(self.scale)):
            raise ValueError(f"scale should be a finite number, got scale={self.scale!r}.")
        object.__setattr__(self, "scale", float(self.scale))


@dataclasses.dataclass(frozen=True)
class TransformRewardConfig(base.Config):
    """The function of :func:`transform_reward`, by its qualified name."""

    name: ClassVar[str] = "transform_reward"
    fn: str = ""


def clip_reward(low: base.Real = -1.0, high: base.Real = 1.0) -> base.RewardTransform:
    r"""Clips rewards to ``[low, high]``: :math:`\tilde r = \min(\max(r, l), h)`.

    Example:
      >>> clip = clip_reward(-1.0, 1.0)
      >>> clip.apply(clip.init(), jnp.array([-3.0, 0.5, 2.0])).tolist()
      [-1.0, 0.5, 1.0]

    Raises:
      ValueError: if ``low > high`` or either bound is NaN.
    """
    config = ClipRewardConfig.checked(low, high)
    return builder.stateless(lambda reward: jnp.clip(reward, config.low, config.high), config)


def scale_reward(scale: base.Real) -> base.RewardTransform:
    r"""Multiplies rewards by a constant: :math:`\tilde r = c\, r`.

    Example:
      >>> half = scale_reward(0.5)
      >>> float(half.apply(half.init(), 3.0))
      1.5

    Raises:
      ValueError: if ``scale`` is not a finite number.
    """
    config = ScaleRewardConfig.checked(scale)

    def fn(reward: jax.Array) -> jax.Array:
        checks.check_fits("scale", config.scale, jnp.result_type(reward.dtype, float))
        return reward * config.scale

    return builder.stateless(fn, config)


def transform_reward(fn: Callable[[jax.Array], jax.Array]) -> base.RewardTransform:
    r"""Applies any jittable elementwise function: :math:`\tilde r = f(r)`.

    Example:
      >>> square = transform_reward(jnp.square)
      >>> float(square.apply(square.init(), 3.0))
      9.0

    Raises:
      ValueError: if ``fn`` is not callable.
    """
    if not callable(fn):
        raise ValueError(f"fn should be callable, got {fn!r} of type {type(fn).__name__}.")
    return builder.stateless(fn, TransformRewardConfig(getattr(fn, "__qualname__", repr(fn))))


def chain(*transforms: base.RewardTransform) -> base.RewardTransform:
    """Composes transforms in order; the result is itself a transform.

    The reward each transform outputs is the reward the next one sees, in
    ``update`` and ``step`` alike, so ``chain(normalize_reward(), clip_reward(-10, 10))``
    clips after normalizing (SB3's order) while
    ``chain(clip_reward(-1, 1), normalize_reward())`` feeds clipped rewards into
    the statistics. The state is the tuple of the sub-states.

    Task ids: a chain with keyed members (built with ``Statistics(num_tasks=K)``) is keyed
    itself; its ``task=`` reaches each keyed member, and the others never see
    it. Its keyed members must agree on :math:`K`.

    Example:
      >>> t = chain(scale_reward(2.0), clip_reward(-1.0, 1.0))
      >>> float(t.step(t.init(), 0.75)[0])
      1.0
      >>> import rewardnorm_jax as rn
      >>> per_task = rn.Statistics(num_tasks=2)
      >>> keyed = chain(rn.normalize_reward(0.99, statistics=per_task), clip_reward(-5.0, 5.0))
      >>> reward, state = keyed.step(keyed.init(3), jnp.ones(3), task=jnp.array([0, 1, 1]))
      >>> rn.count_as_int(state[0].stats).tolist()   # one return in task 0, two in task 1
      [1, 2]

    Raises:
      ValueError: for a member that is no :class:`~rewardnorm_jax.RewardTransform`,
        or keyed members with different numbers of tasks.
    """
    if not all(isinstance(t, base.RewardTransform) for t in transforms):
        raise ValueError("chain takes RewardTransform objects (e.g. clip_reward(-1, 1)).")
    keyed = [t for t in transforms if t.num_tasks is not None]
    counts = sorted({t.num_tasks for t in transforms if t.num_tasks is not None})
    if len(counts) > 1:
        raise ValueError(
            f"chain members keep statistics for different numbers of tasks (num_tasks="
            f"{counts}); one task id per environment reaches every keyed member, so they "
            "must share one num_tasks."
        )

    config = ChainConfig(transforms)
    return builder.make_transform(
        config,
        chain_init,
        chain_apply,
        chain_step,
        num_tasks=counts[0] if counts else None,
        # task ids are one per environment of the keyed members, whose components say
        # which axes are environments; any other member spreads nothing
        components=max((t.components for t in keyed or transforms), default=0),
        per_env=all(t.per_env for t in transforms),
    )


@dataclasses.dataclass(frozen=True)
class ChainConfig(base.Config):
    """A chain's members, in order."""

    name: ClassVar[str] = "chain"
    members: tuple[base.RewardTransform, ...] = ()

    def __str__(self) -> str:
        return f"chain({', '.join(str(member.config) for member in self.members)})"

    def metadata(self) -> dict:
        """``{"transform": "chain", "length": n}`` and each member's, prefixed ``"i/"``."""
        found: dict = {"transform": self.name, "length": len(self.members)}
        for position, member in enumerate(self.members):
            found.update({f"{position}/{k}": v for k, v in member.config.metadata().items()})
        return found


def chain_init(config: ChainConfig, batch_shape: base.Shape) -> tuple:
    """The tuple of the members' initial states."""
    return tuple(member.init(batch_shape) for member in config.members)


def _member(position: int, call: Callable, *args):
    """``call(*args)``, its ValueError or TypeError prefixed with the member's position."""
    try:
        return call(*args)
    except ValueError as error:
        raise ValueError(f"chain member {position}: {error}") from error
    except TypeError as error:
        raise TypeError(f"chain member {position}: {error}") from error


def _unchecked(member: base.RewardTransform) -> base.Unchecked:
    """A member's functions on checked inputs; for a transform written by hand, its own."""
    if member.unchecked is not None:
        return member.unchecked

    def apply(state, reward, task):
        return member.apply(state, reward, **base.task_keyword(member, task))

    def step(state, inputs: base.StepInputs):
        reward, terminated, truncated, update_stats, active, task = inputs
        return member.step(
            state,
            reward,
            terminated,
            truncated,
            update_stats,
            active=active,
            **base.task_keyword(member, task),
        )

    return base.Unchecked(apply, step)


def chain_apply(config: ChainConfig, state: tuple, reward, task):
    """Each member's ``apply`` in turn, on the reward the one before it gave."""
    for position, (member, sub_state) in enumerate(zip(config.members, state, strict=True)):
        member_task = task if member.num_tasks is not None else None
        reward = _member(position, _unchecked(member).apply, sub_state, reward, member_task)
    return reward


def chain_step(config: ChainConfig, state: tuple, inputs: base.StepInputs):
    """Each member's ``step`` in turn, on the reward the one before it gave."""
    new_state = []
    for position, (member, sub_state) in enumerate(zip(config.members, state, strict=True)):
        member_task = inputs.task if member.num_tasks is not None else None
        member_inputs = inputs._replace(task=member_task)
        reward, sub_state = _member(position, _unchecked(member).step, sub_state, member_inputs)
        inputs = inputs._replace(reward=reward)
        new_state.append(sub_state)
    return inputs.reward, tuple(new_state)
