r"""Proximal policy optimisation on gymnax environments, with and without reward normalization.

A single-file PPO in the style of PureJaxRL: a Flax actor-critic, an Optax
optimizer, and the whole training run (rollouts, generalised advantage
estimation, minibatch epochs) inside one jitted function built from
``lax.scan``. Many runs train at once with ``jax.vmap`` over that function:
seeds, and the two arms of the comparison, normalized and raw rewards.

Rewards go through :func:`rewardnorm_jax.normalize_reward` (the running
standard deviation of the discounted return, Gymnasium's semantics) in the
gymnax adapter :mod:`rewardnorm_jax.gymnax`. Each run carries its arm in the
adapter's ``update_stats`` flag: a normalized run learns its statistics; a
raw run keeps them frozen at their prior (variance 1), so its rewards come out
unchanged (``r / sqrt(1 + 1e-8)`` is ``r`` in float32). Both arms therefore
share one compiled program and one state layout. The statistics live in the
environment state inside the runner, so checkpoints hold them
(:func:`save_checkpoint`), and evaluation resets fresh environments keeping
them and steps with them frozen: it never changes or wipes them.

Episodes cut by the time limit (``truncated`` but not ``terminated``) are
bootstrapped with the value of gymnax's ``info["final_observation"]``.

Example:
  >>> config = PPOConfig()                     # PureJaxRL's CartPole-v1 settings
  >>> config.num_updates, config.batch_size    # updates of num_envs * num_steps steps
  (976, 512)
  >>> default_config("Pendulum-v1").num_envs
  16

  ``train(config, init_runners(config, seed=0, num_seeds=8, normalize=(True, False)))``
  trains 8 seeds of each arm; ``python -m rewardnorm_jax.demo`` is the
  command-line front end.
"""

import dataclasses
import functools
import json
import os
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

import rewardnorm_jax as rn
from rewardnorm_jax._src.extras import requires

with requires("demo", __name__):
    import gymnax
    import optax
    from gymnax.environments import spaces
    from gymnax.wrappers.purerl import LogWrapper

    import rewardnorm_jax.gymnax as rngym

# gymnax environments this PPO runs (an MLP on flattened observations, Discrete
# or Box actions); MNISTBandit-bsuite is left out as it downloads a data set.
ENV_NAMES = tuple(name for name in gymnax.registered_envs if name != "MNISTBandit-bsuite")

CHECKPOINT_FILE = "checkpoint.msgpack"  # rewardnorm_jax.save_state of the stacked runners
CONFIG_FILE = "config.json"  # the config and number of runs, to build the template
ARM_LABELS = {True: "normalized", False: "raw"}


@dataclasses.dataclass(frozen=True)
class PPOConfig:
    """Hyperparameters of a run. ``total_steps`` counts environment steps per seed."""

    env_name: str = "CartPole-v1"
    total_steps: int = 500_000
    num_envs: int = 4
    num_steps: int = 128  # rollout length per update, per environment
    update_epochs: int = 4
    num_minibatches: int = 4
    learning_rate: float = 2.5e-4  # annealed linearly to 0 over each run
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_eps: float = 0.2
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    hidden_size: int = 64
    num_eval_envs: int = 32
    log_lines: int = 10  # progress lines per run

    @property
    def batch_size(self) -> int:
        """Environment steps per update: ``num_envs * num_steps``."""
        return self.num_envs * self.num_steps

    @property
    def num_updates(self) -> int:
        """Updates in the run: ``total_steps // batch_size``."""
        return self.total_steps // self.batch_size

    def validate(self) -> "PPOConfig":
        """Returns ``self``; raises ValueError naming the bad field and its valid range."""
        if self.env_name not in ENV_NAMES:
            raise ValueError(
                f"env_name={self.env_name!r} is not a supported gymnax environment; "
                f"valid names: {', '.join(ENV_NAMES)}."
            )
        for name in (
            "total_steps",
            "num_envs",
            "num_steps",
            "update_epochs",
            "num_minibatches",
            "hidden_size",
            "num_eval_envs",
            "log_lines",
        ):
            value = getattr(self, name)
            if not (isinstance(value, int) and value > 0):
                raise ValueError(f"{name} should be a positive integer, got {name}={value!r}.")
        if self.total_steps < self.batch_size:
            raise ValueError(
                f"total_steps={self.total_steps} is less than one update "
                f"(num_envs * num_steps = {self.batch_size}); use at least {self.batch_size}."
            )
        if self.batch_size % self.num_minibatches:
            raise ValueError(
                f"num_minibatches={self.num_minibatches} should divide num_envs * num_steps "
                f"= {self.batch_size}."
            )
        for name in ("gamma", "gae_lambda"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} should be in [0, 1], got {name}={value!r}.")
        return self


# The defaults above are PureJaxRL's CartPole-v1 configuration. For Box actions
# (Pendulum-v1): more environments, more and smaller minibatch steps, a larger
# learning rate, a shorter horizon and no entropy bonus; 100 updates, by which
# normalized runs balance the pendulum.
PENDULUM = PPOConfig(
    env_name="Pendulum-v1",
    total_steps=204_800,
    num_envs=16,
    num_steps=128,
    update_epochs=10,
    num_minibatches=16,
    learning_rate=1e-3,
    gamma=0.95,
    ent_coef=0.0,
)


def default_config(env_name: str) -> PPOConfig:
    """The tuned settings for ``env_name``: Pendulum's for Box actions, CartPole's otherwise."""
    PPOConfig(env_name=env_name).validate()
    env, params = gymnax.make(env_name)
    if isinstance(env.action_space(params), spaces.Box):
        return dataclasses.replace(PENDULUM, env_name=env_name)
    return PPOConfig(env_name=env_name)


# --- Policy -------------------------------------------------------------------------


class ActorCritic(nn.Module):
    """Separate two-layer tanh MLPs for the policy and the value (PureJaxRL's network)."""

    action_dim: int
    discrete: bool
    hidden_size: int = 64

    @nn.compact
    def __call__(self, obs):
        """``(policy, value)``: logits, or ``(mean, log_std)`` for Box actions, and values."""

        def mlp(x, out, scale):
            for _ in range(2):
                x = nn.Dense(self.hidden_size, kernel_init=nn.initializers.orthogonal(np.sqrt(2)))(
                    x
                )
                x = nn.tanh(x)
            return nn.Dense(out, kernel_init=nn.initializers.orthogonal(scale))(x)

        policy = mlp(obs, self.action_dim, 0.01)
        if not self.discrete:
            log_std = self.param("log_std", nn.initializers.zeros, (self.action_dim,))
            policy = (policy, jnp.broadcast_to(log_std, policy.shape))
        value = mlp(obs, 1, 1.0)[..., 0]
        return policy, value


def _sample(discrete, policy, key):
    if discrete:
        return jax.random.categorical(key, policy)
    mean, log_std = policy
    return mean + jnp.exp(log_std) * jax.random.normal(key, mean.shape)


def _mode(discrete, policy):
    return jnp.argmax(policy, axis=-1) if discrete else policy[0]


def _log_prob(discrete, policy, action):
    if discrete:
        logp = jax.nn.log_softmax(policy)
        return jnp.take_along_axis(logp, action[..., None], axis=-1)[..., 0]
    mean, log_std = policy
    z = (action - mean) * jnp.exp(-log_std)
    return jnp.sum(-0.5 * z**2 - log_std - 0.5 * jnp.log(2 * jnp.pi), axis=-1)


def _entropy(discrete, policy):
    if discrete:
        logp = jax.nn.log_softmax(policy)
        return -jnp.sum(jnp.exp(logp) * logp, axis=-1)
    _, log_std = policy
    return jnp.sum(log_std + 0.5 * jnp.log(2 * jnp.pi * jnp.e), axis=-1)


# --- Environment with normalized rewards ----------------------------------------------


class Environment(NamedTuple):
    """A batch of gymnax environments behind a reward transform, and what the agent needs of it."""

    env: rngym.RewardTransformWrapper  # RewardTransformWrapper(VecEnv(LogWrapper(env)))
    params: Any
    action_dim: int
    discrete: bool
    low: Any  # action bounds of a Box space, None for Discrete
    high: Any
    max_steps: int  # episode length limit


def make_env(config: PPOConfig) -> Environment:
    """The environments of ``config``: ``num_envs`` copies stepped as one, rewards transformed.

    The stack is ``RewardTransformWrapper(VecEnv(LogWrapper(env)), transform)``:
    gymnax's ``LogWrapper`` records raw episode returns, the adapter's
    ``VecEnv`` maps the environment over the batch, and the transform,
    :func:`rewardnorm_jax.normalize_reward` (Gymnasium's semantics), sees the
    ``(num_envs,)`` rewards with one set of statistics shared by the batch.
    Whether a run normalizes is its state's ``update_stats`` flag (see
    :func:`init_runner`), so both arms use this one environment.
    """
    base_env, params = gymnax.make(config.env_name)
    transform = rn.normalize_reward(config.gamma)
    env = rngym.RewardTransformWrapper(rngym.VecEnv(LogWrapper(base_env)), transform)
    action_space = base_env.action_space(params)
    discrete = isinstance(action_space, spaces.Discrete)
    return Environment(
        env=env,
        params=params,
        action_dim=action_space.n if discrete else int(np.prod(action_space.shape)),
        discrete=discrete,
        low=None if discrete else action_space.low,
        high=None if discrete else action_space.high,
        max_steps=int(params.max_steps_in_episode),
    )


def _flat(obs):
    return obs.reshape(obs.shape[0], -1).astype(jnp.float32)


def _env_reset(env: Environment, key, num_envs, stats_from=None):
    obs, state = env.env.reset(jax.random.split(key, num_envs), env.params, stats_from)
    return _flat(obs), state


def _env_step(env: Environment, key, state, action, update_stats):
    if not env.discrete:
        action = jnp.clip(action, env.low, env.high)
    keys = jax.random.split(key, action.shape[0])
    obs, state, reward, terminated, truncated, info = env.env.step(
        keys, state, action, env.params, update_stats
    )
    return _flat(obs), state, reward, terminated, truncated, _flat(info["final_observation"])


# --- Training -------------------------------------------------------------------------


class Runner(struct.PyTreeNode):
    """Everything a run carries between updates; saved whole in a checkpoint."""

    params: Any
    opt_state: Any
    # RewardWrapperState: the environments, the reward transform's state, and
    # the run's arm as its update_stats flag (False: statistics kept at the prior).
    env_state: Any
    obs: jax.Array
    key: jax.Array


class Metrics(NamedTuple):
    """Per update: the raw return of each environment's last completed episode.

    Averaged over the environments that have completed one (NaN before any has).
    """

    episode_return: jax.Array


class Transition(NamedTuple):
    """One step of every environment, as the rollout records it."""

    obs: jax.Array
    action: jax.Array
    log_prob: jax.Array
    value: jax.Array
    reward: jax.Array
    terminated: jax.Array
    done: jax.Array
    final_obs: jax.Array


class Sample(NamedTuple):
    """What the loss needs of a transition."""

    obs: jax.Array
    action: jax.Array
    log_prob: jax.Array
    value: jax.Array


def _network(config: PPOConfig, env: Environment) -> ActorCritic:
    return ActorCritic(env.action_dim, env.discrete, config.hidden_size)


def _optimizer(config: PPOConfig) -> optax.GradientTransformation:
    return optax.chain(
        optax.clip_by_global_norm(config.max_grad_norm),
        optax.adam(config.learning_rate, eps=1e-5),
    )


def init_runner(config: PPOConfig, env: Environment, key: jax.Array, normalize=True) -> Runner:
    """A fresh agent, optimizer, environments and normalizer for one seed.

    Args:
      config: the hyperparameters.
      env: ``make_env(config)``.
      key: the seed's PRNG key.
      normalize: boolean, may be traced. ``False`` freezes the statistics at
        their prior (mean 0, variance 1), so the agent sees raw rewards.

    Returns:
      The runner; ``runner.env_state.update_stats`` holds ``normalize``.
    """
    key, net_key, env_key = jax.random.split(key, 3)
    obs, env_state = _env_reset(env, env_key, config.num_envs)
    params = _network(config, env).init(net_key, obs)
    return Runner(
        params=params,
        opt_state=_optimizer(config).init(params),
        env_state=rngym.set_update_stats(env_state, normalize),
        obs=obs,
        key=key,
    )


@functools.lru_cache(maxsize=16)
def _jitted_init(config: PPOConfig):
    # Environments are built outside the trace: some gymnax constructors branch on arrays.
    env = make_env(config)
    return jax.jit(lambda key, normalize: init_runner(config, env, key, normalize))


def _arms(normalize: bool | Sequence[bool]) -> tuple[bool, ...]:
    arms = (normalize,) if isinstance(normalize, (bool, np.bool_)) else tuple(normalize)
    if not arms or not all(isinstance(arm, (bool, np.bool_)) for arm in arms):
        raise ValueError(
            f"normalize should be a bool or a non-empty sequence of bools, got {normalize!r}."
        )
    return tuple(bool(arm) for arm in arms)


def init_runners(
    config: PPOConfig, seed: int, num_seeds: int, normalize: bool | Sequence[bool] = True
) -> Runner:
    """Independent runners stacked on a leading axis: ``num_seeds`` for each arm.

    Args:
      config: the hyperparameters.
      seed: base seed; seed ``i`` of every arm starts from the same key, so
        the arms start from the same networks and environments.
      num_seeds: runs per arm.
      normalize: the arm, or a sequence of arms (``(True, False)`` for the
        comparison); runs are ordered arm by arm.

    Returns:
      The stacked runners, ``len(arms) * num_seeds`` of them.

    Raises:
      ValueError: if ``normalize`` is neither a bool nor a sequence of bools.
    """
    arms = _arms(normalize)
    init = _jitted_init(config)  # one call per run: a vmapped init deadlocks jaxlib's CPU QR
    keys = jax.random.split(jax.random.PRNGKey(seed), num_seeds)
    runs = [init(key, jnp.asarray(arm)) for arm in arms for key in keys]
    return jax.tree.map(lambda *leaves: jnp.stack(leaves), *runs)


def _runner_shapes(config: PPOConfig, num_runs: int) -> Runner:
    """Shapes and dtypes of ``num_runs`` stacked runners, without running anything."""
    keys = jax.ShapeDtypeStruct((num_runs, 2), jnp.uint32)
    flags = jax.ShapeDtypeStruct((num_runs,), jnp.bool_)
    return jax.eval_shape(jax.vmap(_jitted_init(config)), keys, flags)


def normalizes(runners: Runner) -> np.ndarray:
    """Per run of stacked ``runners``: ``True`` for the normalized arm, ``False`` for raw."""
    return np.asarray(runners.env_state.update_stats, bool)


def norm_state(runner: Runner):
    """The reward transform's state (statistics and tracked returns) inside a runner."""
    return rngym.get_transform_state(runner.env_state)


def _policy_step(env, network, params, obs, env_state, key, update_stats, greedy: bool):
    """Acts with the policy and steps the environments; shared by training and evaluation."""
    act_key, step_key = jax.random.split(key)
    policy, value = network.apply(params, obs)
    action = _mode(env.discrete, policy) if greedy else _sample(env.discrete, policy, act_key)
    next_obs, env_state, reward, terminated, truncated, final_obs = _env_step(
        env, step_key, env_state, action, update_stats
    )
    transition = Transition(
        obs=obs,
        action=action,
        log_prob=_log_prob(env.discrete, policy, action),
        value=value,
        reward=reward,
        terminated=terminated,
        done=terminated | truncated,
        final_obs=final_obs,
    )
    return next_obs, env_state, transition


def _advantages(config, traj: Transition, last_value, final_value):
    r"""Generalised advantage estimation, bootstrapping time-limit truncations.

    .. math::
      \delta_t = r_t + \gamma (1 - \text{term}_t) V'_{t+1} - V_t, \quad
      A_t = \delta_t + \gamma \lambda (1 - \text{done}_t) A_{t+1}

    where :math:`V'_{t+1}` is the value of the final observation on a done step
    and of the next observation otherwise.
    """
    next_value = jnp.concatenate([traj.value[1:], last_value[None]], axis=0)
    next_value = jnp.where(traj.done, final_value, next_value)
    delta = traj.reward + config.gamma * (1.0 - traj.terminated) * next_value - traj.value
    decay = config.gamma * config.gae_lambda * (1.0 - traj.done)

    def backward(advantage, x):
        delta_t, decay_t = x
        advantage = delta_t + decay_t * advantage
        return advantage, advantage

    _, advantages = jax.lax.scan(backward, jnp.zeros_like(last_value), (delta, decay), reverse=True)
    return advantages, advantages + traj.value


def _loss(config, env, network, params, batch: Sample, advantages, targets):
    policy, value = network.apply(params, batch.obs)
    log_prob = _log_prob(env.discrete, policy, batch.action)

    value_clipped = batch.value + jnp.clip(value - batch.value, -config.clip_eps, config.clip_eps)
    value_loss = 0.5 * jnp.maximum((value - targets) ** 2, (value_clipped - targets) ** 2).mean()

    ratio = jnp.exp(log_prob - batch.log_prob)
    advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    policy_loss = -jnp.minimum(
        ratio * advantages,
        jnp.clip(ratio, 1.0 - config.clip_eps, 1.0 + config.clip_eps) * advantages,
    ).mean()
    entropy = _entropy(env.discrete, policy).mean()
    return policy_loss + config.vf_coef * value_loss - config.ent_coef * entropy


def make_train(config: PPOConfig, num_updates: int | None = None) -> Callable[..., tuple]:
    """The training function of one seed: ``train(runner, first_update=0) -> (runner, Metrics)``.

    It runs ``num_updates`` PPO updates (default ``config.num_updates``, the
    whole run) in one ``lax.scan``, numbered from ``first_update`` (a traced
    integer: where the chunk sits in the run, for the learning-rate schedule),
    and is meant to be wrapped in ``jax.jit(jax.vmap(..., in_axes=(0, None)))``.
    :func:`train` calls it chunk after chunk to print progress in between.
    """
    config.validate()
    env = make_env(config)
    network = _network(config, env)
    optimizer = _optimizer(config)
    total_updates = config.num_updates
    num_updates = total_updates if num_updates is None else num_updates
    minibatch_size = config.batch_size // config.num_minibatches
    grad_fn = jax.grad(lambda p, *a: _loss(config, env, network, p, *a))

    def update(runner: Runner, index):
        # Collect num_steps transitions from every environment (statistics updated).
        def rollout_step(runner, _):
            key, step_key = jax.random.split(runner.key)
            obs, env_state, transition = _policy_step(
                env,
                network,
                runner.params,
                runner.obs,
                runner.env_state,
                step_key,
                update_stats=True,
                greedy=False,
            )
            return runner.replace(env_state=env_state, obs=obs, key=key), transition

        runner, traj = jax.lax.scan(rollout_step, runner, None, config.num_steps)
        _, last_value = network.apply(runner.params, runner.obs)
        _, final_value = network.apply(runner.params, traj.final_obs)
        advantages, targets = _advantages(config, traj, last_value, final_value)
        samples = Sample(traj.obs, traj.action, traj.log_prob, traj.value)

        # Learning rate annealed linearly to 0 over this run (as a multiplier of
        # Adam's step, so a restored optimizer state carries on unchanged).
        lr_scale = 1.0 - index / total_updates

        def epoch(carry, _):
            params, opt_state, key = carry
            key, perm_key = jax.random.split(key)
            perm = jax.random.permutation(perm_key, config.batch_size)
            data = jax.tree.map(
                lambda x: x.reshape((config.batch_size, *x.shape[2:]))[perm].reshape(
                    (config.num_minibatches, minibatch_size, *x.shape[2:])
                ),
                (samples, advantages, targets),
            )

            def minibatch(carry, batch):
                params, opt_state = carry
                grads = grad_fn(params, *batch)
                updates, opt_state = optimizer.update(grads, opt_state, params)
                updates = jax.tree.map(lambda u: lr_scale * u, updates)
                return (optax.apply_updates(params, updates), opt_state), None

            (params, opt_state), _ = jax.lax.scan(minibatch, (params, opt_state), data)
            return (params, opt_state, key), None

        key, epoch_key = jax.random.split(runner.key)
        (params, opt_state, _), _ = jax.lax.scan(
            epoch, (runner.params, runner.opt_state, epoch_key), None, config.update_epochs
        )
        runner = runner.replace(params=params, opt_state=opt_state, key=key)

        # The return of each environment's last completed episode (LogWrapper's record).
        log = runner.env_state.env_state  # LogWrapper's state, batched
        valid = log.returned_episode_valid
        episode_return = jnp.sum(jnp.where(valid, log.returned_episode_returns, 0.0)) / valid.sum()
        return runner, Metrics(episode_return)

    def train(runner: Runner, first_update=0):
        return jax.lax.scan(update, runner, first_update + jnp.arange(num_updates))

    return train


def make_evaluate(config: PPOConfig) -> Callable:
    """``evaluate(runner, key) -> (returns, transform_state)`` for one seed.

    Resets ``config.num_eval_envs`` fresh environments keeping the runner's
    learned statistics (``reset(..., stats_from=...)``), runs one full episode
    in each with the policy's mode through the same step as training but with
    ``update_stats=False``, a traced flag, and returns the raw episode returns
    and the final transform state, whose statistics equal the runner's.
    """
    env = make_env(config)
    network = _network(config, env)

    def evaluate(runner: Runner, key):
        reset_key, key = jax.random.split(key)
        obs, env_state = _env_reset(env, reset_key, config.num_eval_envs, norm_state(runner))
        update_stats = jnp.zeros((), bool)

        def step(carry, _):
            obs, env_state, key, total, running = carry
            key, step_key = jax.random.split(key)
            obs, env_state, transition = _policy_step(
                env, network, runner.params, obs, env_state, step_key, update_stats, greedy=True
            )
            # LogWrapper's return of the episode that ended on this step, first episode only.
            ended = running & transition.done
            total = jnp.where(ended, env_state.env_state.returned_episode_returns, total)
            return (obs, env_state, key, total, running & ~transition.done), None

        running = jnp.ones(config.num_eval_envs, bool)
        init = (obs, env_state, key, jnp.zeros(config.num_eval_envs), running)
        (_, env_state, _, total, _), _ = jax.lax.scan(step, init, None, env.max_steps)
        return total, rngym.get_transform_state(env_state)

    return evaluate


# --- Host-side driver -----------------------------------------------------------------


def log_every(config: PPOConfig) -> int:
    """Updates between progress lines: ``ceil(num_updates / log_lines)``."""
    return -(-config.num_updates // config.log_lines)


def chunk_size(config: PPOConfig) -> int:
    """Updates per jitted call.

    The largest divisor of ``num_updates`` that is at most :func:`log_every`,
    so one compiled chunk covers the run exactly.
    """
    return max(d for d in range(1, log_every(config) + 1) if config.num_updates % d == 0)


def by_arm(values: np.ndarray, normalized: np.ndarray) -> dict[str, np.ndarray]:
    """``values`` (runs first) split by arm: ``{"normalized": ..., "raw": ...}``, arms present."""
    return {
        label: values[normalized == arm]
        for arm, label in ARM_LABELS.items()
        if np.any(normalized == arm)
    }


def mean_std(values: np.ndarray) -> str:
    """``"mean ± std"`` of the finite ``values`` (``"n/a"`` when none is finite)."""
    finite = values[np.isfinite(values)]
    return f"{finite.mean():8.2f} ± {finite.std():6.2f}" if finite.size else f"{'n/a':>17s}"


def progress_line(
    config: PPOConfig, update: int, returns: np.ndarray, normalized: np.ndarray, rate: float
) -> str:
    """``update u/U | steps s | normalized m ± s | raw m ± s | r steps/s``.

    Args:
      config: the run's hyperparameters.
      update: updates done.
      returns: the latest episode return of each run.
      normalized: each run's arm (:func:`normalizes`).
      rate: environment steps per second over all runs.

    Returns:
      The line, with the mean ± std over seeds of each arm present.
    """
    arms = " | ".join(
        f"{label} {mean_std(values)}" for label, values in by_arm(returns, normalized).items()
    )
    return (
        f"update {update:5d}/{config.num_updates} | steps {update * config.batch_size:>10,d} | "
        f"{arms} | {rate:10,.0f} steps/s"
    )


@functools.lru_cache(maxsize=16)
def _compiled_train(config: PPOConfig, num_runs: int):
    """``jit(vmap(train))`` of one chunk, compiled once per configuration and number of runs."""
    runners = _runner_shapes(config, num_runs)
    train = make_train(config, chunk_size(config))
    first = jax.ShapeDtypeStruct((), jnp.int32)
    return jax.jit(jax.vmap(train, in_axes=(0, None))).lower(runners, first).compile()


@functools.lru_cache(maxsize=16)
def _compiled_evaluate(config: PPOConfig, num_runs: int):
    runners = _runner_shapes(config, num_runs)
    keys = jax.ShapeDtypeStruct((num_runs, 2), jnp.uint32)
    return jax.jit(jax.vmap(make_evaluate(config))).lower(runners, keys).compile()


class RunResult(NamedTuple):
    """What :func:`train` returns."""

    runners: Runner
    metrics: Metrics  # arrays of shape (runs, updates)
    compile_s: float  # 0 when this configuration was compiled before in the process
    train_s: float


def train(config: PPOConfig, runners: Runner, print_fn: Callable | None = None) -> RunResult:
    """Trains stacked ``runners`` (seeds and arms) for ``config.total_steps`` steps each.

    The run is one compiled function called chunk after chunk (see
    :func:`chunk_size`), so the host reads the metrics between chunks:
    ``print_fn`` receives a :func:`progress_line` about every
    ``num_updates / log_lines`` updates and after the last. Progress needs no
    host callback inside the compiled loop.
    """
    num_runs = int(runners.key.shape[0])
    normalized = normalizes(runners)
    start = time.perf_counter()
    compiled = _compiled_train(config.validate(), num_runs)
    compile_s = time.perf_counter() - start
    chunk, every = chunk_size(config), log_every(config)
    start = time.perf_counter()
    returns = []
    for first in range(0, config.num_updates, chunk):
        runners, metrics = compiled(runners, jnp.int32(first))
        returns.append(metrics.episode_return)
        done = first + chunk
        crossed = done // every > first // every or done == config.num_updates
        if print_fn is not None and crossed:
            latest = np.asarray(metrics.episode_return[:, -1])  # waits for this chunk
            rate = done * config.batch_size * num_runs / max(time.perf_counter() - start, 1e-9)
            print_fn(progress_line(config, done, latest, normalized, rate))
    runners = jax.block_until_ready(runners)
    metrics = Metrics(jnp.concatenate(returns, axis=1))
    return RunResult(runners, metrics, compile_s, time.perf_counter() - start)


def evaluate(config: PPOConfig, runners: Runner, seed: int = 0):
    """Evaluates every run (see :func:`make_evaluate`).

    Seed ``i`` of each arm evaluates on the same episodes (the same key).

    Returns:
      ``(returns, transform_states)``: raw episode returns of shape
      ``(runs, num_eval_envs)`` and the transform states after evaluation,
      whose statistics equal those of ``runners``.
    """
    normalized = normalizes(runners)
    index_in_arm = np.array([np.sum(normalized[:i] == arm) for i, arm in enumerate(normalized)])
    keys = jax.random.split(jax.random.PRNGKey(seed), index_in_arm.max() + 1)[index_in_arm]
    return _compiled_evaluate(config.validate(), normalized.size)(runners, keys)


# --- Checkpoints ----------------------------------------------------------------------


def _metadata(config: PPOConfig, num_runs: int) -> dict[str, Any]:
    return {**dataclasses.asdict(config), "num_runs": num_runs}


def _write_atomically(path: str, data: bytes) -> None:
    with open(path + ".tmp", "wb") as f:
        f.write(data)
    os.replace(path + ".tmp", path)


def save_checkpoint(directory: str, config: PPOConfig, runners: Runner) -> str:
    """Writes agents, optimizers, environments and normalizer states to ``directory``.

    ``checkpoint.msgpack`` is :func:`rewardnorm_jax.save_state` of the stacked
    runners with the config and the number of runs as metadata;
    ``config.json`` repeats them in readable form, so that
    :func:`load_checkpoint` can build the template. Each file is written to a
    temporary name and renamed, so an interrupted save never leaves a torn file.

    Returns:
      The path of ``checkpoint.msgpack``.
    """
    os.makedirs(directory, exist_ok=True)
    metadata = _metadata(config, int(runners.key.shape[0]))
    path = os.path.join(directory, CHECKPOINT_FILE)
    _write_atomically(os.path.join(directory, CONFIG_FILE), json.dumps(metadata).encode())
    _write_atomically(path, rn.save_state(jax.device_get(runners), metadata))
    return path


def load_checkpoint(directory: str) -> tuple[PPOConfig, Runner]:
    """Reads a checkpoint written by :func:`save_checkpoint`; arrays come back bit-exact.

    Raises:
      FileNotFoundError: if ``directory`` holds no checkpoint.
      ValueError: if a file is corrupt, or the state's layout or metadata
        differs from what ``config.json`` describes (the message lists each
        difference).
    """
    with open(os.path.join(directory, CONFIG_FILE)) as f:
        metadata = json.load(f)
    if not isinstance(metadata, dict) or not isinstance(metadata.get("num_runs"), int):
        raise ValueError(f"{CONFIG_FILE} in {directory} holds no config and number of runs.")
    fields = {field.name for field in dataclasses.fields(PPOConfig)}
    config = PPOConfig(**{k: v for k, v in metadata.items() if k in fields}).validate()
    shapes = _runner_shapes(config, metadata["num_runs"])
    template = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
    with open(os.path.join(directory, CHECKPOINT_FILE), "rb") as f:
        data = f.read()
    return config, rn.load_state(template, data, _metadata(config, metadata["num_runs"]))
