r"""gymnax wrappers that pass rewards through a core reward transform."""

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
from gymnax.wrappers.purerl import GymnaxWrapper

import rewardnorm_jax as rn
from rewardnorm_jax._src.core import adapter, checks
from rewardnorm_jax._src.core.adapter import batch_shape_of_key
from rewardnorm_jax._src.reward import NormalizeRewardWrapper

PyTree = Any


def episode_ends(result: tuple) -> tuple[jax.Array, jax.Array]:
    """``(terminated, truncated)`` of a gymnax step result, six or five values.

    Six values ``(obs, state, reward, terminated, truncated, info)`` (gymnax
    >= 1.0) carry both flags. Five values ``(obs, state, reward, done, info)``
    (gymnax's ``LegacyStepAPIWrapper``, PureJaxRL's wrappers, Craftax) carry
    one: an end is a termination when ``info["discount"]`` is 0 (the
    environment's terminal discount, as gymnax and Craftax report it) and a
    truncation otherwise; without a ``"discount"`` in ``info`` every end is a
    termination.

    Raises:
      ValueError: for a step result of another length.
    """
    if len(result) == 6:
        return result[3], result[4]
    if len(result) != 5:
        raise ValueError(
            f"the wrapped environment's step returned {len(result)} values; expected 6 "
            "(obs, state, reward, terminated, truncated, info) or 5 (obs, state, reward, "
            "done, info)."
        )
    reward, info = result[2], result[4]
    done = adapter.align_flag("done", jnp.asarray(result[3], bool), reward)
    if isinstance(info, Mapping) and "discount" in info:
        ended = adapter.align_flag('info["discount"]', jnp.asarray(info["discount"]) == 0, reward)
        terminated = done & ended
    else:
        terminated = done
    return terminated, done & ~terminated


class RewardTransformWrapper(adapter.TransformWrapper, GymnaxWrapper):
    r"""Passes every reward of a gymnax environment through a reward transform.

    Any :class:`~rewardnorm_jax.RewardTransform` works: a normalizer, a clip,
    or a :func:`~rewardnorm_jax.chain` of them. The wrapper adds no math of its
    own; each step calls the transform's ``step`` once:

    .. math::
      (\tilde r, s') = \mathrm{transform.step}(s, r, \mathrm{terminated},
      \mathrm{truncated}, \mathrm{update\_stats})

    ``reset`` and ``step`` keep gymnax's signatures and return the step
    contract of the wrapped environment: six values ``(obs, state, reward,
    terminated, truncated, info)`` (gymnax >= 1.0) or five ``(obs, state,
    reward, done, info)`` (``LegacyStepAPIWrapper``, PureJaxRL's wrappers,
    Craftax), where an end with ``info["discount"] == 0`` is a termination, any
    other end a truncation, and without ``"discount"`` every end a termination.
    Both run jitted with a static ``self`` and return identical pytrees, so
    they fit ``lax.scan`` and ``lax.cond``. The state is a
    :class:`RewardWrapperState` with the inner
    state in ``env_state`` (as gymnax's ``LogWrapper``), the transform state in
    ``transform_state`` and a freeze flag ``update_stats``. Attributes not
    found on the wrapper come from the wrapped environment.

    Batches share one set of statistics in two ways:

    * around a batched environment (:class:`VecEnv`, PureJaxRL's ``VecEnv``):
      reset with one key per environment, e.g. keys of shape ``(N, 2)``; the
      transform state is created with ``init(batch_shape=(N,))`` and rewards
      are ``(N,)`` arrays;
    * per environment, under ``jax.vmap(..., axis_name="envs")`` (or
      ``VecEnv(wrapper, axis_name="envs")``), with a transform built with
      ``axis_name="envs"`` and the wrapper told so (``axis_name="envs"``):
      every environment copy holds the same statistics, merged across the
      mapped axis at each step.

    A wrapper reset with one environment's key needs ``axis_name`` or
    ``per_env=True`` (one set per environment, or a single environment); see
    :doc:`/suites/index`, "One set of statistics or one per environment".

    Statistics outlive evaluation: ``reset(key, params, stats_from=ts)`` starts
    new episodes from the transform state ``ts``, keeping its statistics while
    its tracked returns restart at zero (the batch size may differ);
    :func:`get_transform_state` / :func:`set_transform_state` read and
    write the transform state (checkpoints); ``step(..., update_stats=False)``
    or :func:`set_update_stats` freezes the statistics while rewards are still
    transformed.

    Example:
      >>> import gymnax
      >>> import rewardnorm_jax as rn
      >>> from rewardnorm_jax.gymnax import RewardTransformWrapper
      >>> env, params = gymnax.make("CartPole-v1")
      >>> transform = rn.chain(rn.normalize_reward(0.99), rn.clip_reward(-10.0, 10.0))
      >>> env = RewardTransformWrapper(env, transform, per_env=True)   # one environment
      >>> key = jax.random.key(0)
      >>> obs, state = env.reset(key, params)
      >>> obs, state, reward, terminated, truncated, info = env.step(key, state, 0, params)
      >>> float(reward)   # CartPole's reward 1, normalized then clipped
      10.0

    Change logs:
      * v0.1.0 - Initially added.
    """

    def reset(
        self,
        key: jax.Array,
        params: Any = None,
        stats_from: PyTree = None,
    ) -> tuple[PyTree, adapter.RewardWrapperState]:
        """Resets the environment and the transform state.

        Args:
          key: reset key; a batch of keys (one per environment) for a batched
            environment, which sets the transform state's batch shape.
          params: environment parameters (default: the environment's own).
          stats_from: optional transform state (e.g.
            ``get_transform_state(state)``) to continue from: its tracked
            returns (fields named ``ret``) restart at zero as for a fresh
            reset, so its batch size may differ; everything else (running
            statistics, percentiles, running max of ``|G|``) is kept.
            Default: a fresh transform state.

        Returns:
          ``(obs, state)``; statistics learn in the new state.

        Raises:
          ValueError: if ``stats_from`` is not a state of this wrapper's
            transform, or differs from it in shape or dtype outside ``ret``;
            if ``key`` is one environment's, the transform learns statistics
            and the wrapper has neither ``axis_name`` nor ``per_env=True``;
            if ``stats_from`` holds values no step produces.
        """
        if stats_from is not None:  # before jit hides the values
            adapter.check_concrete_values(stats_from, "stats_from")
        return self._reset(key, params, stats_from)

    @partial(jax.jit, static_argnames=("self",))
    def _reset(self, key, params, stats_from) -> tuple[PyTree, adapter.RewardWrapperState]:
        obs, env_state = self._env.reset(key, params)
        transform_state = self.init_transform_state(batch_shape_of_key(key))
        if stats_from is not None:
            transform_state = adapter.keep_stats(transform_state, stats_from)
        return obs, adapter.RewardWrapperState(
            env_state=env_state,
            transform_state=transform_state,
            update_stats=jnp.array(True),
        )

    def step(
        self,
        key: jax.Array,
        state: adapter.RewardWrapperState,
        action: Any,
        params: Any = None,
        update_stats: jax.typing.ArrayLike = True,
    ) -> tuple[Any, ...]:
        """Steps the environment and transforms its reward.

        Args:
          key: step key (a batch of keys for a batched environment).
          state: the wrapper state.
          action: the action (batched for a batched environment).
          params: environment parameters (default: the environment's own).
          update_stats: scalar boolean, may be traced; ``False`` freezes the
            statistics for this step (as does ``state.update_stats``).

        Returns:
          ``(obs, state, reward, terminated, truncated, info)``, or ``(obs,
          state, reward, done, info)`` when the wrapped environment returns
          five values, with the transformed reward.

        Raises:
          ValueError: if ``update_stats`` is not a scalar, or the wrapped
            step returns neither six nor five values.
          TypeError: if ``update_stats`` is no flag (a string, a complex number).
        """
        update_stats = jnp.asarray(checks.check_update_stats(update_stats), bool)  # before jit
        return self._step(key, state, action, params, update_stats)

    @partial(jax.jit, static_argnames=("self",))
    def _step(self, key, state, action, params, update_stats) -> tuple[Any, ...]:
        result = self._env.step(key, state.env_state, action, params)
        obs, env_state, reward = result[:3]
        reward, transform_state = self.step_reward(
            state.transform_state,
            reward,
            *episode_ends(result),
            update_stats & state.update_stats,
            env_state=state.env_state,
        )
        state = state.replace(env_state=env_state, transform_state=transform_state)
        return (obs, state, reward, *result[3:])


class NormalizeReward(NormalizeRewardWrapper, RewardTransformWrapper):
    r"""Scales rewards by the running standard deviation of the discounted return.

    The gymnax counterpart of Gymnasium's ``NormalizeReward`` and PureJaxRL's
    ``NormalizeVecReward``: :func:`rewardnorm_jax.normalize_reward` (which
    links to the formula) around a gymnax environment, with one set of running
    statistics of the discounted return shared by the batch. ``semantics``
    says which episode ends reset the return (``"gymnasium"``, the default:
    ``terminated``; ``"purejaxrl"``: ``terminated or truncated``, which with
    gymnax's auto-reset reproduces PureJaxRL exactly; ``"sb3"``). The state's
    ``transform_state`` is a :class:`~rewardnorm_jax.NormalizeRewardState`
    (``stats``, ``ret``).

    Unlike PureJaxRL, whose statistics live in the environment state and are
    wiped by any ``reset``, ``reset(key, params, stats_from=ts)`` keeps them;
    ``step(..., update_stats=False)`` freezes them (the returns keep
    accumulating, except with ``semantics="sb3"``); see
    :class:`RewardTransformWrapper` for batching, checkpoints and freezing.

    Note:
      The first rewards are large (about 70 for a reward of 1: the variance
      starts at the 1e-4 prior); chain a clip with
      ``RewardTransformWrapper(env, rn.chain(rn.normalize_reward(), rn.clip_reward(-10, 10)))``
      or pass ``semantics="sb3"`` (which clips at 10).

    Example:
      >>> import gymnax
      >>> from rewardnorm_jax.gymnax import NormalizeReward, VecEnv
      >>> env, params = gymnax.make("CartPole-v1")
      >>> env = NormalizeReward(VecEnv(env), gamma=0.99, semantics="purejaxrl")
      >>> keys = jax.random.split(jax.random.key(0), 4)
      >>> obs, state = env.reset(keys, params)
      >>> actions = jnp.zeros(4, jnp.int32)
      >>> obs, state, reward, terminated, truncated, info = env.step(keys, state, actions, params)
      >>> reward.shape, int(rn.count_as_int(state.transform_state.stats))
      ((4,), 4)
      >>> round(float(reward[0]), 1)   # 4 returns of 1: var = 2e-4 / 4.0001
      141.4

    Change logs:
      * v0.1.0 - Initially added.
    """


class TransformReward(RewardTransformWrapper):
    r"""Applies a jittable elementwise function to every reward: :math:`\tilde r = f(r)`.

    Built on :func:`rewardnorm_jax.transform_reward`; the transform state is
    :class:`~rewardnorm_jax.EmptyState`.

    Example:
      >>> import gymnax
      >>> from rewardnorm_jax.gymnax import TransformReward
      >>> env, params = gymnax.make("CartPole-v1")
      >>> env = TransformReward(env, lambda r: 2.0 * r)
      >>> float(env.transform.apply(env.transform.init(), 1.0))   # each reward doubled
      2.0

    Change logs:
      * v0.1.0 - Initially added.
    """

    def __init__(self, env, fn: Callable[[jax.Array], jax.Array]):
        """Wraps ``env``; raises ValueError if ``fn`` is not callable."""
        super().__init__(env, rn.transform_reward(fn))


class ClipReward(RewardTransformWrapper):
    r"""Clips every reward to ``[low, high]``: :math:`\tilde r = \min(\max(r, l), h)`.

    Built on :func:`rewardnorm_jax.clip_reward`; the transform state is
    :class:`~rewardnorm_jax.EmptyState`.

    Example:
      >>> import gymnax
      >>> from rewardnorm_jax.gymnax import ClipReward
      >>> env, params = gymnax.make("Pendulum-v1")
      >>> env = ClipReward(env, -1.0, 0.0)
      >>> env.transform.apply(env.transform.init(), jnp.array([-16.2, -0.5])).tolist()
      [-1.0, -0.5]

    Change logs:
      * v0.1.0 - Initially added.
    """

    def __init__(self, env, low: float = -1.0, high: float = 1.0):
        """Wraps ``env``; raises ValueError if ``low > high`` or a bound is NaN."""
        super().__init__(env, rn.clip_reward(low, high))
