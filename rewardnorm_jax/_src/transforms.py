"""Stateless reward transforms and their composition.

Each factory returns a :class:`~rewardnorm_jax.RewardTransform` whose state is
:class:`~rewardnorm_jax.EmptyState`, so it composes with the stateful
normalizers through :func:`chain`.
"""

import math
from collections.abc import Callable

import jax
import jax.numpy as jnp

from rewardnorm_jax._src import base


def clip_reward(low: base.Real = -1.0, high: base.Real = 1.0) -> base.RewardTransform:
    r"""Clips rewards to ``[low, high]``: :math:`\tilde r = \min(\max(r, l), h)`.

    Example:
      >>> clip = clip_reward(-1.0, 1.0)
      >>> clip.normalize(clip.init(), jnp.array([-3.0, 0.5, 2.0])).tolist()
      [-1.0, 0.5, 1.0]

    Raises:
      ValueError: if ``low > high`` or either bound is NaN.
    """
    if not (base.is_real(low) and base.is_real(high)):
        raise ValueError(f"low and high should be numbers, got low={low!r}, high={high!r}.")
    if math.isnan(low) or math.isnan(high) or low > high:
        raise ValueError(f"low should not exceed high, got low={low!r} > high={high!r}.")
    low, high = float(low), float(high)
    return base.stateless(
        lambda reward: jnp.clip(reward, low, high),
        base.make_config("clip_reward", low=low, high=high),
    )


def scale_reward(scale: base.Real) -> base.RewardTransform:
    r"""Multiplies rewards by a constant: :math:`\tilde r = c\, r`.

    Example:
      >>> half = scale_reward(0.5)
      >>> float(half.normalize(half.init(), 3.0))
      1.5

    Raises:
      ValueError: if ``scale`` is not a finite number.
    """
    if not (base.is_real(scale) and math.isfinite(scale)):
        raise ValueError(f"scale should be a finite number, got scale={scale!r}.")
    scale = float(scale)

    def fn(reward: jax.Array) -> jax.Array:
        base.check_fits("scale", scale, jnp.result_type(reward.dtype, float))
        return reward * scale

    return base.stateless(fn, base.make_config("scale_reward", scale=scale))


def transform_reward(fn: Callable[[jax.Array], jax.Array]) -> base.RewardTransform:
    r"""Applies any jittable elementwise function: :math:`\tilde r = f(r)`.

    Example:
      >>> square = transform_reward(jnp.square)
      >>> float(square.normalize(square.init(), 3.0))
      9.0

    Raises:
      ValueError: if ``fn`` is not callable.
    """
    if not callable(fn):
        raise ValueError(f"fn should be callable, got {fn!r} of type {type(fn).__name__}.")
    name = getattr(fn, "__qualname__", type(fn).__qualname__)
    return base.stateless(fn, base.make_config("transform_reward", fn=name))


def chain(*transforms: base.RewardTransform) -> base.RewardTransform:
    """Composes transforms in order; the result is itself a transform.

    The reward each transform outputs is the reward the next one sees, in
    ``update`` and ``step`` alike, so ``chain(normalize_reward(), clip_reward(-10, 10))``
    clips after normalizing (SB3's order) while
    ``chain(clip_reward(-1, 1), normalize_reward())`` feeds clipped rewards into
    the statistics. The state is the tuple of the sub-states.

    Task ids: a chain with keyed members (built with ``num_tasks=K``) is keyed
    itself; its ``task=`` reaches each keyed member, and the others never see
    it. Its keyed members must agree on :math:`K`.

    Example:
      >>> t = chain(scale_reward(2.0), clip_reward(-1.0, 1.0))
      >>> float(t.step(t.init(), 0.75)[0])
      1.0
      >>> import rewardnorm_jax as rn
      >>> keyed = chain(rn.normalize_reward(0.99, num_tasks=2), clip_reward(-5.0, 5.0))
      >>> reward, state = keyed.step(keyed.init(3), jnp.ones(3), task=jnp.array([0, 1, 1]))
      >>> rn.count_as_int(state[0].stats).tolist()   # one return in task 0, two in task 1
      [1, 2]

    Raises:
      ValueError: for a member that is no :class:`~rewardnorm_jax.RewardTransform`,
        or keyed members with different numbers of tasks.
    """
    if not all(isinstance(t, base.RewardTransform) for t in transforms):
        raise ValueError("chain takes RewardTransform objects (e.g. clip_reward(-1, 1)).")
    counts = sorted({t.num_tasks for t in transforms if t.num_tasks is not None})
    if len(counts) > 1:
        raise ValueError(
            f"chain members keep statistics for different numbers of tasks (num_tasks="
            f"{counts}); one task id per environment reaches every keyed member, so they "
            "must share one num_tasks."
        )

    def init(batch_shape: base.ShapeLike = ()) -> tuple:
        batch_shape = base.check_batch_shape(batch_shape)
        return tuple(t.init(batch_shape) for t in transforms)

    def _check(state):
        if not (isinstance(state, tuple) and len(state) == len(transforms)):
            raise ValueError(
                f"chain of {len(transforms)} transforms got a state that is not a "
                f"tuple of {len(transforms)} sub-states; create it with chain(...).init()."
            )

    def _member(position, call, *args, **kwargs):
        """``call(*args, **kwargs)``, its ValueError or TypeError prefixed with the position."""
        try:
            return call(*args, **kwargs)
        except ValueError as error:
            raise ValueError(f"chain member {position}: {error}") from error
        except TypeError as error:
            raise TypeError(f"chain member {position}: {error}") from error

    def normalize(state, reward, *, task=None):
        _check(state)
        base.check_reward("reward", reward)
        for position, (transform, sub_state) in enumerate(zip(transforms, state, strict=True)):
            reward = _member(
                position,
                transform.normalize,
                sub_state,
                reward,
                **base.task_keyword(transform, task),
            )
        return reward

    def step(
        state,
        reward,
        terminated=False,
        truncated=False,
        update_stats=True,
        *,
        active=None,
        task=None,
    ):
        _check(state)
        base.check_step_kinds(  # before any member: the inputs, not a member, are at fault
            reward,
            terminated=terminated,
            truncated=truncated,
            update_stats=update_stats,
            active=active,
        )
        new_state = []
        for position, (transform, sub_state) in enumerate(zip(transforms, state, strict=True)):
            reward, sub_state = _member(
                position,
                transform.step,
                sub_state,
                reward,
                terminated,
                truncated,
                update_stats,
                active=active,
                **base.task_keyword(transform, task),
            )
            new_state.append(sub_state)
        return reward, tuple(new_state)

    members = {
        f"{i}/{key}": value for i, t in enumerate(transforms) for key, value in t.config.items()
    }
    config = base.make_config("chain", length=len(transforms), **members)
    return base.transform_from_step(
        init,
        normalize,
        step,
        config,
        num_tasks=counts[0] if counts else None,
        components=max((t.components for t in transforms), default=0),
    )
