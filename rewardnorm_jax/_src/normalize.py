r"""Reward normalization by the running standard deviation of the discounted return.

One recurrence, parameterised by :class:`~rewardnorm_jax.Semantics`, reproduces
Gymnasium's ``NormalizeReward``, Stable-Baselines3's ``VecNormalize`` (reward
part) and PureJaxRL's ``NormalizeVecReward``.
"""

import math

import jax
import jax.numpy as jnp
from flax import struct

from rewardnorm_jax._src import base, formulas
from rewardnorm_jax._src import running_stats as rs
from rewardnorm_jax._src import semantics as sem_lib

_SEMANTICS_DEFAULT = object()


@struct.dataclass
class NormalizeRewardState:
    """State of :func:`normalize_reward`."""

    stats: rs.RunningStats  # shared statistics of the discounted return
    ret: jax.Array  # batch_shape, the tracked discounted return G


def check_gamma_epsilon(gamma, epsilon) -> tuple[float, float]:
    """Validates the hyperparameters; returns them as floats."""
    # gamma > 1 makes the return diverge, gamma < 0 flips its sign every step.
    if not (isinstance(gamma, (int, float)) and 0.0 <= gamma <= 1.0):
        raise ValueError(f"gamma should be in the interval [0, 1], got gamma={gamma!r}.")
    # epsilon = 0 divides by zero while the variance is 0 (constant returns).
    if not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon should be strictly positive, got epsilon={epsilon!r}.")
    return float(gamma), float(epsilon)


def check_clip(clip) -> float | None:
    if clip is None:
        return None
    if not (isinstance(clip, (int, float)) and clip > 0):
        raise ValueError(f"clip should be a positive number or None, got clip={clip!r}.")
    return float(clip)


def normalize_reward(
    gamma: float = 0.99,
    epsilon: float = 1e-8,
    *,
    semantics: "str | sem_lib.Semantics" = "gymnasium",
    clip=_SEMANTICS_DEFAULT,
    dtype=None,
    axis_name=None,
) -> base.RewardTransform:
    r"""Scales rewards by the running standard deviation of the discounted return.

    Each step, for every environment :math:`i` of the batch:

    .. math::
      G_i &\leftarrow \gamma\, G_i\, (1 - d^{before}_i) + r_i \\
      (\mu, \sigma^2, n) &\leftarrow \operatorname{merge}\big((\mu, \sigma^2, n),
          \{G_i : i \text{ valid}\}\big) \\
      G_i &\leftarrow G_i\, (1 - d^{after}_i) \\
      \tilde r_i &= \operatorname{clip}\big(r_i / \sqrt{\sigma^2 + \epsilon}\big)

    with one set of statistics shared by the batch, the post-update variance,
    and no mean subtracted (Engstrom et al.'s reward scaling). Which flag is
    :math:`d^{before}` / :math:`d^{after}`, the clip and the meaning of a
    freeze come from ``semantics``:

    ============  ==============  ================  ====  ================
    semantics     d before        d after           clip  freeze stops G
    ============  ==============  ================  ====  ================
    gymnasium     terminated      never             none  no
    sb3           never           term. or trunc.   10    yes
    purejaxrl     term. or trunc. never             none  no
    ============  ==============  ================  ====  ================

    Defaults follow Gymnasium's ``NormalizeReward`` (1.4.0). The discounted
    return is never reset by ``init`` after the fact: keep the state across
    episodes, as the references do.

    Non-finite rewards: a NaN or inf reward is dropped from the return (the
    step is skipped: no discount, no accumulation; an episode boundary on that
    step still resets the return) and from the statistics, and it is passed
    through unchanged in the output so the caller sees it. The statistics are
    never poisoned.

    Args:
      gamma: discount factor in [0, 1].
      epsilon: added to the variance before the square root, > 0.
      semantics: ``"gymnasium"`` (default), ``"sb3"``, ``"purejaxrl"``,
        ``"gymnasium_same_step"`` (Gymnasium's vector wrapper under SAME_STEP
        autoreset), or a :class:`~rewardnorm_jax.Semantics` instance.
      clip: symmetric bound of the normalized reward; defaults to the
        semantics' own (10 for sb3, none otherwise); ``None`` disables it.
      dtype: statistics and return dtype, float32 or float64; default float64
        under x64, float32 otherwise.
      axis_name: mapped axis name(s) to share the statistics across
        (``vmap``/``pmap``/``shard_map``); see :func:`rewardnorm_jax.update_stats`.

    Returns:
      A :class:`~rewardnorm_jax.RewardTransform`. The output reward has the
      statistics dtype.

    Raises:
      ValueError: for gamma outside [0, 1], epsilon <= 0, a non-positive clip
        or an unknown semantics.

    Example:
      >>> norm = normalize_reward(gamma=0.99)
      >>> state = norm.init()
      >>> reward, state = norm.step(state, 1.0, terminated=False, truncated=False)
      >>> round(float(reward), 1)   # the first reward is large: var is tiny
      70.7

    References:
      Engstrom et al., `Implementation Matters in Deep Policy Gradients
      <https://arxiv.org/abs/2005.12729>`_, 2020.
      Gymnasium ``gymnasium/wrappers/stateful_reward.py``;
      Stable-Baselines3 ``stable_baselines3/common/vec_env/vec_normalize.py``;
      PureJaxRL ``purejaxrl/wrappers.py``.
    """
    gamma, epsilon = check_gamma_epsilon(gamma, epsilon)
    semantics = sem_lib.resolve(semantics)
    clip = check_clip(semantics.clip if clip is _SEMANTICS_DEFAULT else clip)
    dtype = rs.check_dtype(dtype)

    def init(batch_shape: base.Shape = ()) -> NormalizeRewardState:
        return NormalizeRewardState(
            stats=rs.init_stats((), dtype), ret=jnp.zeros(batch_shape, dtype)
        )

    def normalize(state: NormalizeRewardState, reward) -> jax.Array:
        reward = jnp.asarray(reward, dtype)
        return formulas.scale_by_std(
            jnp, reward, state.stats.var, epsilon, clip, ~jnp.isfinite(reward)
        )

    def step(state, reward, terminated=False, truncated=False, update_stats=True, *, active=None):
        shape = state.ret.shape
        base.check_step_shapes(
            shape, reward, terminated=terminated, truncated=truncated, active=active
        )
        terminated = base.as_flag(terminated, shape)
        truncated = base.as_flag(truncated, shape)
        active = base.as_flag(True if active is None else active, shape)
        reward = jnp.asarray(reward, dtype)
        valid = active & jnp.isfinite(reward)

        ret = formulas.discounted_return(
            jnp, state.ret, reward, gamma,
            semantics.flag("reset_before", terminated, truncated), valid, active,
        )
        stats = rs.select(
            update_stats, rs.update(state.stats, ret, valid, axis_name=axis_name), state.stats
        )
        ret = jnp.where(semantics.flag("reset_after", terminated, truncated), 0.0, ret)
        if semantics.freeze_stops_return:
            ret = jnp.where(update_stats, ret, state.ret)
        new_state = NormalizeRewardState(stats=stats, ret=ret)
        return normalize(new_state, reward), new_state

    def update(state, reward, terminated=False, truncated=False, *, active=None):
        return step(state, reward, terminated, truncated, active=active)[1]

    return base.RewardTransform(init, update, normalize, step)
