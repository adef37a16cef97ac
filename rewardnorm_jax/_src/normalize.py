r"""Reward normalization by the running standard deviation of the discounted return.

One recurrence, parameterised by :class:`~rewardnorm_jax.Semantics`, reproduces
Gymnasium's ``NormalizeReward``, Stable-Baselines3's ``VecNormalize`` (reward
part) and PureJaxRL's ``NormalizeVecReward``.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from rewardnorm_jax._src import base, formulas
from rewardnorm_jax._src import running_stats as rs
from rewardnorm_jax._src import semantics as sem_lib

SEMANTICS_CLIP = object()  # ``clip`` left out: the semantics' own bound


class NormalizeRewardState(struct.PyTreeNode):
    """State of :func:`normalize_reward`."""

    # statistics of the discounted return: () shared, else batch_shape; with
    # components, their shape; with num_tasks, a leading axis of one set per task
    stats: rs.RunningStats
    ret: jax.Array  # batch_shape, the tracked discounted return G
    ret_abs_max: jax.Array | None = None  # stats shape, running max |G| (g_max only)


# Which hyperparameters shape which part of the state, for mismatch messages.
STATE_HINTS = {
    "": "shared,dtype",
    "ret": "dtype",
    "stats/decay": "decay",
    "stats/moments": "decay,shared,components,num_tasks,dtype",
    "ret_abs_max": "g_max,shared,components,num_tasks",
    "stats/count_words": "shared,components,num_tasks",
}


def check_gamma(gamma) -> float:
    """Validates the discount factor; returns it as a float."""
    # gamma > 1 makes the return diverge, gamma < 0 flips its sign every step.
    if not (base.is_real(gamma) and 0.0 <= gamma <= 1.0):
        raise ValueError(f"gamma should be in the interval [0, 1], got gamma={gamma!r}.")
    return float(gamma)


def semantics_config(semantics: sem_lib.Semantics) -> dict:
    """The recurrence's conventions as plain values, for a transform's ``config``."""
    return {
        "semantics": semantics.name,
        "reset_before": semantics.reset_before,
        "reset_after": semantics.reset_after,
        "freeze_stops_return": semantics.freeze_stops_return,
    }


def checked_return_step(
    ret,
    stats,
    reward,
    terminated,
    truncated,
    update_stats,
    active,
    *,
    gamma,
    semantics,
    dtype,
    learn_returns,
    finite_rewards=False,
):
    """One environment step of a transform driven by the discounted return, inputs checked.

    Checks the inputs' kinds and shapes, casts them, and runs the library's
    one recurrence, :func:`~rewardnorm_jax._src.formulas.return_step` (the
    Gymnasium adapters run it on the host): it advances the return, lets
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
    base.check_step_inputs(shape, reward, terminated=terminated, truncated=truncated, active=active)
    base.check_update_stats(update_stats)
    terminated = base.as_flag(terminated, shape, "terminated")
    truncated = base.as_flag(truncated, shape, "truncated")
    if active is not None:
        active = base.as_flag(active, shape, "active")
    if not isinstance(update_stats, bool):
        update_stats = jnp.asarray(update_stats, bool)
    reward = jnp.asarray(reward, dtype)
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


def running_max(old, values, mask, axis_name=None) -> jax.Array:
    """``max(old, max of the masked values)``, reducing leading axes to ``old``'s shape."""
    num_batch_axes = values.ndim - old.ndim
    batch_max = jnp.max(
        values, axis=tuple(range(num_batch_axes)), where=mask, initial=-jnp.inf
    )  # -inf for an empty batch
    if axis_name is not None:
        batch_max = jax.lax.pmax(batch_max, axis_name)
    return jnp.maximum(old, batch_max)


def normalize_reward(
    gamma: base.Real = 0.99,
    epsilon: base.Real = 1e-8,
    *,
    semantics: "str | sem_lib.Semantics" = "gymnasium",
    clip=SEMANTICS_CLIP,
    dtype=None,
    axis_name=None,
    decay=None,
    shared: bool | np.bool_ = True,
    g_max=None,
    finite_rewards: bool | np.bool_ = False,
    components: int = 0,
    num_tasks: int | None = None,
    episodic: bool | np.bool_ = True,
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
    ============  ================  ================  ====  ================

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

    * ``decay``: exponential moving statistics instead of cumulative ones, for
      reward scales that drift (see :func:`rewardnorm_jax.init_stats`); each
      update discounts the past by ``decay`` and the division by the
      discounted weight is the bias correction, so early steps are not biased
      towards the prior.
    * ``shared=False``: one set of statistics per environment (shape
      ``batch_shape``), for multi-task batches where each environment has its
      own reward scale; with ``axis_name``, environment :math:`i` of every
      participant shares statistics (position-wise ``psum``).
    * reward streams beyond one scalar per environment: ``components``
      (several objectives, or agents stacked along an axis, each with its own
      statistics), ``num_tasks`` (one set per task, for multi-task and
      open-ended training) and ``episodic=False`` (a non-episodic return for
      intrinsic rewards). Flags may be given per environment (a leading part
      of the rewards' shape) or per reward.
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
        autoreset), or a :class:`~rewardnorm_jax.Semantics` instance.
      clip: symmetric bound of the normalized reward; defaults to the
        semantics' own (10 for sb3, none otherwise); ``None`` disables it.
      dtype: statistics and return dtype, float32 or float64; default float64
        under x64, float32 otherwise.
      axis_name: mapped axis name(s) to share the statistics across
        (``vmap``/``pmap``/``shard_map``); see :func:`rewardnorm_jax.merge_stats`.
      decay: ``None`` (cumulative statistics, as the references) or the
        per-update discount in [0, 1) of exponential moving statistics.
      shared: one set of statistics for the whole batch (default, as the
        references) or, if false, one per environment.
      g_max: ``None``, or the bound :math:`g_{max} > 0` on the normalized
        return that sets the floor :math:`M / g_{max}` of the divisor
        (SimbaV2 and FastTD3 use 10).
      finite_rewards: the caller's promise that every reward is finite. The
        compiled step then skips the NaN/inf handling (a non-finite reward
        would poison the statistics); with no ``active`` mask either, it
        selects no entries at all, the cheapest step.
      components: how many trailing axes of the rewards are components of one
        environment's reward (objectives, or agents stacked along an axis),
        each with statistics of its own; the other axes are environments,
        which share them. 0 (default): every reward shares one set, which
        keeps the ratios between components.
      num_tasks: ``None``, or the number :math:`K` of tasks (levels): one
        set of statistics per task, each environment's return merged into its
        task's set and its reward normalized by it. Every ``step``,
        ``update`` and ``normalize`` then takes ``task=``, the integer ids in
        ``[0, K)`` of this call's environments (the rewards' shape without
        their component axes, or a leading part of it); the ids are inputs,
        like the rewards, and the state keeps none. Inside ``jit`` an id
        outside ``[0, K)`` is a ``checkify`` error where the caller runs
        under ``jax.experimental.checkify.checkify``; without it the entry
        joins no task's statistics and its reward normalizes to NaN. Under
        ``jit`` without x64, JAX converts int64 ids to int32 on the way in
        (``2**32 + 1`` arrives as 1): pass int32 ids there.
      episodic: if false, the return never resets at episode ends (intrinsic
        rewards, as RND's): the flags are still checked, and never used.

    Returns:
      A :class:`~rewardnorm_jax.RewardTransform`. The output reward has the
      statistics dtype (float32 or float64), whatever the rewards' dtype.

    Raises:
      ValueError: for gamma outside [0, 1], epsilon <= 0, a non-positive clip,
        an unknown semantics, a decay outside [0, 1) or a non-positive g_max;
        from ``step`` and ``update``, under an ``axis_name`` that no enclosing
        map binds.
      TypeError: for ``shared`` or ``finite_rewards`` that is not a bool, or an
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
    gamma = check_gamma(gamma)
    semantics = sem_lib.resolve(semantics)
    dtype = rs.check_dtype(dtype)
    axis_name = rs.check_axis_name(axis_name)
    # epsilon = 0 (or a value that rounds to 0 in dtype) divides by zero while
    # the variance is 0 (constant returns).
    epsilon = base.check_positive("epsilon", epsilon, dtype)
    clip = semantics.clip if clip is SEMANTICS_CLIP else clip
    clip = None if clip is None else base.check_positive("clip", clip, dtype, allow_inf=True)
    decay = rs.check_decay(decay, dtype)
    # g_max <= 0 divides by zero or flips the sign of the floor.
    g_max = None if g_max is None else base.check_positive("g_max", g_max, dtype)
    shared = base.check_bool("shared", shared)  # a truthy string would silently share
    finite_rewards = base.check_bool("finite_rewards", finite_rewards)
    episodic = base.check_bool("episodic", episodic)
    if not episodic:  # the flags are still checked, and end no return
        semantics = dataclasses.replace(semantics, reset_before="never", reset_after="never")
    components = base.check_count("components", components, minimum=0)
    num_tasks = base.check_num_tasks(num_tasks)
    if num_tasks is not None and not shared:
        raise ValueError(
            f"num_tasks={num_tasks} keeps one set of statistics per task, shared by the "
            "environments that run it; shared=False keeps one per environment: choose one."
        )

    def init(batch_shape: base.ShapeLike = ()) -> NormalizeRewardState:
        batch_shape = base.check_batch_shape(batch_shape)
        if len(batch_shape) < components:
            raise ValueError(
                f"batch_shape={batch_shape} has fewer axes than components={components}: "
                "the rewards' last `components` axes are their components (objectives, "
                "agents), e.g. batch_shape=(num_envs, num_objectives) with components=1."
            )
        component_shape = batch_shape[len(batch_shape) - components :]
        tasks = () if num_tasks is None else (num_tasks,)
        stats_shape = tasks + component_shape if shared else batch_shape
        return NormalizeRewardState(
            stats=rs.init_stats(stats_shape, dtype, decay=decay),
            ret=jnp.zeros(batch_shape, dtype),
            ret_abs_max=None if g_max is None else jnp.zeros(stats_shape, dtype),
        )

    def checked_batch_shape(state) -> base.Shape:
        batch_shape = base.shape_of(getattr(state, "ret", None))
        base.check_state(state, init, batch_shape, config, STATE_HINTS)
        return batch_shape

    def checked_task(task, batch_shape: base.Shape) -> jax.Array | None:
        """The environments' task ids (``None`` without ``num_tasks``), checked and spread."""
        if num_tasks is None:  # transform_from_step refuses a task then
            return None
        env_shape = batch_shape[: len(batch_shape) - components]
        if task is None:
            raise ValueError(
                f"normalize_reward(num_tasks={num_tasks}) keeps one set of statistics per "
                "task and needs each environment's task id on every call: pass task=ids "
                f"(integers in [0, {num_tasks}), shape {env_shape}), e.g. "
                "norm.step(state, reward, terminated, truncated, task=ids); an adapter's "
                "wrapper reads them with task_of=."
            )
        ids = base.check_task(task, env_shape, num_tasks, "environment", leading=True)
        return base.spread(ids, env_shape)

    def divisor_var(running, ret_abs_max) -> jax.Array:
        """The variance the rewards are divided by (floored by ``g_max``)."""
        var = running.var
        if g_max is not None:  # max(sqrt(var + eps), M / g_max) as one square root
            floor = ret_abs_max / g_max
            var = jnp.maximum(var, floor * floor - epsilon)
        return var

    def inverse_std(running, ret_abs_max) -> jax.Array:
        return jax.lax.rsqrt(divisor_var(running, ret_abs_max) + epsilon)

    def scale(reward, inverse) -> jax.Array:
        """The rewards times ``inverse`` (clipped), non-finite ones passed through."""
        passthrough = False if finite_rewards else ~jnp.isfinite(reward)
        return formulas.clip_scaled(jnp, reward * inverse, reward, clip, passthrough)

    def normalize(state: NormalizeRewardState, reward, *, task=None) -> jax.Array:
        batch_shape = checked_batch_shape(state)
        base.check_step_inputs(batch_shape, reward)
        task = checked_task(task, batch_shape)
        reward = jnp.asarray(reward, dtype)
        inverse = inverse_std(state.stats, state.ret_abs_max)
        return scale(reward, rs.per_key(inverse, task))

    def learn_returns(stats, ret, mask, task):
        """``stats`` (running statistics, max of ``|G|``) with ``ret`` learnt."""
        running, ret_abs_max = stats
        mask = None if mask is True else jnp.broadcast_to(mask, ret.shape)
        if task is not None:
            if g_max is not None:
                ret_abs_max = keyed_max(ret_abs_max, jnp.abs(ret), mask, task, axis_name)
            running = rs.merge_keyed(running, ret, mask, task, axis_name=axis_name)
            return running, ret_abs_max
        if g_max is not None:
            ret_abs_max = running_max(ret_abs_max, jnp.abs(ret), mask, axis_name)
        running = rs.merge_checked(
            running,
            ret,
            mask,
            axis_name=axis_name,
            unselected_alike=True,  # a skipped step's return is a return too
        )
        return running, ret_abs_max

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
        task = checked_task(task, checked_batch_shape(state))
        rs.participants(axis_name)  # an unbound axis_name is named before any collective
        reward, ret, (stats, ret_abs_max) = checked_return_step(
            state.ret,
            (state.stats, state.ret_abs_max),
            reward,
            terminated,
            truncated,
            update_stats,
            active,
            gamma=gamma,
            semantics=semantics,
            dtype=dtype,
            learn_returns=lambda stats, ret, mask: learn_returns(stats, ret, mask, task),
            finite_rewards=finite_rewards,
        )
        new_state = state.replace(stats=stats, ret=ret, ret_abs_max=ret_abs_max)
        inverse = rs.per_key(inverse_std(stats, ret_abs_max), task)
        return scale(reward, inverse), new_state

    config = base.make_config(
        "normalize_reward",
        gamma=gamma,
        epsilon=epsilon,
        **semantics_config(semantics),
        clip=clip,
        dtype=dtype.name,
        decay=decay,
        shared=shared,
        g_max=g_max,
        finite_rewards=finite_rewards,
        components=components,
        num_tasks=num_tasks,
        episodic=episodic,
    )
    return base.transform_from_step(
        init,
        normalize,
        step,
        config,
        num_tasks=num_tasks,
        components=components,
    )


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
