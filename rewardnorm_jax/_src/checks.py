"""Fail-fast checks of the reward stream, raised from compiled code via checkify."""

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct
from jax.experimental import checkify

from rewardnorm_jax._src import base
from rewardnorm_jax._src import running_stats as rs


class CheckFiniteRewardState(struct.PyTreeNode):
    """State of :func:`check_finite_reward`."""

    step: jax.Array  # uint32 scalar, number of steps taken (modulo 2^32)


def check_finite_reward(*, axis_name=None) -> base.RewardTransform:
    r"""Raises on a NaN or infinite reward, naming the step and the environment.

    By default the normalizers drop non-finite rewards from the return and the
    statistics and pass them through (see :func:`rewardnorm_jax.normalize_reward`).
    This transform is the opt-in alternative for users who prefer to fail
    fast: put it first in a :func:`~rewardnorm_jax.chain`, and every ``step``
    or ``update`` checks, through :func:`jax.experimental.checkify.check`,

    .. math::
      \forall i:\ \neg\,\mathrm{active}_i \;\lor\; r_i \in \mathbb{R}

    The error names the step (the number of ``step`` / ``update`` calls
    before this one), the index of the first offending environment in the
    batch (an array of indices for multi-dimensional batches; none for a
    single unbatched environment), its reward, and
    how many rewards of the step are non-finite. With ``axis_name`` (the
    mapped axis, or tuple of axes, that the environments are split over, as
    given to :func:`~rewardnorm_jax.normalize_reward`) the error also names
    the participant, ``jax.lax.axis_index(axis_name)``: under a per-environment
    ``jax.vmap`` that is the environment's index. Inactive environments
    (``active=False``) are not checked. Rewards pass through unchanged;
    ``normalize`` checks too, at the current step.

    Outside ``jit`` the check raises at once. Code that stages it (``jax.jit``,
    ``lax.scan``, ``jax.vmap``) must be wrapped in
    :func:`jax.experimental.checkify.checkify`, which returns the error next to
    the outputs: call ``err.throw()`` (or read ``err.get()``). Without that
    wrapper JAX refuses to trace the check, so it can never be silently off.

    Args:
      axis_name: optional mapped axis name(s) to name the participant by.

    Returns:
      A :class:`~rewardnorm_jax.RewardTransform` whose state is
      :class:`CheckFiniteRewardState`.

    Example:
      >>> from jax.experimental import checkify
      >>> import rewardnorm_jax as rn
      >>> t = rn.chain(check_finite_reward(), rn.normalize_reward())
      >>> step = jax.jit(checkify.checkify(t.step))
      >>> err, (reward, state) = step(t.init((3,)), jnp.array([1.0, 2.0, 3.0]))
      >>> err, (reward, state) = step(state, jnp.array([1.0, jnp.inf, jnp.nan]))
      >>> print(err.get())
      non-finite reward inf at step 1, environment 1 (2 non-finite in this step) (`check` failed)
    """
    axis_name = rs.check_axis_name(axis_name)

    def init(batch_shape: base.ShapeLike = ()) -> CheckFiniteRewardState:
        base.check_batch_shape(batch_shape)
        return CheckFiniteRewardState(step=jnp.zeros((), jnp.uint32))

    def check(step, reward, active) -> jax.Array:
        reward = jnp.asarray(base.check_reward("reward", reward))
        base.check_step_inputs(reward.shape, reward, active=active)
        if reward.size == 0:  # an empty batch has nothing to check
            return reward
        bad = ~jnp.isfinite(reward)
        if active is not None:
            bad = bad & base.as_flag(active, reward.shape, "active")
        first = jnp.unravel_index(jnp.argmax(bad), reward.shape)
        where: dict[str, Any] = {}  # format arguments of checkify.check
        text = ""
        if axis_name is not None:  # with an unbatched reward, the participant is the environment
            rs.participants(axis_name)  # an unbound axis_name is named, not JAX's NameError
            where["participant"] = jax.lax.axis_index(axis_name)
            text += ", {} {{participant}}".format(
                "environment" if reward.ndim == 0 else "participant"
            )
        if reward.ndim > 0:
            where["env"] = jnp.stack(first) if reward.ndim > 1 else first[0]
            text += ", environment {env}"
        checkify.check(
            ~jnp.any(bad),
            "non-finite reward {reward} at step {step}"
            + text
            + " ({count} non-finite in this step)",
            reward=reward[first],
            step=step,
            count=jnp.sum(bad),
            **where,
        )
        return reward

    def normalize(state: CheckFiniteRewardState, reward) -> jax.Array:
        base.check_state(state, init, (), config)
        return check(state.step, reward, None)

    def step(state, reward, terminated=False, truncated=False, update_stats=True, *, active=None):
        base.check_state(state, init, (), config)
        base.check_step_kinds(
            reward, terminated=terminated, truncated=truncated, update_stats=update_stats
        )
        reward = check(state.step, reward, active)
        return reward, CheckFiniteRewardState(step=state.step + jnp.uint32(1))

    config = base.make_config("check_finite_reward")
    return base.transform_from_step(init, normalize, step, config)
