"""PPO on a gymnax environment, with rewards normalized by rewardnorm_jax or left raw.

A single-file PPO in the style of PureJaxRL's ``ppo.py``: a Flax actor-critic,
Optax's Adam, and the whole run (rollouts, generalised advantage estimation,
minibatch epochs) in ``lax.scan``, to ``jax.jit`` once and ``jax.vmap`` over seeds.

``PPOConfig.normalize`` is the switch: ``True`` passes every reward through
:func:`rewardnorm_jax.normalize_reward` (divided by the running standard
deviation of the discounted return, Gymnasium's semantics), ``False`` through
the identity. The statistics, shared by the ``num_envs`` environments, live in
the environment state inside the :class:`Runner`, so saving the runner saves
them; evaluation starts fresh environments from them and keeps them frozen.

Example:
  >>> config = PPOConfig(normalize=False)  # PureJaxRL's CartPole-v1 settings, raw rewards
  >>> config.num_updates, config.batch_size  # updates of num_envs * num_steps steps
  (976, 512)

  Eight seeds at once (``python -m rewardnorm_jax.demo`` trains both settings)::

    init = jax.jit(make_init(config))  # one call per seed: a vmapped init can deadlock CPU QR
    runners = [init(key) for key in jax.random.split(jax.random.PRNGKey(0), 8)]
    runners = jax.tree.map(lambda *leaves: jnp.stack(leaves), *runners)
    runners, episode_returns = jax.jit(jax.vmap(make_train(config)))(runners)
"""

import dataclasses
import functools
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from flax.linen.initializers import orthogonal

import rewardnorm_jax as rn
from rewardnorm_jax._src.core.extras import requires

with requires("demo", __name__):
    import gymnax
    import optax
    from gymnax.environments import spaces
    from gymnax.wrappers.purerl import LogWrapper

    import rewardnorm_jax.gymnax as rngym


@dataclasses.dataclass(frozen=True)
class PPOConfig:
    """Hyperparameters of a run (the defaults: PureJaxRL's for CartPole-v1)."""

    env_name: str = "CartPole-v1"  # a gymnax environment with Discrete or Box actions
    normalize: bool = True  # rewards through rewardnorm_jax.normalize_reward, else raw
    total_steps: int = 500_000  # environment steps of the run
    num_envs: int = 4
    num_steps: int = 128  # rollout length per update, per environment
    update_epochs: int = 4
    num_minibatches: int = 4
    learning_rate: float = 2.5e-4  # annealed linearly to 0 over the run
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_eps: float = 0.2
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    hidden_size: int = 64
    num_eval_envs: int = 32

    @property
    def batch_size(self) -> int:
        """Environment steps per update: ``num_envs * num_steps``."""
        return self.num_envs * self.num_steps

    @property
    def num_updates(self) -> int:
        """Updates in the run: ``total_steps // batch_size``."""
        return self.total_steps // self.batch_size


# For Box actions (Pendulum-v1): more environments, more and smaller minibatch steps, a larger
# learning rate, a shorter horizon, no entropy bonus; 100 updates (normalized runs balance it).
PENDULUM = PPOConfig(
    env_name="Pendulum-v1",
    total_steps=204_800,
    num_envs=16,
    update_epochs=10,
    num_minibatches=16,
    learning_rate=1e-3,
    gamma=0.95,
    ent_coef=0.0,
)


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
                x = nn.tanh(nn.Dense(self.hidden_size, kernel_init=orthogonal(np.sqrt(2)))(x))
            return nn.Dense(out, kernel_init=orthogonal(scale))(x)

        policy = mlp(obs, self.action_dim, 0.01)
        if not self.discrete:
            log_std = self.param("log_std", nn.initializers.zeros, (self.action_dim,))
            policy = (policy, jnp.broadcast_to(log_std, policy.shape))
        value = mlp(obs, 1, 1.0)[..., 0]
        return policy, value


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


class Environment(NamedTuple):
    """The batched environments, their parameters and their action space."""

    env: Any  # RewardTransformWrapper(VecEnv(LogWrapper(gymnax env)), transform)
    params: Any
    space: Any  # gymnax's Discrete or Box action space
    discrete: bool


def make_env(config: PPOConfig) -> Environment:
    """``num_envs`` copies of the environment, stepped as one, rewards normalized or raw."""
    env, params = gymnax.make(config.env_name)
    if config.normalize:  # one set of statistics, shared by the batch of environments
        transform = rn.normalize_reward(config.gamma)
    else:  # the environment's own rewards
        transform = rn.transform_reward(lambda reward: reward)
    wrapped = rngym.RewardTransformWrapper(rngym.VecEnv(LogWrapper(env)), transform)
    space = env.action_space(params)
    return Environment(wrapped, params, space, isinstance(space, spaces.Discrete))


def flat(obs):
    """Observations as ``(num_envs, features)`` float32 rows."""
    return obs.reshape(obs.shape[0], -1).astype(jnp.float32)


class Runner(struct.PyTreeNode):
    """What a run carries from update to update; saving it saves the whole run."""

    params: Any
    opt_state: Any
    env_state: Any  # the environments and the reward transform's state (statistics)
    obs: jax.Array
    key: jax.Array


class Transition(NamedTuple):
    """One step of every environment."""

    obs: jax.Array
    action: jax.Array
    log_prob: jax.Array
    value: jax.Array
    reward: jax.Array  # normalized or raw: what the agent learns from
    terminated: jax.Array
    done: jax.Array  # terminated or truncated
    final_obs: jax.Array  # the last observation of an episode that ended on this step


def agent(config: PPOConfig, env: Environment):
    """The network and the optimizer: Adam after clipping the gradients' global norm."""
    action_dim = env.space.n if env.discrete else int(np.prod(env.space.shape))
    network = ActorCritic(action_dim, env.discrete, config.hidden_size)
    clip = optax.clip_by_global_norm(config.max_grad_norm)
    return network, optax.chain(clip, optax.adam(config.learning_rate, eps=1e-5))


def act_and_step(env: Environment, network, params, obs, state, key, *, greedy, update_stats):
    """Acts with the policy and steps the environments: ``(next_obs, state, transition)``."""
    act_key, step_key = jax.random.split(key)
    policy, value = network.apply(params, obs)
    if env.discrete:
        action = jnp.argmax(policy, -1) if greedy else jax.random.categorical(act_key, policy)
        clipped = action
    else:
        mean, log_std = policy
        noise = jax.random.normal(act_key, mean.shape)
        action = mean if greedy else mean + jnp.exp(log_std) * noise
        clipped = jnp.clip(action, env.space.low, env.space.high)
    keys = jax.random.split(step_key, action.shape[0])
    next_obs, state, reward, terminated, truncated, info = env.env.step(
        keys, state, clipped, env.params, update_stats
    )
    log_prob = _log_prob(env.discrete, policy, action)
    done, final_obs = terminated | truncated, flat(info["final_observation"])
    transition = Transition(obs, action, log_prob, value, reward, terminated, done, final_obs)
    return flat(next_obs), state, transition


def make_init(config: PPOConfig):
    """``init(key) -> Runner``: a fresh agent, optimizer, environments and reward transform."""
    env = make_env(config)  # built outside the trace: some gymnax constructors branch on arrays
    network, optimizer = agent(config, env)

    def init(key):
        key, net_key, env_key = jax.random.split(key, 3)
        obs, env_state = env.env.reset(jax.random.split(env_key, config.num_envs), env.params)
        params = network.init(net_key, flat(obs))
        return Runner(params, optimizer.init(params), env_state, flat(obs), key)

    return init


def gae(config: PPOConfig, traj: "Transition", value, last_value, final_value):
    """``(advantages, targets)`` by generalised advantage estimation over a rollout.

    ``value``, ``last_value`` (after the rollout) and ``final_value`` (of each
    step's final observation) are in the units of the rewards. An episode cut
    by the time limit (truncated, not terminated) is bootstrapped with the
    value of its final observation.
    """
    next_value = jnp.concatenate([value[1:], last_value[None]], axis=0)
    next_value = jnp.where(traj.done, final_value, next_value)
    delta = traj.reward + config.gamma * (1.0 - traj.terminated) * next_value - value
    decay = config.gamma * config.gae_lambda * (1.0 - traj.done)

    def backward(advantage, delta_decay):
        advantage = delta_decay[0] + delta_decay[1] * advantage
        return advantage, advantage

    _, advantages = jax.lax.scan(backward, jnp.zeros_like(last_value), (delta, decay), reverse=True)
    return advantages, advantages + value


def ppo_loss(config: PPOConfig, network, discrete: bool, params, minibatch) -> jax.Array:
    """PPO's clipped loss of ``(obs, action, old_log_prob, old_value, advantages, targets)``.

    The value head's outputs, ``old_value`` and ``targets`` are in one unit (the
    rewards', or a normalized one such as PopArt's).
    """
    obs, action, old_log_prob, old_value, advantages, targets = minibatch
    policy, value = network.apply(params, obs)
    log_prob = _log_prob(discrete, policy, action)
    value_clipped = old_value + jnp.clip(value - old_value, -config.clip_eps, config.clip_eps)
    value_losses = jnp.maximum((value - targets) ** 2, (value_clipped - targets) ** 2)
    value_loss = 0.5 * value_losses.mean()
    ratio = jnp.exp(log_prob - old_log_prob)
    advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    policy_loss = -jnp.minimum(
        ratio * advantages,
        jnp.clip(ratio, 1.0 - config.clip_eps, 1.0 + config.clip_eps) * advantages,
    ).mean()
    entropy = _entropy(discrete, policy).mean()
    return policy_loss + config.vf_coef * value_loss - config.ent_coef * entropy


def update_epochs(config: PPOConfig, optimizer, grad_fn, learner, batch, key, index):
    """``(params, opt_state)`` after ``update_epochs`` passes over shuffled minibatches.

    ``learner`` is ``(params, opt_state)``, ``batch`` a tuple of ``(num_steps,
    num_envs, ...)`` arrays, ``grad_fn(params, minibatch)`` the gradient of the
    loss. The learning rate falls linearly to 0 over the run (``index`` is the
    update's number), scaling Adam's step, so a restored optimizer carries on.
    """
    minibatch_size = config.batch_size // config.num_minibatches
    lr_scale = 1.0 - index / config.num_updates

    def update_epoch(carry, _):
        params, opt_state, key = carry
        key, perm_key = jax.random.split(key)
        perm = jax.random.permutation(perm_key, config.batch_size)
        minibatches = jax.tree.map(
            lambda x: x.reshape((config.batch_size, *x.shape[2:]))[perm].reshape(
                (config.num_minibatches, minibatch_size, *x.shape[2:])
            ),
            batch,
        )

        def update_minibatch(carry, minibatch):
            params, opt_state = carry
            updates, opt_state = optimizer.update(grad_fn(params, minibatch), opt_state, params)
            updates = jax.tree.map(lambda u: lr_scale * u, updates)
            return (optax.apply_updates(params, updates), opt_state), None

        (params, opt_state), _ = jax.lax.scan(update_minibatch, (params, opt_state), minibatches)
        return (params, opt_state, key), None

    (params, opt_state, _), _ = jax.lax.scan(
        update_epoch, (*learner, key), None, config.update_epochs
    )
    return params, opt_state


def make_train(config: PPOConfig, num_updates: int | None = None):
    """``train(runner, first_update=0) -> (runner, episode_returns)`` for one seed.

    Runs ``num_updates`` PPO updates (default: the whole run) in one
    ``lax.scan``, numbered from ``first_update`` (for the learning rate's
    schedule; may be traced), so a run may also be trained in chunks.
    ``episode_returns[u]``: the mean raw return of each environment's last
    completed episode after update ``u`` (NaN until one has completed).
    """
    env = make_env(config)
    network, optimizer = agent(config, env)
    num_updates = config.num_updates if num_updates is None else num_updates

    grad_fn = jax.grad(functools.partial(ppo_loss, config, network, env.discrete))

    env_step = functools.partial(act_and_step, env, network, greedy=False, update_stats=True)

    def update(runner: Runner, index):
        # COLLECT TRAJECTORIES
        def step(runner, _):
            key, step_key = jax.random.split(runner.key)
            obs, state, transition = env_step(runner.params, runner.obs, runner.env_state, step_key)
            return runner.replace(env_state=state, obs=obs, key=key), transition

        runner, traj = jax.lax.scan(step, runner, None, config.num_steps)

        # CALCULATE ADVANTAGES (GAE)
        _, last_value = network.apply(runner.params, runner.obs)
        _, final_value = network.apply(runner.params, traj.final_obs)
        advantages, targets = gae(config, traj, traj.value, last_value, final_value)

        # UPDATE NETWORK
        batch = (traj.obs, traj.action, traj.log_prob, traj.value, advantages, targets)
        key, epoch_key = jax.random.split(runner.key)
        params, opt_state = update_epochs(
            config, optimizer, grad_fn, (runner.params, runner.opt_state), batch, epoch_key, index
        )
        runner = runner.replace(params=params, opt_state=opt_state, key=key)

        # METRIC: the raw return of each environment's last completed episode (LogWrapper's).
        log = runner.env_state.env_state
        valid = log.returned_episode_valid
        episode_return = jnp.sum(jnp.where(valid, log.returned_episode_returns, 0.0)) / valid.sum()
        return runner, episode_return

    def train(runner: Runner, first_update=0):
        return jax.lax.scan(update, runner, first_update + jnp.arange(num_updates))

    return train


def make_evaluate(config: PPOConfig):
    """``evaluate(runner, key) -> (episode_returns, transform_state)`` for one seed.

    Resets ``num_eval_envs`` fresh environments keeping the runner's statistics
    (``reset(..., stats_from=...)``) and runs one episode in each with the
    policy's mode and the statistics frozen (``update_stats=False``). Returns
    each episode's raw return and the transform state, statistics unchanged.
    """
    env = make_env(config)
    network, _ = agent(config, env)
    env_step = functools.partial(act_and_step, env, network, greedy=True, update_stats=False)

    def evaluate(runner: Runner, key):
        reset_key, key = jax.random.split(key)
        keys = jax.random.split(reset_key, config.num_eval_envs)
        stats = rngym.get_transform_state(runner.env_state)  # kept, its returns restart
        obs, env_state = env.env.reset(keys, env.params, stats_from=stats)

        def step(carry, _):
            obs, env_state, key, total, running = carry
            key, step_key = jax.random.split(key)
            obs, env_state, transition = env_step(runner.params, obs, env_state, step_key)
            # LogWrapper's return of the episode that ended on this step, first episode only.
            ended = running & transition.done
            total = jnp.where(ended, env_state.env_state.returned_episode_returns, total)
            return (obs, env_state, key, total, running & ~transition.done), None

        running = jnp.ones(config.num_eval_envs, bool)
        carry = (flat(obs), env_state, key, jnp.zeros(config.num_eval_envs), running)
        max_steps = int(env.params.max_steps_in_episode)
        (_, env_state, _, total, _), _ = jax.lax.scan(step, carry, None, max_steps)
        return total, rngym.get_transform_state(env_state)

    return evaluate
