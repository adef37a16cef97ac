r"""Reward normalization by the running standard deviation of the discounted return.

One recurrence, parameterised by :class:`~rewardnorm_jax.Semantics`, reproduces
Gymnasium's ``NormalizeReward``, Stable-Baselines3's ``VecNormalize`` (reward
part) and PureJaxRL's ``NormalizeVecReward``. :func:`return_step` runs it for
every transform driven by the discounted return (the percentile scaler too).
"""

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from rewardnorm_jax._src.core import base, builder, checks
from rewardnorm_jax._src.core import semantics as sem_lib
from rewardnorm_jax._src.stats import formulas
from rewardnorm_jax._src.stats import running as rs
from rewardnorm_jax._src.stats.placement import SHARED, Statistics


class NormalizeRewardState(struct.PyTreeNode):
    """State of :func:`normalize_reward`."""

    # statistics of the discounted return, of the shape Statistics.shape gives
    stats: rs.RunningStats
    ret: jax.Array = base.per_env_field()  # batch_shape, the tracked discounted return G
    ret_abs_max: jax.Array | None = None  # stats shape, running max |G| (g_max only)

    def check_values(self, name: str) -> None:
        """A return that is not NaN; a running maximum of ``|G|`` in ``[0, +inf]``."""
        checks.check_return(self.ret, f"{name}.ret")
        if self.ret_abs_max is not None:
            values = np.asarray(self.ret_abs_max)
            checks.refuse_where(
                f"{name}.ret_abs_max",
                values,
                ~(values >= 0),
                "a running maximum of |G| >= 0 (+inf once a return overflowed), never NaN",
            )


@dataclasses.dataclass(frozen=True)
class NormalizeRewardConfig(base.Config):
    """The options of :func:`normalize_reward`, checked when it is built."""

    name: ClassVar[str] = "normalize_reward"
    gamma: float = 0.99
    epsilon: float = 1e-8
    semantics: sem_lib.Semantics = sem_lib.GYMNASIUM
    statistics: Statistics = SHARED
    dtype: Any = None
    axis_name: Any = dataclasses.field(default=None, metadata={"checkpoint": False})
    g_max: float | None = None
    finite_rewards: bool = False

    def __post_init__(self):
        dtype = rs.check_dtype(self.dtype)
        semantics = sem_lib.resolve(self.semantics)
        if not isinstance(self.statistics, Statistics):
            raise TypeError(
                f"statistics should be a rewardnorm_jax.Statistics (e.g. "
                f"rn.Statistics(num_tasks=4)), got statistics={self.statistics!r}."
            )
        if semantics.clip is not None:  # a clip that rounds to 0 or inf in dtype
            checks.check_positive("clip", semantics.clip, dtype, allow_inf=True)
        rs.check_decay(self.statistics.decay, dtype)
        options = {
            "gamma": checks.check_gamma(self.gamma),
            # epsilon = 0 (or one that rounds to 0 in dtype) divides by zero on constant returns.
            "epsilon": checks.check_positive("epsilon", self.epsilon, dtype),
            "semantics": semantics,
            "dtype": dtype,
            "axis_name": rs.check_axis_name(self.axis_name),
            # g_max <= 0 divides by zero or flips the sign of the floor.
            "g_max": None
            if self.g_max is None
            else checks.check_positive("g_max", self.g_max, dtype),
            "finite_rewards": checks.check_bool("finite_rewards", self.finite_rewards),
        }
        for field, value in options.items():
            object.__setattr__(self, field, value)


def return_step(
    ret: jax.Array,
    stats: base.PyTree,
    inputs: base.StepInputs,
    *,
    gamma: float,
    semantics: sem_lib.Semantics,
    dtype: np.dtype,
    learn_returns: Callable,
    finite_rewards: bool = False,
) -> tuple[jax.Array, jax.Array, base.PyTree]:
    """One environment step of a transform driven by the discounted return.

    Casts the checked inputs and runs the library's one recurrence,
    :func:`~rewardnorm_jax._src.stats.formulas.return_step` (the Gymnasium
    adapters run it on the host): it advances the return, lets
    ``learn_returns(stats, ret, mask)`` fold the valid returns into the
    transform's statistics, then applies the freeze rule and the post-update
    reset of ``semantics``.

    ``update_stats`` false leaves this call's samples out of ``learn_returns``,
    so the statistics stay unchanged (a merge of no sample is the identity, bit
    for bit). Under ``axis_name`` each participant's flag masks its own
    samples: participants that freeze contribute nothing, the others merge as
    usual, and every participant still ends with identical statistics.

    Static flags stay Python booleans, so the compiled step carries only the
    masks it needs: with ``finite_rewards`` (the caller's promise that every
    reward is finite), no ``active`` and ``update_stats=True``,
    ``learn_returns`` receives the mask ``True``.

    Returns:
      ``(reward, ret, stats)``: the reward cast to ``dtype``, the return to
      carry, and the statistics.
    """
    shape = ret.shape
    terminated = checks.as_flag(inputs.terminated, shape, "terminated")
    truncated = checks.as_flag(inputs.truncated, shape, "truncated")
    active = inputs.active
    if active is not None:
        active = checks.as_flag(active, shape, "active")
    update_stats = inputs.update_stats
    if not isinstance(update_stats, bool):
        update_stats = jnp.asarray(update_stats, bool)
    reward = jnp.asarray(inputs.reward, dtype)
    valid = True if finite_rewards else jnp.isfinite(reward)
    if active is not None:
        valid = active & valid
    new_ret, stats = formulas.return_step(
        jnp,
        ret,
        stats,
        reward,
        terminated,
        truncated,
        update_stats,
        valid,
        active,
        gamma=gamma,
        semantics=semantics,
        learn_returns=learn_returns,
    )
    return reward, new_ret, stats


def init(config: NormalizeRewardConfig, batch_shape: base.Shape) -> NormalizeRewardState:
    """The prior statistics (:func:`~rewardnorm_jax.init_stats`) and zero returns."""
    stats_shape = config.statistics.shape(batch_shape)
    return NormalizeRewardState(
        stats=rs.init_stats(stats_shape, config.dtype, decay=config.statistics.decay),
        ret=jnp.zeros(batch_shape, config.dtype),
        ret_abs_max=None if config.g_max is None else jnp.zeros(stats_shape, config.dtype),
    )


def inverse_std(config: NormalizeRewardConfig, running, ret_abs_max) -> jax.Array:
    r""":math:`1 / \max(\sqrt{\sigma^2 + \epsilon}, M / g_{max})`, as one square root."""
    var = running.var
    if config.g_max is not None:
        floor = ret_abs_max / config.g_max
        var = jnp.maximum(var, floor * floor - config.epsilon)
    return jax.lax.rsqrt(var + config.epsilon)


def scale(config: NormalizeRewardConfig, reward, inverse) -> jax.Array:
    """The rewards times ``inverse``, clipped; non-finite ones passed through."""
    passthrough = False if config.finite_rewards else ~jnp.isfinite(reward)
    return formulas.clip_scaled(jnp, reward * inverse, reward, config.semantics.clip, passthrough)


def apply(config: NormalizeRewardConfig, state: NormalizeRewardState, reward, task) -> jax.Array:
    """The rewards divided by the current scale of their statistics."""
    task = config.statistics.env_task(task, state.ret.shape)
    reward = jnp.asarray(reward, config.dtype)
    inverse = inverse_std(config, state.stats, state.ret_abs_max)
    return scale(config, reward, rs.per_key(inverse, task))


def learn_returns(config: NormalizeRewardConfig, task, stats, ret, mask):
    """``stats`` (running statistics, max of ``|G|``) with the returns ``ret`` learnt."""
    running, ret_abs_max = stats
    axis_name = config.axis_name
    mask = None if mask is True else jnp.broadcast_to(mask, ret.shape)
    if task is not None:
        if config.g_max is not None:
            ret_abs_max = keyed_max(ret_abs_max, jnp.abs(ret), mask, task, axis_name)
        return rs.merge_keyed(running, ret, mask, task, axis_name=axis_name), ret_abs_max
    if config.g_max is not None:
        ret_abs_max = running_max(ret_abs_max, jnp.abs(ret), mask, axis_name)
    # unselected_alike: a skipped step's return is a return too
    running = rs.merge_checked(running, ret, mask, axis_name=axis_name, unselected_alike=True)
    return running, ret_abs_max


def step(config: NormalizeRewardConfig, state: NormalizeRewardState, inputs: base.StepInputs):
    """Advance the returns, learn them, then divide the rewards by the new scale."""
    task = config.statistics.env_task(inputs.task, state.ret.shape)
    rs.participants(config.axis_name)  # an unbound axis_name is named before any collective
    reward, ret, (stats, ret_abs_max) = return_step(
        state.ret,
        (state.stats, state.ret_abs_max),
        inputs,
        gamma=config.gamma,
        semantics=config.semantics,
        dtype=config.dtype,
        learn_returns=functools.partial(learn_returns, config, task),
        finite_rewards=config.finite_rewards,
    )
    new_state = state.replace(stats=stats, ret=ret, ret_abs_max=ret_abs_max)
    inverse = rs.per_key(inverse_std(config, stats, ret_abs_max), task)
    return scale(config, reward, inverse), new_state


def normalize_reward(
    gamma: base.Real = 0.99,
    epsilon: base.Real = 1e-8,
    *,
    semantics: "str | sem_lib.Semantics" = "gymnasium",
    statistics: Statistics = SHARED,
    dtype=None,
    axis_name=None,
    g_max=None,
    finite_rewards: bool | np.bool_ = False,
) -> base.RewardTransform:
    r"""Scales rewards by the running standard deviation of the discounted return.

    Each step, every environment's return :math:`G` is multiplied by
    ``gamma`` and gains the reward, the valid returns join the running
    statistics (one set shared by the batch), and the reward is divided by
    the square root of the post-update variance plus ``epsilon``, then
    clipped; no mean is subtracted (Engstrom et al.'s reward scaling).
    :doc:`/semantics` writes the recurrence out. Which episode end restarts
    :math:`G` before the reward is added (:math:`d^{before}`) or after the
    statistics learn (:math:`d^{after}`), the clip and the meaning of a
    freeze come from ``semantics``:

    ============  ================  ================  ====  ================
    semantics     d before          d after           clip  freeze stops G
    ============  ================  ================  ====  ================
    gymnasium     terminated        never             none  no
    sb3           never             term. or trunc.   10    yes
    purejaxrl     term. or trunc.   never             none  no
    non_episodic  never             never             none  no
    ============  ================  ================  ====  ================

    ``non_episodic`` is a return that never resets (intrinsic rewards, as
    RND's): the flags are still checked, and never used. Another clip is a
    ``dataclasses.replace(rn.Semantics.preset("sb3"), clip=5.0)`` or a
    chained :func:`~rewardnorm_jax.clip_reward`.

    Defaults follow Gymnasium's ``NormalizeReward`` (1.4.0). The discounted
    return is never reset by ``init`` after the fact: keep the state across
    episodes, as the references do.

    Non-finite rewards: a NaN or inf reward is dropped from the return (the
    step is skipped: no discount, no accumulation; an episode boundary on that
    step still resets the return) and from the statistics, and it is passed
    through unchanged in the output so the caller sees it. The statistics are
    never poisoned. To fail fast instead, put
    :func:`~rewardnorm_jax.check_finite_reward` first in a
    :func:`~rewardnorm_jax.chain`: it raises inside ``jit`` (through
    ``checkify``) with the step and the environment index.

    Dtypes and range: rewards of any real dtype (float16, bfloat16, float32,
    float64, integers, bool) are cast to ``dtype``, the statistics dtype
    (float32, or float64 under x64; never lower), and the normalized reward
    has that dtype: float16 rewards come out float32. Float32 statistics hold
    returns up to about :math:`10^{19}` in magnitude; past that the variance
    saturates at ``+inf`` and rewards normalize to 0, never NaN (use
    ``dtype=jnp.float64`` under x64 for such scales). Constant rewards (zero
    variance): the running variance decays towards 0 as the prior's share
    :math:`10^{-4} (1 + c^2) / n`, is never negative, and :math:`\epsilon`
    bounds the divisor, so :math:`|\tilde r| \le |r| / \sqrt{\epsilon}` stays
    finite.

    Options beyond the references:

    * ``statistics``: where the statistics live and how they weigh the past
      (:class:`~rewardnorm_jax.Statistics`): shared by the batch (default, as
      the references), per environment, per component (several objectives,
      or agents stacked along an axis), per task (multi-task and open-ended
      training), and cumulative or exponential moving (``decay``, for reward
      scales that drift; the division by the discounted weight is the bias
      correction, so early steps are not biased towards the prior). Flags
      may be given per environment (a leading part of the rewards' shape)
      or per reward.
    * ``g_max``: a floor on the divisor from the running maximum of
      :math:`|G|` (SimbaV2, FastTD3), so the normalized return stays within
      about :math:`\pm g_{max}` when the variance is small against the largest
      returns seen:

      .. math::
        M \leftarrow \max\big(M, \max_i |G_i|\big), \qquad
        \tilde r_i = \frac{r_i}{\max\big(\sqrt{\sigma^2 + \epsilon},\; M / g_{max}\big)}

    Args:
      gamma: discount factor in [0, 1].
      epsilon: added to the variance before the square root, > 0.
      semantics: ``"gymnasium"`` (default), ``"sb3"``, ``"purejaxrl"``,
        ``"gymnasium_same_step"`` (Gymnasium's vector wrapper under SAME_STEP
        autoreset), ``"non_episodic"``, or a :class:`~rewardnorm_jax.Semantics`
        instance; it also carries the clip of the normalized reward.
      statistics: a :class:`~rewardnorm_jax.Statistics`; default one set
        shared by the batch, cumulative.
      dtype: statistics and return dtype, float32 or float64; default float64
        under x64, float32 otherwise.
      axis_name: mapped axis name(s) to share the statistics across
        (``vmap``/``pmap``/``shard_map``); see :func:`rewardnorm_jax.merge_stats`.
      g_max: ``None``, or the bound :math:`g_{max} > 0` on the normalized
        return that sets the floor :math:`M / g_{max}` of the divisor
        (SimbaV2 and FastTD3 use 10).
      finite_rewards: the caller's promise that every reward is finite. The
        compiled step then skips the NaN/inf handling (a non-finite reward
        would poison the statistics); with no ``active`` mask either, it
        selects no entries at all, the cheapest step.

    Returns:
      A :class:`~rewardnorm_jax.RewardTransform`. The output reward has the
      statistics dtype (float32 or float64), whatever the rewards' dtype.

    Raises:
      ValueError: for gamma outside [0, 1], epsilon <= 0, an unknown
        semantics, a decay that rounds to 1 in ``dtype`` or a non-positive g_max;
        from ``step`` and ``update``, under an ``axis_name`` that no enclosing
        map binds.
      TypeError: for ``finite_rewards`` that is not a bool, ``statistics``
        that is no :class:`~rewardnorm_jax.Statistics`, or an
        ``axis_name`` that is no name (an integer); from the transform's
        functions, for rewards that are not real numbers or flags that are
        not numbers (see :class:`~rewardnorm_jax.RewardTransform`).

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
      PureJaxRL ``purejaxrl/wrappers.py``;
      Lee et al., `Hyperspherical Normalization for Scalable Deep
      Reinforcement Learning <https://arxiv.org/abs/2502.15280>`_, 2025
      (SimbaV2, ``g_max``).
    """
    config = NormalizeRewardConfig.checked(
        gamma, epsilon, semantics, statistics, dtype, axis_name, g_max, finite_rewards
    )
    return builder.make_transform(config, init, apply, step, **config.statistics.transform_fields())


def running_max(old, values, mask, axis_name=None) -> jax.Array:
    """``max(old, max of the masked values)``, reducing leading axes to ``old``'s shape."""
    num_batch_axes = values.ndim - old.ndim
    batch_max = jnp.max(
        values, axis=tuple(range(num_batch_axes)), where=mask, initial=-jnp.inf
    )  # -inf for an empty batch
    if axis_name is not None:
        batch_max = jax.lax.pmax(batch_max, axis_name)
    return jnp.maximum(old, batch_max)


def keyed_max(old, values, mask, task, axis_name=None) -> jax.Array:
    """``max(old, max of the masked values)`` per task: ``old`` ``(K, *S)``, values ``(*E, *S)``."""
    num_tasks, stats_shape = old.shape[0], old.shape[1:]
    entries = task.size
    values = values.reshape(entries, *stats_shape)
    if mask is not None:
        values = jnp.where(mask.reshape(values.shape), values, -jnp.inf)
    task = task.reshape(entries)
    task = jnp.where((task >= 0) & (task < num_tasks), task, num_tasks)  # dropped by segment_max
    batch_max = jax.ops.segment_max(values, task, num_tasks)
    if axis_name is not None:
        batch_max = jax.lax.pmax(batch_max, axis_name)
    return jnp.maximum(old, batch_max)
