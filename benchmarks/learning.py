"""Which reward transform, when: small agents trained on a CPU with each reward transform.

Every case below trains one agent with each reward transform, its seeds
vmapped inside one jitted program per (case, transform) (seed ``i`` starts from
the same network and environments under every transform), and evaluates the
greedy policy at 20 evenly spaced points of training on fresh environments,
summing the environment's own rewards (never the transformed ones). It prints,
per case and transform, the mean ± std over seeds of the final evaluation
return and of the learning curve's mean (its area divided by its length), and
the training steps until the evaluation return first reaches the case's
threshold (mean over the seeds that reach it); it writes the learning curves (a
row per case, a line per transform, one standard deviation over seeds shaded,
within the seeds' range) to ``--plot``, and prints the command, the versions and
the wall time of every case. Seeds: 20 for Catch (a run takes a second), 10 for
DeepSea (a run either finds the reward or never does), 5 for the others.

Transforms (``import rewardnorm_jax as rn``):

* ``none``: the environment's rewards;
* ``normalize_reward``: ``rn.normalize_reward(gamma)``, Gymnasium's semantics, the agent's
  discount;
* ``clip``: ``rn.clip_reward(-10, 10)``;
* ``symlog``: ``rn.symlog_reward()``;
* ``percentile``: ``rn.percentile_scale_reward(gamma)``, DreamerV3's scale (moving 5th to
  95th percentile range of the discounted return across the batch of environments, rate
  0.01, divisor at least 1);
* ``popart``: raw rewards; the critic (Q-function) outputs PopArt-normalized values
  (``rn.popart``), learns normalized targets, and its last layer is rescaled at each update
  of the statistics so that its unnormalized outputs are preserved.

For Q-learning the transformed reward enters the TD target; for PPO it is what GAE sees.

Cases:

1. ``catch``: rlax's ``examples/pop_art.py`` (whose docstring says PopArt "learns faster"):
   bsuite Catch (gymnax ``Catch-bsuite``) with every reward multiplied by 10,000, online
   Q-learning (one transition per update, no replay, no target network), epsilon-greedy
   0.01, discount 0.99, Adam 0.005, one hidden layer of 50 units, 1000 training episodes,
   evaluation every 50 episodes (returns in the x10,000 units, as rlax prints them);
   PopArt with step size 3e-3, scale bounds [1e-5, 1e5] and one scale shared by all
   action values. A single environment: the percentile range of one return is 0, so
   ``percentile`` divides by 1 there and is ``none``.
2. ``pendulum``: PPO on gymnax ``Pendulum-v1`` with the demo's settings
   (``rewardnorm_jax.examples.ppo.PENDULUM``: 16 environments, 204,800 steps).
3. ``deepsea``: PPO on bsuite DeepSea (gymnax ``DeepSea-bsuite``, size 10): a reward of 1
   for reaching the bottom-right corner, a cost of 0.001 per step to the right, nothing
   else; PureJaxRL's CartPole settings (``PPOConfig()``), 4 environments, 122,880 steps.
4. ``growing``: PPO on gymnax ``CartPole-v1`` (PureJaxRL's settings) whose reward is
   multiplied by a factor growing geometrically from 1 to 1000 over the run (a
   :class:`ScaleReward` wrapper), 491,520 steps; evaluation returns are in CartPole's
   unscaled units. The statistics of ``normalize_reward`` and ``popart`` lag the scale.

PPO's PopArt learns from each update's ``num_envs * num_steps`` targets at once, with
step size ``POPART_PPO_RATE / (num_envs * num_steps)`` per target.

Usage (from the repository root; ``pip install -e ".[demo]"``)::

    python -m benchmarks.learning --markdown          # the recorded run (about 7 min on 2 cores)
    python -m benchmarks.learning --full --markdown   # twice the seeds, 2.5x longer PPO runs
    python -m benchmarks.learning --smoke             # tiny runs, 2 seeds (CI; 24 compilations)
    python -m benchmarks.learning --cases catch --transforms none popart --seeds 3

The recorded run writes ``docs/_static/learning.png``; ``--plot PATH`` elsewhere, ``--plot ''``
none (``--smoke`` writes none unless given a path).
"""

import argparse
import dataclasses
import functools
import math
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, cast

import flax.linen as nn
import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct
from gymnax.environments import spaces
from gymnax.wrappers.purerl import GymnaxWrapper

import rewardnorm_jax as rn
import rewardnorm_jax.gymnax as rngym
from benchmarks._timing import command_line, environment, markdown_table, plain_table
from rewardnorm_jax.examples import ppo

PACKAGES = ("jax", "jaxlib", "gymnax", "flax", "optax")
TRANSFORMS = ("none", "normalize_reward", "clip", "symlog", "percentile", "popart")
FAST_COMPILE: dict[str, str | bool] = {"xla_backend_optimization_level": "0"}  # --smoke
POPART_PPO_RATE = 0.1  # PPO: PopArt's step size times the targets of one update
PPO_VALUE_HEAD = "Dense_5"  # ppo.ActorCritic's last value layer
Q_HEAD = "Dense_1"  # QNetwork's last layer
DEEPSEA_SIZE = 10
DEEPSEA_STEPS = 122_880  # PPO steps on DeepSea (default mode)


# --- Reward transforms and the critic's value scale ------------------------------------


def reward_transform(name: str, gamma: float) -> rn.RewardTransform:
    """The reward transform named ``name``; ``popart`` leaves rewards raw."""
    if name in ("none", "popart"):
        return rn.transform_reward(lambda reward: reward)
    if name == "normalize_reward":
        return rn.normalize_reward(gamma)
    if name == "clip":
        return rn.clip_reward(-10.0, 10.0)
    if name == "symlog":
        return rn.symlog_reward()
    if name == "percentile":
        return rn.percentile_scale_reward(gamma)
    raise ValueError(f"unknown transform {name!r}; valid names: {', '.join(TRANSFORMS)}.")


class Critic(NamedTuple):
    """How a critic's outputs map to returns: PopArt-normalized (``popart``) or as they are."""

    popart: rn.PopArt | None  # None: a critic that outputs returns
    head: str  # the name of the critic's last Dense layer in the parameters

    def init(self) -> Any:
        return None if self.popart is None else self.popart.init()

    def unnormalize(self, state, values: jax.Array) -> jax.Array:
        return values if self.popart is None else self.popart.unnormalize(state, values)

    def normalize(self, state, values: jax.Array) -> jax.Array:
        return values if self.popart is None else self.popart.normalize(state, values)

    def learn(self, params, state, targets: jax.Array) -> tuple[Any, Any]:
        """PopArt: update the statistics, preserve the head's outputs; otherwise nothing."""
        if self.popart is None:
            return params, state
        layers = params["params"]
        head, state = self.popart.step(layers[self.head], state, targets.reshape(-1))
        return {**params, "params": {**layers, self.head: head}}, state


def make_critic(transform: str, head: str, step_size: float) -> Critic:
    """A PopArt critic (one scale for all outputs) for ``popart``, else a plain one."""
    if transform != "popart":
        return Critic(None, head)
    return Critic(rn.popart(step_size=step_size, scale_lb=1e-5, scale_ub=1e5), head)


# --- Environments ------------------------------------------------------------------------


class ScaleRewardState(struct.PyTreeNode):
    env_state: Any
    steps: jax.Array  # steps this environment has taken since its first reset


class ScaleReward(GymnaxWrapper):
    """Multiplies rewards by ``start * (end / start) ** min(t / steps, 1)`` at step ``t``."""

    def __init__(self, env, start: float, end: float, steps: int):
        super().__init__(env)
        self.start, self.end, self.steps = start, end, steps

    def factor(self, t: jax.Array) -> jax.Array:
        fraction = jnp.minimum(t / self.steps, 1.0)
        return self.start * (self.end / self.start) ** fraction

    def reset(self, key, params=None):
        obs, env_state = self._env.reset(key, params)
        return obs, ScaleRewardState(env_state, jnp.zeros((), jnp.int32))

    def step(self, key, state, action, params=None):
        obs, env_state, reward, terminated, truncated, info = self._env.step(
            key, state.env_state, action, params
        )
        reward = reward * self.factor(state.steps)
        return (
            obs,
            ScaleRewardState(env_state, state.steps + 1),
            reward,
            terminated,
            truncated,
            info,
        )


@dataclasses.dataclass(frozen=True)
class QConfig:
    """Online Q-learning as rlax's ``examples/pop_art.py``."""

    train_episodes: int = 1000
    evaluate_every: int = 50  # episodes
    episode_steps: int = 9  # Catch's ball falls from row 0 to row 9 in every episode
    hidden_size: int = 50
    epsilon: float = 0.01
    gamma: float = 0.99
    learning_rate: float = 0.005
    popart_step_size: float = 3e-3

    @property
    def num_evals(self) -> int:
        return self.train_episodes // self.evaluate_every


@dataclasses.dataclass(frozen=True)
class Case:
    """An environment, an agent and how its evaluation returns are read."""

    name: str
    title: str
    env_name: str
    agent: ppo.PPOConfig | QConfig
    threshold: float  # steps to the first evaluation return >= threshold
    eval_envs: int
    eval_steps: int  # steps of each evaluation episode (at least the episode's length)
    env_kwargs: tuple[tuple[str, Any], ...] = ()
    reward_scale: tuple[float, float] = (1.0, 1.0)  # factor at the start and end of the run
    report_scale: float = 1.0  # evaluation returns: the base environment's times this
    num_evals: int = 20

    @property
    def gamma(self) -> float:
        return self.agent.gamma

    @property
    def num_envs(self) -> int:
        return 1 if isinstance(self.agent, QConfig) else self.agent.num_envs

    @property
    def total_steps(self) -> int:
        """Environment steps per run, over all of its environments."""
        if isinstance(self.agent, QConfig):
            return self.agent.train_episodes * self.agent.episode_steps
        return self.agent.total_steps

    @property
    def eval_points(self) -> np.ndarray:
        """The training steps (Catch: episodes) after which each evaluation runs."""
        done = np.arange(1, self.num_evals + 1) / self.num_evals
        if isinstance(self.agent, QConfig):
            return np.round(done * self.agent.train_episodes).astype(int)
        return np.round(done * self.total_steps).astype(int)

    def base_env(self):
        return gymnax.make(self.env_name, **dict(self.env_kwargs))


def make_env(case: Case, transform: str) -> ppo.Environment:
    """The case's environments, rewards scaled, then transformed; stepped as one batch."""
    env, params = case.base_env()
    scaled = ScaleReward(env, *case.reward_scale, case.total_steps // case.num_envs)
    wrapped = rngym.RewardTransformWrapper(
        rngym.VecEnv(scaled), reward_transform(transform, case.gamma)
    )
    space = env.action_space(params)
    return ppo.Environment(wrapped, params, space, isinstance(space, spaces.Discrete))


def make_evaluate(case: Case, act: Callable[[Any, jax.Array], jax.Array]):
    """``evaluate(agent_params, key) -> mean return`` of one greedy episode per environment.

    Fresh copies of the base environment (neither scaled nor transformed rewards);
    the return is the base environment's times ``case.report_scale``.
    """
    env, params = case.base_env()
    batch = rngym.VecEnv(env)

    def evaluate(agent_params, key):
        reset_key, key = jax.random.split(key)
        obs, state = batch.reset(jax.random.split(reset_key, case.eval_envs), params)

        def step(carry, key):
            obs, state, total, running = carry
            action = act(agent_params, ppo.flat(obs))
            keys = jax.random.split(key, case.eval_envs)
            obs, state, reward, terminated, truncated, _ = batch.step(keys, state, action, params)
            total = total + jnp.where(running, reward, 0.0)
            return (obs, state, total, running & ~(terminated | truncated)), None

        running = jnp.ones(case.eval_envs, bool)
        carry = (obs, state, jnp.zeros(case.eval_envs), running)
        (_, _, total, _), _ = jax.lax.scan(step, carry, jax.random.split(key, case.eval_steps))
        return case.report_scale * total.mean()

    return evaluate


# --- Online Q-learning (rlax's examples/pop_art.py) --------------------------------------


class QNetwork(nn.Module):
    """One hidden ReLU layer, then one output per action (Haiku's ``nets.MLP``)."""

    num_actions: int
    hidden_size: int

    @nn.compact
    def __call__(self, obs):
        return nn.Dense(self.num_actions)(nn.relu(nn.Dense(self.hidden_size)(obs)))


class QRunner(struct.PyTreeNode):
    params: Any
    opt_state: Any
    popart: Any  # the PopArt state, or None
    env_state: Any
    obs: jax.Array
    key: jax.Array


def make_q_learning(case: Case, transform: str):
    """``(init(key) -> runner, train(runner) -> evaluation curve)`` for one seed."""
    config = case.agent
    assert isinstance(config, QConfig)
    env = make_env(case, transform)
    network = QNetwork(env.space.n, config.hidden_size)
    optimizer = optax.adam(config.learning_rate)
    critic = make_critic(transform, Q_HEAD, config.popart_step_size)

    def q_values(params, obs) -> jax.Array:
        return cast(jax.Array, network.apply(params, obs))

    evaluate = make_evaluate(case, lambda params, obs: q_values(params, obs).argmax(-1))

    def init(key):
        net_key, env_key, key = jax.random.split(key, 3)
        obs, env_state = env.env.reset(jax.random.split(env_key, 1), env.params)
        params = network.init(net_key, ppo.flat(obs))
        return QRunner(params, optimizer.init(params), critic.init(), env_state, ppo.flat(obs), key)

    def loss(params, obs, action, target):
        q = jnp.take_along_axis(q_values(params, obs), action[:, None], -1)[:, 0]
        return 0.5 * jnp.mean((q - jax.lax.stop_gradient(target)) ** 2)

    def step(runner: QRunner, _):
        key, explore_key, action_key, step_key = jax.random.split(runner.key, 4)
        q = q_values(runner.params, runner.obs)
        explore = jax.random.uniform(explore_key, (1,)) < config.epsilon
        random_action = jax.random.randint(action_key, (1,), 0, env.space.n)
        action = jnp.where(explore, random_action, q.argmax(-1))
        obs, env_state, reward, terminated, _, info = env.env.step(
            jax.random.split(step_key, 1), runner.env_state, action, env.params
        )
        # TD target in return units from the outputs before the update, as rlax.
        q_next = q_values(runner.params, ppo.flat(info["final_observation"]))
        q_next = critic.unnormalize(runner.popart, q_next).max(-1)
        target = reward + config.gamma * (1.0 - terminated) * q_next
        params, popart = critic.learn(runner.params, runner.popart, target)
        grads = jax.grad(loss)(params, runner.obs, action, critic.normalize(popart, target))
        updates, opt_state = optimizer.update(grads, runner.opt_state, params)
        params = optax.apply_updates(params, updates)
        runner = QRunner(params, opt_state, popart, env_state, ppo.flat(obs), key)
        return runner, None

    def chunk(runner: QRunner, _):
        steps = config.evaluate_every * config.episode_steps
        runner, _ = jax.lax.scan(step, runner, None, steps)
        key, eval_key = jax.random.split(runner.key)
        return runner.replace(key=key), evaluate(runner.params, eval_key)

    def train(runner: QRunner) -> jax.Array:
        return jax.lax.scan(chunk, runner, None, config.num_evals)[1]

    return init, train


# --- PPO (rewardnorm_jax.examples.ppo's, with any transform and a PopArt critic) --------


class PPORunner(struct.PyTreeNode):
    runner: ppo.Runner  # parameters, optimizer, environments (with the transform's state)
    popart: Any  # the PopArt state, or None


def _greedy(env: ppo.Environment, policy) -> jax.Array:
    if env.discrete:
        return jnp.argmax(policy, -1)
    return jnp.clip(policy[0], env.space.low, env.space.high)


def make_ppo(case: Case, transform: str):
    """``(init(key) -> runner, train(runner) -> evaluation curve)`` for one seed."""
    config = case.agent
    assert isinstance(config, ppo.PPOConfig)
    env = make_env(case, transform)
    network, optimizer = ppo.agent(config, env)
    critic = make_critic(transform, PPO_VALUE_HEAD, POPART_PPO_RATE / config.batch_size)
    evaluate = make_evaluate(case, lambda params, obs: _greedy(env, network.apply(params, obs)[0]))
    env_step = functools.partial(ppo.act_and_step, env, network, greedy=False, update_stats=True)
    grad_fn = jax.grad(functools.partial(ppo.ppo_loss, config, network, env.discrete))
    updates_per_eval = config.num_updates // case.num_evals

    def init(key):
        key, net_key, env_key = jax.random.split(key, 3)
        obs, env_state = env.env.reset(jax.random.split(env_key, config.num_envs), env.params)
        params = network.init(net_key, ppo.flat(obs))
        runner = ppo.Runner(params, optimizer.init(params), env_state, ppo.flat(obs), key)
        return PPORunner(runner, critic.init())

    def rollout(runner: ppo.Runner, _):
        key, step_key = jax.random.split(runner.key)
        obs, state, transition = env_step(runner.params, runner.obs, runner.env_state, step_key)
        return runner.replace(env_state=state, obs=obs, key=key), transition

    def update(carry: PPORunner, index):
        runner, traj = jax.lax.scan(rollout, carry.runner, None, config.num_steps)
        returns = functools.partial(critic.unnormalize, carry.popart)
        value = returns(traj.value)
        last_value = returns(network.apply(runner.params, runner.obs)[1])
        final_value = returns(network.apply(runner.params, traj.final_obs)[1])
        advantages, targets = ppo.gae(config, traj, value, last_value, final_value)
        params, popart = critic.learn(runner.params, carry.popart, targets)
        old_value, targets = critic.normalize(popart, value), critic.normalize(popart, targets)
        batch = (traj.obs, traj.action, traj.log_prob, old_value, advantages, targets)
        key, epoch_key = jax.random.split(runner.key)
        params, opt_state = ppo.update_epochs(
            config, optimizer, grad_fn, (params, runner.opt_state), batch, epoch_key, index
        )
        runner = runner.replace(params=params, opt_state=opt_state, key=key)
        return PPORunner(runner, popart), None

    def chunk(carry: PPORunner, first):
        carry, _ = jax.lax.scan(update, carry, first + jnp.arange(updates_per_eval))
        key, eval_key = jax.random.split(carry.runner.key)
        carry = carry.replace(runner=carry.runner.replace(key=key))
        return carry, evaluate(carry.runner.params, eval_key)

    def train(carry: PPORunner) -> jax.Array:
        firsts = jnp.arange(case.num_evals) * updates_per_eval
        return jax.lax.scan(chunk, carry, firsts)[1]

    return init, train


# --- Cases ------------------------------------------------------------------------------


class Sizes(NamedTuple):
    """The sizes of a mode's runs."""

    episodes: int  # Catch's training episodes
    ppo: float  # PPO steps, a multiple of each case's default (smoke: 2 short updates/eval)
    evals: int  # evaluation points per run
    seeds: dict[str, int]  # per case; Catch's runs take seconds, DeepSea's outcomes are 0 or 1


SIZES = {
    "smoke": Sizes(40, 0.0, 2, {"catch": 2, "pendulum": 2, "deepsea": 2, "growing": 2}),
    "default": Sizes(1000, 1.0, 20, {"catch": 20, "pendulum": 5, "deepsea": 10, "growing": 5}),
    "full": Sizes(1000, 2.5, 20, {"catch": 40, "pendulum": 10, "deepsea": 20, "growing": 10}),
}


def _ppo_config(base: ppo.PPOConfig, total_steps: int, mode: str, num_evals: int):
    """``base`` for ``mode``: whole evaluation chunks of updates (smoke: 2 short updates each)."""
    if mode == "smoke":
        base = dataclasses.replace(base, num_steps=16, update_epochs=1, num_minibatches=2)
        return dataclasses.replace(base, total_steps=2 * num_evals * base.batch_size)
    updates = int(total_steps * SIZES[mode].ppo) // base.batch_size // num_evals * num_evals
    return dataclasses.replace(base, total_steps=updates * base.batch_size)


def make_cases(mode: str) -> dict[str, Case]:
    """The four cases at ``mode``'s sizes."""
    evals, episodes = SIZES[mode].evals, SIZES[mode].episodes
    cartpole = ppo.PPOConfig()  # PureJaxRL's settings, 500,000 steps
    catch = QConfig(train_episodes=episodes, evaluate_every=episodes // evals)
    cases = [
        Case(
            name="catch",
            title="Catch x10,000, online Q-learning",
            env_name="Catch-bsuite",
            agent=catch,
            threshold=9000.0,
            eval_envs=100,
            eval_steps=catch.episode_steps,
            reward_scale=(1e4, 1e4),
            report_scale=1e4,
            num_evals=evals,
        ),
        Case(
            name="pendulum",
            title="Pendulum-v1, PPO",
            env_name="Pendulum-v1",
            agent=_ppo_config(ppo.PENDULUM, ppo.PENDULUM.total_steps, mode, evals),
            threshold=-250.0,
            eval_envs=16,
            eval_steps=200,
            num_evals=evals,
        ),
        Case(
            name="deepsea",
            title="DeepSea-bsuite (size 10), PPO",
            env_name="DeepSea-bsuite",
            agent=_ppo_config(cartpole, DEEPSEA_STEPS, mode, evals),
            threshold=0.9,
            eval_envs=4,
            eval_steps=DEEPSEA_SIZE,
            env_kwargs=(("size", DEEPSEA_SIZE),),
            num_evals=evals,
        ),
        Case(
            name="growing",
            title="CartPole-v1, reward x1 to x1000, PPO",
            env_name="CartPole-v1",
            agent=_ppo_config(cartpole, cartpole.total_steps, mode, evals),
            threshold=475.0,
            eval_envs=16,
            eval_steps=500,
            reward_scale=(1.0, 1000.0),
            num_evals=evals,
        ),
    ]
    return {case.name: case for case in cases}


# --- Runs, table and plot -----------------------------------------------------------------


class Result(NamedTuple):
    """One (case, transform): evaluation returns per seed and evaluation point, and times."""

    curves: np.ndarray  # (seeds, num_evals)
    compile_s: float
    train_s: float


def run(case: Case, transform: str, num_seeds: int, seed: int, fast_compile: bool) -> Result:
    """Trains every seed at once: ``jax.vmap`` of one seed's run inside one ``jax.jit``.

    Seed ``i`` starts from the same key (network, environments) for every transform.
    ``fast_compile`` (``--smoke``) compiles without XLA's backend optimizations.
    """
    options = FAST_COMPILE if fast_compile else None
    make = make_q_learning if isinstance(case.agent, QConfig) else make_ppo
    init, train = make(case, transform)
    keys = jax.random.split(jax.random.PRNGKey(seed), num_seeds)
    init = jax.jit(init).lower(keys[0]).compile(options)
    runners = [init(key) for key in keys]  # a vmapped init can deadlock jaxlib's CPU QR
    runners = jax.tree.map(lambda *leaves: jnp.stack(leaves), *runners)
    start = time.perf_counter()
    compiled = jax.jit(jax.vmap(train)).lower(runners).compile(options)
    compiled_at = time.perf_counter()
    curves = np.asarray(jax.block_until_ready(compiled(runners)))
    return Result(curves, compiled_at - start, time.perf_counter() - compiled_at)


def first_reached(case: Case, curves: np.ndarray) -> np.ndarray:
    """Per seed, the evaluation point of the first return >= the threshold (NaN: never)."""
    reached = curves >= case.threshold
    first = case.eval_points[reached.argmax(axis=1)].astype(float)
    return np.where(reached.any(axis=1), first, np.nan)


def _mean_std(values: np.ndarray, decimals: int) -> str:
    return f"{values.mean():,.{decimals}f} ± {values.std():,.{decimals}f}"


def summary_row(case: Case, transform: str, result: Result) -> list[str]:
    """Final return, mean over the curve, steps to the threshold (mean over seeds reaching)."""
    decimals = max(0, 2 - math.floor(math.log10(abs(case.threshold))))
    reached = first_reached(case, result.curves)
    hits = reached[np.isfinite(reached)]
    unit = "episodes" if isinstance(case.agent, QConfig) else "steps"
    first = f"{hits.mean():,.0f} {unit}" if hits.size else "never"
    return [
        case.name,
        transform,
        str(len(result.curves)),
        _mean_std(result.curves[:, -1], decimals),
        _mean_std(result.curves.mean(axis=1), decimals),
        f"{case.threshold:g}",
        f"{first} ({hits.size}/{len(reached)})",
        f"{result.compile_s:.1f}",
        f"{result.train_s:.1f}",
    ]


HEADERS = [
    "case",
    "transform",
    "seeds",
    "final return",
    "mean over curve",
    "threshold",
    "first reached (seeds)",
    "compile s",
    "train s",
]


def plot(cases: dict[str, Case], results: dict[str, dict[str, Result]], path: str) -> None:
    """A row per case: mean evaluation return per transform; one std shaded (within range).

    One column, 800 px wide, so that the figure keeps its size on a page; the transforms'
    colours are the same in every row, so one legend above the rows names them.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 11, "axes.titlesize": 12})
    rows = len(results)
    fig, axes = plt.subplots(rows, 1, figsize=(8, 0.5 + 3.2 * rows), squeeze=False)
    for ax, (name, by_transform) in zip(axes.flat, results.items(), strict=True):
        case = cases[name]
        for transform, result in by_transform.items():
            curves = result.curves
            mean, std = curves.mean(axis=0), curves.std(axis=0)
            low = np.maximum(mean - std, curves.min(axis=0))  # within the seeds' range
            high = np.minimum(mean + std, curves.max(axis=0))
            color = f"C{TRANSFORMS.index(transform)}"
            ax.plot(case.eval_points, mean, color=color, lw=1.6, label=transform)
            ax.fill_between(case.eval_points, low, high, color=color, alpha=0.15)
        ax.axhline(case.threshold, color="gray", lw=0.8, ls=":")
        seeds = len(next(iter(by_transform.values())).curves)
        ax.set_title(f"{case.title} ({seeds} seeds)")
        unit = "training episodes" if isinstance(case.agent, QConfig) else "environment steps"
        ax.set(xlabel=unit, ylabel="evaluation return")
        ax.grid(alpha=0.3)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=len(labels), frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.45 / fig.get_figheight()))
    fig.savefig(path, dpi=100)
    plt.close(fig)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--full", action="store_true", help="twice the seeds, 2.5x longer PPO runs")
    size.add_argument("--smoke", action="store_true", help="tiny runs, 2 seeds (CI)")
    parser.add_argument("--cases", nargs="+", choices=list(make_cases("smoke")), default=None)
    parser.add_argument("--transforms", nargs="+", choices=TRANSFORMS, default=list(TRANSFORMS))
    parser.add_argument(
        "--seeds",
        type=int,
        default=None,
        help="seeds of every case (default: catch 20, deepsea 10, others 5; twice as many "
        "with --full)",
    )
    parser.add_argument("--seed", type=int, default=0, help="base random seed (default 0)")
    parser.add_argument(
        "--plot",
        default=None,
        help="learning-curve PNG ('' for none; default docs/_static/learning.png, none "
        "with --smoke)",
    )
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = parser.parse_args(argv)
    args.mode = "smoke" if args.smoke else "full" if args.full else "default"
    if args.plot is None:
        args.plot = "" if args.smoke else "docs/_static/learning.png"
    return args


def main(argv: Sequence[str] | None = None) -> dict[str, dict[str, Result]]:
    """Trains every case with every transform; prints the table, writes the curves."""
    args = parse_args(argv)
    started = time.perf_counter()
    cases = make_cases(args.mode)
    chosen = {name: cases[name] for name in args.cases or cases}
    print(f"Command: `{command_line()}`", flush=True)
    print(f"Machine: {environment(PACKAGES)}", flush=True)
    results: dict[str, dict[str, Result]] = {}
    rows, walls = [], []
    for name, case in chosen.items():
        case_start = time.perf_counter()
        results[name] = {}
        for transform in args.transforms:
            num_seeds = args.seeds or SIZES[args.mode].seeds[name]
            result = run(case, transform, num_seeds, args.seed, fast_compile=args.smoke)
            results[name][transform] = result
            rows.append(summary_row(case, transform, result))
            print("done:", " | ".join(rows[-1]), file=sys.stderr, flush=True)
        walls.append(f"{name} {time.perf_counter() - case_start:.0f} s")
    total = time.perf_counter() - started
    print(f"\n### Which reward transform, when: greedy evaluation return ({args.mode} run)\n")
    print(
        "Mean ± std over seeds; returns in the "
        "environment's units (Catch: x10,000; growing: CartPole's unscaled reward).\n"
    )
    print(markdown_table(HEADERS, rows) if args.markdown else plain_table(HEADERS, rows))
    print(f"\nWall time per case: {', '.join(walls)}; total {total:.0f} s ({total / 60:.1f} min)")
    if args.plot:
        plot(chosen, results, args.plot)
        print(f"Curves: {args.plot}")
    return results


if __name__ == "__main__":
    main()
