"""Fail-fast checks of the reward stream, raised from compiled code via checkify."""

import dataclasses
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
from flax import struct
from jax.experimental import checkify

from rewardnorm_jax._src.core import base, builder, checks
from rewardnorm_jax._src.stats import running as rs


class CheckFiniteRewardState(struct.PyTreeNode):
    """State of :func:`check_finite_reward`."""

    step: jax.Array  # uint32 scalar, number of steps taken (modulo 2^32)


@dataclasses.dataclass(frozen=True)
class CheckFiniteRewardConfig(base.Config):
    """The option of :func:`check_finite_reward`, checked when it is built."""

    name: ClassVar[str] = "check_finite_reward"
    axis_name: Any = dataclasses.field(default=None, metadata={"checkpoint": False})

    def __post_init__(self):
        object.__setattr__(self, "axis_name", rs.check_axis_name(self.axis_name))


def init(config: CheckFiniteRewardConfig, batch_shape: base.Shape) -> CheckFiniteRewardState:
    """No step taken."""
    return CheckFiniteRewardState(step=jnp.zeros((), jnp.uint32))


def check(config: CheckFiniteRewardConfig, step, reward, active) -> jax.Array:
    """``reward``, after a ``checkify`` check that every active one is finite."""
    reward = jnp.asarray(reward)
    if reward.size == 0:  # an empty batch has nothing to check
        return reward
    bad = ~jnp.isfinite(reward)
    if active is not None:
        bad = bad & checks.as_flag(active, reward.shape, "active")
    first = jnp.unravel_index(jnp.argmax(bad), reward.shape)
    where: dict[str, Any] = {}  # format arguments of checkify.check
    text = ""
    if config.axis_name is not None:  # with an unbatched reward, the participant is the env
        rs.participants(config.axis_name)  # an unbound axis_name is named, not a NameError
        where["participant"] = jax.lax.axis_index(config.axis_name)
        text += ", {} {{participant}}".format("environment" if reward.ndim == 0 else "participant")
    if reward.ndim > 0:
        where["env"] = jnp.stack(first) if reward.ndim > 1 else first[0]
        text += ", environment {env}"
    checkify.check(
        ~jnp.any(bad),
        "non-finite reward {reward} at step {step}" + text + " ({count} non-finite in this step)",
        reward=reward[first],
        step=step,
        count=jnp.sum(bad),
        **where,
    )
    return reward


def apply(config: CheckFiniteRewardConfig, state: CheckFiniteRewardState, reward, task):
    """The rewards, checked at the current step."""
    return check(config, state.step, reward, None)


def step(config: CheckFiniteRewardConfig, state: CheckFiniteRewardState, inputs):
    """The rewards, checked; one more step counted."""
    reward = check(config, state.step, inputs.reward, inputs.active)
    return reward, CheckFiniteRewardState(step=state.step + jnp.uint32(1))


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
    ``apply`` checks too, at the current step.

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
    config = CheckFiniteRewardConfig(axis_name)
    return builder.make_transform(config, init, apply, step, per_env=True)
