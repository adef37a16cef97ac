r"""A Brax wrapper that passes ``state.reward`` through a core reward transform."""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from brax.envs import training
from brax.envs.base import Env, State, Wrapper

import rewardnorm_jax as rn
from rewardnorm_jax._src import wrapper_state as _state

PyTree = Any
_SEMANTICS_DEFAULT = _state.SEMANTICS_DEFAULT

TRANSFORM_STATE = "reward_transform_state"  # state.info key: the transform's state
UPDATE_STATS = "reward_update_stats"  # state.info key: bool (), False freezes the statistics
RAW_REWARD = "raw_reward"  # state.metrics key: the reward before the transform
TRUNCATION = "truncation"  # state.info key set by Brax's and Playground's EpisodeWrapper


class RewardTransformWrapper(Wrapper):
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
    transformed reward (in the raw reward's dtype); the raw reward stays in
    ``state.metrics["raw_reward"]``, which Brax's evaluator sums into
    ``eval/episode_raw_reward``. The transform state and a freeze flag live in
    ``state.info`` (:func:`get_transform_state`, :func:`set_transform_state`,
    :func:`set_update_stats`).

    Place it outermost, around the batched, episode-limited, auto-resetting
    environment (``wrap_env_fn=``:func:`wrap_env_fn`), so one set of
    statistics serves the batch and ``info["truncation"]`` is there. Reset
    for one environment (``state.reward`` of shape ``()``), a wrapper whose
    transform learns statistics needs ``axis_name`` or ``per_env=True``: under
    Brax's ``VmapWrapper`` (an unnamed ``jax.vmap``) each environment would
    otherwise silently keep its own.

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
      * v0.2.0 - Initially added.
    """

    def __init__(
        self,
        env: Env,
        transform: rn.RewardTransform,
        *,
        axis_name: Any = None,
        per_env: bool = False,
    ):
        """Wraps ``env``.

        Args:
          env: a Brax (or MuJoCo Playground) environment, batched or not.
          transform: the reward transform applied to every reward.
          axis_name: for a wrapper serving one environment under
            ``jax.vmap(..., axis_name=...)``: the axis name the transform was
            built with, across which it shares its statistics.
          per_env: for a wrapper serving one environment: keep statistics of
            that environment alone (one set per environment under Brax's
            ``VmapWrapper``).

        Raises:
          ValueError: if ``transform`` is not a :class:`~rewardnorm_jax.RewardTransform`.
        """
        super().__init__(env)
        self.transform = _state.check_transform(transform)
        self._axis_name = axis_name
        self._per_env = bool(per_env)

    def reset(self, rng: jax.Array) -> State:
        """Resets the environment and the transform state (batch shape: the reward's).

        Raises:
          ValueError: if the environment is one environment, the transform
            learns statistics and the wrapper has neither ``axis_name`` nor
            ``per_env=True``.
        """
        state = self.env.reset(rng)
        batch_shape = tuple(jnp.shape(state.reward))
        transform_state = _state.init_transform_state(
            type(self).__name__, self.transform, batch_shape, self._axis_name, self._per_env
        )
        info = {**state.info, TRANSFORM_STATE: transform_state, UPDATE_STATS: jnp.array(True)}
        return state.replace(info=info, metrics={**state.metrics, RAW_REWARD: state.reward})

    def step(self, state: State, action: jax.Array) -> State:
        """Steps the environment and transforms its reward."""
        # the inner environment sees its own info and metrics only
        info, metrics = dict(state.info), dict(state.metrics)
        transform_state, update_stats = info.pop(TRANSFORM_STATE), info.pop(UPDATE_STATS)
        metrics.pop(RAW_REWARD)
        state = self.env.step(state.replace(info=info, metrics=metrics), action)
        raw = state.reward
        done = jnp.asarray(state.done) > 0
        truncated = done & (jnp.asarray(state.info.get(TRUNCATION, False)) > 0)
        reward, transform_state = self.transform.step(
            transform_state, raw, done & ~truncated, truncated, update_stats
        )
        return state.replace(
            reward=reward.astype(jnp.result_type(raw)),
            info={**state.info, TRANSFORM_STATE: transform_state, UPDATE_STATS: update_stats},
            metrics={**state.metrics, RAW_REWARD: raw},
        )


class NormalizeReward(RewardTransformWrapper):
    r"""Scales ``state.reward`` by the running standard deviation of the discounted return.

    :func:`rewardnorm_jax.normalize_reward` as a Brax wrapper:

    .. math::
      G \leftarrow \gamma\, G\, (1 - d) + r, \qquad
      \tilde r = r / \sqrt{\sigma^2_G + \epsilon}

    with the flag :math:`d` chosen by ``semantics`` (``"gymnasium"``, the
    default: terminations only; ``"purejaxrl"``: every end). See
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
      * v0.2.0 - Initially added.
    """

    def __init__(
        self,
        env: Env,
        gamma: float = 0.99,
        epsilon: float = 1e-8,
        *,
        semantics: "str | rn.Semantics" = "gymnasium",
        clip: Any = _SEMANTICS_DEFAULT,
        dtype=None,
        axis_name=None,
        per_env: bool = False,
        **options,
    ):
        """Wraps ``env``; arguments as :func:`rewardnorm_jax.normalize_reward`'s.

        ``per_env`` (or ``shared=False``): for a wrapper serving one
        environment without ``axis_name``, keep statistics of that environment
        alone.

        Raises:
          ValueError: for an invalid hyperparameter (see
            :func:`rewardnorm_jax.normalize_reward`).
        """
        transform, per_env = _state.normalize_transform(
            gamma, epsilon, semantics, clip, dtype, axis_name, per_env, options
        )
        super().__init__(env, transform, axis_name=axis_name, per_env=per_env)


def get_transform_state(state: State) -> PyTree:
    """The reward transform's state held in ``state.info`` (e.g. to checkpoint it).

    Raises:
      ValueError: if ``state`` holds none (not a state of a wrapper of this module).
    """
    _check_wrapped(state)
    return state.info[TRANSFORM_STATE]


def set_transform_state(state: State, transform_state: PyTree) -> State:
    """``state`` with the reward transform's state replaced (e.g. from a checkpoint).

    The replacement is used exactly as given (statistics and tracked returns)
    and must have the structure, shapes and dtypes of the state it replaces;
    :func:`with_stats_from` keeps the tracked returns instead.

    Raises:
      ValueError: if ``state`` holds no transform state, or the replacement
        differs in structure, shape or dtype.
    """
    _state.check_same_layout(get_transform_state(state), transform_state, "transform_state")
    return state.replace(info={**state.info, TRANSFORM_STATE: transform_state})


def with_stats_from(state: State, stats_from: PyTree) -> State:
    """``state`` with the statistics of ``stats_from``, its own tracked returns kept.

    For an evaluation (or a resumed run) on a fresh reset: the statistics
    (running moments, percentiles, running max of ``|G|``) come from
    ``stats_from``, the tracked returns (fields ``ret``) stay those of
    ``state``, so ``stats_from`` may come from a batch of another size.

    Raises:
      ValueError: if ``state`` holds no transform state, or ``stats_from``
        differs from it in structure, or in shape or dtype outside ``ret``.
    """
    kept = _state.keep_stats(get_transform_state(state), stats_from)
    return state.replace(info={**state.info, TRANSFORM_STATE: kept})


def set_update_stats(state: State, update_stats: jax.typing.ArrayLike) -> State:
    """``state`` with the statistics frozen (``False``) or learning (``True``).

    Raises:
      ValueError: if ``state`` holds no transform state.
    """
    _check_wrapped(state)
    flag = jnp.broadcast_to(jnp.asarray(update_stats, bool), jnp.shape(state.info[UPDATE_STATS]))
    return state.replace(info={**state.info, UPDATE_STATS: flag})


def _check_wrapped(state: State) -> None:
    if not isinstance(getattr(state, "info", None), dict) or TRANSFORM_STATE not in state.info:
        raise ValueError(
            f"no reward transform state in state.info (key {TRANSFORM_STATE!r}); pass the "
            "state of a rewardnorm_jax.brax wrapper (or of a wrapper stack around one)."
        )


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
) -> Callable[..., Env]:
    """A ``wrap_env_fn`` for Brax's trainers: Brax's wrappers, then the transform outermost.

    ``brax.training.agents.ppo.train(env, ..., wrap_env_fn=wrap_env_fn(transform),
    eval_env=RawRewardEvaluation(env))`` trains on transformed rewards with
    one set of statistics per device shared by its whole batch (the
    statistics ride in the training state's ``info``, so they persist across
    training steps), and evaluates on raw rewards.

    Args:
      transform: the reward transform, e.g. ``rn.normalize_reward(0.99)``.
      wrap: the trainer's own wrapping function, called with the trainer's
        arguments: ``brax.envs.training.wrap`` (default), or MuJoCo
        Playground's ``mujoco_playground.wrapper.wrap_for_brax_training``.

    Returns:
      ``fn(env, **kwargs)``: ``RewardTransformWrapper(wrap(env, **kwargs),
      transform)``, or ``wrap(inner, **kwargs)`` for a
      :class:`RawRewardEvaluation` around ``inner``.

    Raises:
      ValueError: if ``transform`` is not a :class:`~rewardnorm_jax.RewardTransform`.
    """
    if not isinstance(transform, rn.RewardTransform):
        raise ValueError(
            f"transform should be a rewardnorm_jax.RewardTransform (e.g. "
            f"rn.normalize_reward()), got {transform!r} of type {type(transform).__name__}."
        )

    def fn(env: Env, **kwargs) -> Env:
        if isinstance(env, RawRewardEvaluation):
            return wrap(env.env, **kwargs)
        return RewardTransformWrapper(wrap(env, **kwargs), transform)

    return fn
