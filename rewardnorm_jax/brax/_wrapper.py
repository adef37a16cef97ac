r"""A Brax wrapper that passes ``state.reward`` through a core reward transform."""

from collections.abc import Callable

import jax
import jax.numpy as jnp
from brax.envs import training
from brax.envs.base import Env, State, Wrapper

import rewardnorm_jax as rn
from rewardnorm_jax._src.core import adapter
from rewardnorm_jax._src.core.adapter import RAW_REWARD, TRANSFORM_STATE, UPDATE_STATS
from rewardnorm_jax._src.reward import NormalizeRewardWrapper

TRUNCATION = "truncation"  # state.info key set by Brax's and Playground's EpisodeWrapper


class RewardTransformWrapper(adapter.TransformWrapper, Wrapper):
    r"""Passes ``state.reward`` of a Brax environment through a reward transform.

    Each step calls the transform's ``step`` once with the environment's
    reward and episode ends:

    .. math::
      (\tilde r, s') = \mathrm{transform.step}(s, r,\;
      \mathrm{done} \wedge \neg\mathrm{truncation},\; \mathrm{truncation},\;
      \mathrm{update\_stats})

    where ``truncation`` is ``state.info["truncation"]``, as Brax's (and MuJoCo
    Playground's) ``EpisodeWrapper`` sets it at the time limit, so the
    termination is ``done`` without truncation (with no ``"truncation"`` in
    ``info``, every end is a termination). ``state.reward`` becomes the
    transformed reward (a float in the statistics' dtype for a normalizer,
    from the reset on, whatever the raw dtype); the raw reward stays in
    ``state.metrics["raw_reward"]``, which Brax's evaluator sums into
    ``eval/episode_raw_reward``. The transform state and a freeze flag live in
    ``state.info`` (:func:`get_transform_state`, :func:`set_transform_state`,
    :func:`set_update_stats`).

    Place it outermost, around the batched, episode-limited, auto-resetting
    environment (``wrap_env_fn=``:func:`wrap_env_fn`), so one set of
    statistics serves the batch and ``info["truncation"]`` is there. Reset
    for one environment (``state.reward`` of shape ``()``) under Brax's
    ``VmapWrapper``, it needs ``axis_name`` or ``per_env=True`` (see
    :doc:`/suites/index`, "One set of statistics or one per environment").

    Example:
      >>> from brax import envs
      >>> import rewardnorm_jax as rn
      >>> from rewardnorm_jax.brax import RewardTransformWrapper
      >>> pendulum = envs.get_environment("inverted_pendulum", backend="positional")
      >>> env = envs.training.wrap(pendulum, episode_length=100)
      >>> env = RewardTransformWrapper(env, rn.normalize_reward(0.99))
      >>> state = env.reset(jax.random.split(jax.random.PRNGKey(0), 4))
      >>> state = env.step(state, jnp.zeros((4, 1)))
      >>> state.metrics["raw_reward"].tolist(), round(float(state.reward[0]), 1)
      ([1.0, 1.0, 1.0, 1.0], 141.4)

    Change logs:
      * Unreleased - Initially added.
    """

    batched_example = "{}(envs.training.wrap(env)), or wrap_env_fn for Brax's trainers"

    def reset(self, rng: jax.Array) -> State:
        """Resets the environment and the transform state (batch shape: the reward's).

        Raises:
          ValueError: if the environment is one environment, the transform
            learns statistics and the wrapper has neither ``axis_name`` nor
            ``per_env=True``; or if the environment reports no
            ``info["truncation"]`` (the wrapper sits inside Brax's
            ``EpisodeWrapper``) and the transform resets its return at
            truncations.
        """
        state = self.env.reset(rng)
        if TRUNCATION not in state.info:
            self._check_truncations_not_needed()
        transform_state = self.init_transform_state(jnp.shape(state.reward))
        return state.replace(
            reward=self.reset_reward(transform_state, state.reward),
            info={**state.info, TRANSFORM_STATE: transform_state, UPDATE_STATS: jnp.array(True)},
            metrics={**state.metrics, RAW_REWARD: state.reward},
        )

    def step(self, state: State, action: jax.Array) -> State:
        """Steps the environment and transforms its reward."""
        # the inner environment sees its own info and metrics only
        info, metrics = dict(state.info), dict(state.metrics)
        transform_state, update_stats = info.pop(TRANSFORM_STATE), info.pop(UPDATE_STATS)
        inner = state.replace(info=info, metrics=metrics, reward=metrics.pop(RAW_REWARD))
        state = self.env.step(inner, action)
        raw = state.reward
        done = jnp.asarray(state.done) > 0
        truncated = done & (jnp.asarray(state.info.get(TRUNCATION, False)) > 0)
        reward, transform_state = self.step_reward(
            transform_state, raw, done & ~truncated, truncated, update_stats, env_state=inner
        )
        return state.replace(
            reward=reward,
            info={**state.info, TRANSFORM_STATE: transform_state, UPDATE_STATS: update_stats},
            metrics={**state.metrics, RAW_REWARD: raw},
        )

    def _check_truncations_not_needed(self) -> None:
        """Refuses a transform that resets its return at truncations this wrapper cannot see."""
        found = adapter.config_values(self.transform.config)
        semantics = [value for value in found if isinstance(value, rn.Semantics)]
        at_truncations = [s for s in semantics if "done" in (s.reset_before, s.reset_after)]
        if at_truncations:
            raise ValueError(
                f"{type(self).__name__} sees no info['truncation'] (it sits inside Brax's "
                "EpisodeWrapper, which sets it), but its transform resets the return at "
                f"truncations ({', '.join(map(repr, at_truncations))}): place it "
                "outermost (wrap_env_fn, or around envs.training.wrap(env)), or use "
                'semantics="gymnasium", which resets at terminations only.'
            )


class NormalizeReward(NormalizeRewardWrapper, RewardTransformWrapper):
    r"""Scales ``state.reward`` by the running standard deviation of the discounted return.

    :func:`rewardnorm_jax.normalize_reward` (which links to the formula) as a
    Brax wrapper; ``semantics`` says which episode ends reset the return
    (``"gymnasium"``, the default: terminations only; ``"purejaxrl"``: every
    end). See
    :class:`RewardTransformWrapper` for placement, flags and state.

    Example:
      >>> from brax import envs
      >>> from rewardnorm_jax.brax import NormalizeReward
      >>> pendulum = envs.get_environment("inverted_pendulum", backend="positional")
      >>> env = envs.training.wrap(pendulum, episode_length=100)
      >>> env = NormalizeReward(env, gamma=0.99)
      >>> state = jax.eval_shape(env.reset, jax.random.split(jax.random.PRNGKey(0), 4))
      >>> from rewardnorm_jax.brax import get_transform_state
      >>> get_transform_state(state).ret.shape   # one set of statistics, 4 returns
      (4,)

    Change logs:
      * Unreleased - Initially added.
    """


class RawRewardEvaluation(Wrapper):
    """Marks an environment for evaluation: :func:`wrap_env_fn` leaves its rewards raw.

    Pass ``eval_env=RawRewardEvaluation(env)`` to Brax's trainers beside
    ``wrap_env_fn=wrap_env_fn(transform)``: the trainer wraps the evaluation
    environment with the same function, which then applies only Brax's own
    wrappers, so ``eval/episode_reward`` is the raw return and evaluation
    never sees (nor changes) the training statistics. Stepping it directly
    steps ``env``.
    """


def wrap_env_fn(
    transform: rn.RewardTransform,
    wrap: Callable[..., Env] = training.wrap,
    *,
    task_of: Callable[[State], jax.Array] | None = None,
) -> Callable[..., Env]:
    """A ``wrap_env_fn`` for Brax's trainers: Brax's wrappers, then the transform outermost.

    ``brax.training.agents.ppo.train(env, ..., wrap_env_fn=wrap_env_fn(transform),
    eval_env=RawRewardEvaluation(env))`` trains on transformed rewards with
    one set of statistics per device shared by its whole batch (the
    statistics ride in the training state's ``info``, so they persist across
    training steps), and evaluates on raw rewards. A transform built with
    ``axis_name="i"``, the axis of the trainers' ``pmap``, keeps one set
    merged across the devices (evaluate with :class:`RawRewardEvaluation`
    then: Brax's evaluator runs outside the ``pmap``).

    Args:
      transform: the reward transform, e.g. ``rn.normalize_reward(0.99)``.
      wrap: the trainer's own wrapping function, called with the trainer's
        arguments: ``brax.envs.training.wrap`` (default), or MuJoCo
        Playground's ``mujoco_playground.wrapper.wrap_for_brax_training``.
      task_of: for a keyed transform (``Statistics(num_tasks=K)``): a function of the
        batched environment's state returning each environment's task id,
        shape ``(num_envs,)`` (see :class:`RewardTransformWrapper`).

    Returns:
      ``fn(env, **kwargs)``: ``RewardTransformWrapper(wrap(env, **kwargs),
      transform)``, or ``wrap(inner, **kwargs)`` for a
      :class:`RawRewardEvaluation` around ``inner``.

    Raises:
      ValueError: if ``transform`` is not a :class:`~rewardnorm_jax.RewardTransform`,
        or ``task_of`` is given without ``num_tasks`` (or left out with it).
      TypeError: if ``task_of`` is not callable.
    """
    adapter.check_task_of(task_of, adapter.check_transform(transform))

    def fn(env: Env, **kwargs) -> Env:
        if isinstance(env, RawRewardEvaluation):
            return wrap(env.env, **kwargs)
        return RewardTransformWrapper(wrap(env, **kwargs), transform, task_of=task_of)

    return fn
