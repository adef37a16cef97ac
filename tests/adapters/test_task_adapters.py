"""Per-task statistics through an adapter: the task read from the environment's state.

A multi-task gymnax environment draws a task at every reset, and its rewards
span seven orders of magnitude across the tasks (10^0 to 10^7). Through
``NormalizeReward(..., num_tasks=K, task_of=...)`` every reward must equal a
NumPy float64 reference that keeps one ``RunningMeanStd`` per task, fed the
raw rewards, ends and tasks the environment produced.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rewardnorm_jax as rn

pytestmark = pytest.mark.requires("gymnax")

NUM_TASKS = 8
NUM_ENVS = 16
STEPS = 80
GAMMA = 0.99


def make_env():
    from flax import struct
    from gymnax.environments import environment, spaces

    @struct.dataclass
    class TaskState(environment.EnvState):
        task: jax.Array

    @struct.dataclass
    class TaskParams(environment.EnvParams):
        max_steps_in_episode: int = 1000

    class MultiTask(environment.Environment):
        """Each episode runs a task drawn at its reset; rewards scale as 10^task."""

        @property
        def default_params(self) -> TaskParams:
            return TaskParams()

        def step_env(self, key, state, action, params):
            noise_key, end_key = jax.random.split(key)
            reward = 10.0**state.task * (1.0 + jax.random.normal(noise_key))
            done = jax.random.uniform(end_key) < 0.1
            state = state.replace(time=state.time + 1)
            return self.get_obs(state), state, reward, done, {}

        def reset_env(self, key, params):
            state = TaskState(time=0, task=jax.random.randint(key, (), 0, NUM_TASKS))
            return self.get_obs(state), state

        def get_obs(self, state, params=None, key=None):
            return jnp.asarray([state.task], jnp.float32)

        def is_terminal(self, state, params) -> jax.Array:
            return jnp.array(False)

        def action_space(self, params=None):
            return spaces.Discrete(1)

        def observation_space(self, params):
            return spaces.Box(0.0, float(NUM_TASKS), (1,), jnp.float32)

    return MultiTask()


def rollout(env, task_of):
    """Rewards, ends and the task each step started in, ``(T, N)`` each, from fixed keys."""

    @jax.jit
    def run(key):
        reset_key, key = jax.random.split(key)
        _, state = env.reset(jax.random.split(reset_key, NUM_ENVS), None)

        def body(state, step_key):
            task = task_of(state)
            actions = jnp.zeros(NUM_ENVS, jnp.int32)
            _, state, reward, terminated, *_ = env.step(
                jax.random.split(step_key, NUM_ENVS), state, actions, None
            )
            return state, (reward, terminated, task)

        return jax.lax.scan(body, state, jax.random.split(key, STEPS))[1]

    return [np.asarray(x) for x in run(jax.random.key(0))]


def keyed_reference(raw, terminated, tasks):
    from tests.reference import RunningMeanStd

    stats = [RunningMeanStd() for _ in range(NUM_TASKS)]
    ret = np.zeros(raw.shape[1])
    outputs = np.zeros_like(raw)
    for t in range(raw.shape[0]):  # Gymnasium's recurrence: a termination restarts the return
        ret = np.where(terminated[t], 0.0, ret) * GAMMA + raw[t]
        for task in np.unique(tasks[t]):
            stats[task].update(ret[tasks[t] == task])
        var = np.array([stats[task].var for task in tasks[t]])
        outputs[t] = raw[t] / np.sqrt(var + 1e-8)
    return outputs, stats


def test_tasks_read_from_the_env_state_match_a_per_task_reference():
    from rewardnorm_jax import gymnax as rgx

    with jax.enable_x64(True):
        bare = rgx.VecEnv(make_env())
        wrapped = rgx.NormalizeReward(
            bare,
            GAMMA,
            dtype=jnp.float64,
            task_of=lambda env_state: env_state.task,
            statistics=rn.Statistics(num_tasks=NUM_TASKS),
        )
        rewards, _, _ = rollout(wrapped, lambda state: state.env_state.task)
        raw, terminated, tasks = rollout(bare, lambda state: state.task)
    assert len(np.unique(tasks)) == NUM_TASKS  # every task ran, rewards from 1 to 1e7
    expected, _ = keyed_reference(raw, terminated, tasks)
    np.testing.assert_allclose(rewards, expected, rtol=1e-10)
    # Normalized per task, rewards of every task come out at one scale.
    late = np.abs(rewards[STEPS // 2 :])
    assert late.max() < 50.0, late.max()


def test_task_of_and_num_tasks_go_together():
    from rewardnorm_jax import gymnax as rgx

    env = rgx.VecEnv(make_env())
    with pytest.raises(ValueError, match="num_tasks and task_of go together"):
        rgx.NormalizeReward(env, statistics=rn.Statistics(num_tasks=4))
    with pytest.raises(ValueError, match="num_tasks and task_of go together"):
        rgx.NormalizeReward(env, task_of=lambda s: s.task)
    with pytest.raises(TypeError, match="task_of should be a function"):
        rgx.NormalizeReward(env, task_of=3, statistics=rn.Statistics(num_tasks=4))  # type: ignore[arg-type]


def test_a_keyed_member_of_a_chain_gets_the_ids_read_from_the_env_state():
    # A RewardTransformWrapper around a chain merged every environment into task 0.
    import rewardnorm_jax as rn
    from rewardnorm_jax import gymnax as rgx

    with jax.enable_x64(True):
        bare = rgx.VecEnv(make_env())
        transform = rn.chain(
            rn.normalize_reward(
                GAMMA, dtype=jnp.float64, statistics=rn.Statistics(num_tasks=NUM_TASKS)
            ),
            rn.clip_reward(-5.0, 5.0),
        )
        wrapped = rgx.RewardTransformWrapper(bare, transform, task_of=lambda s: s.task)
        rewards, _, _ = rollout(wrapped, lambda state: state.env_state.task)
        raw, terminated, tasks = rollout(bare, lambda state: state.task)
    expected, _ = keyed_reference(raw, terminated, tasks)
    np.testing.assert_allclose(rewards, np.clip(expected, -5.0, 5.0), rtol=1e-10)
    with pytest.raises(ValueError, match="num_tasks and task_of go together"):
        rgx.RewardTransformWrapper(bare, transform)  # the ids would never arrive


def test_stats_from_with_another_batch_size_keeps_per_task_statistics():
    import rewardnorm_jax as rn
    from rewardnorm_jax import gymnax as rgx

    wrapped = rgx.NormalizeReward(
        rgx.VecEnv(make_env()),
        GAMMA,
        task_of=lambda s: s.task,
        statistics=rn.Statistics(num_tasks=NUM_TASKS),
    )
    _, state = wrapped.reset(jax.random.split(jax.random.key(1), NUM_ENVS), None)
    for step_key in jax.random.split(jax.random.key(2), 5):
        keys = jax.random.split(step_key, NUM_ENVS)
        _, state, *_ = wrapped.step(keys, state, jnp.zeros(NUM_ENVS, jnp.int32), None)
    trained = rgx.get_transform_state(state)
    assert int(rn.count_as_int(trained.stats).sum()) == 5 * NUM_ENVS
    # An evaluation batch of another size continues from the same per-task statistics.
    _, evaluation = wrapped.reset(jax.random.split(jax.random.key(3), 3), None, stats_from=trained)
    kept = rgx.get_transform_state(evaluation)
    assert kept.ret.shape == (3,)
    np.testing.assert_array_equal(kept.stats.moments, trained.stats.moments)
    np.testing.assert_array_equal(kept.stats.count_words, trained.stats.count_words)
    moved = rgx.with_stats_from(evaluation, trained)
    np.testing.assert_array_equal(
        rgx.get_transform_state(moved).stats.moments, trained.stats.moments
    )
    tasks = np.asarray(evaluation.env_state.task)
    _, after, *_ = wrapped.step(
        jax.random.split(jax.random.key(4), 3), evaluation, jnp.zeros(3, jnp.int32), None
    )
    counts = rn.count_as_int(rgx.get_transform_state(after).stats)
    assert (counts - rn.count_as_int(trained.stats)).tolist() == np.bincount(
        tasks, minlength=NUM_TASKS
    ).tolist()


def test_task_of_must_give_one_id_per_environment():
    from rewardnorm_jax import gymnax as rgx

    wrapped = rgx.NormalizeReward(
        rgx.VecEnv(make_env()),
        task_of=lambda s: s.task[:2],
        statistics=rn.Statistics(num_tasks=NUM_TASKS),
    )
    _, state = wrapped.reset(jax.random.split(jax.random.key(0), 4), None)
    with pytest.raises(ValueError, match=r"task_of returned ids of shape \(2,\); expected \(4,\)"):
        wrapped.step(jax.random.split(jax.random.key(1), 4), state, jnp.zeros(4, jnp.int32), None)


def test_components_on_scalar_rewards_of_a_batch_is_refused():
    # components=1 took the environments' axis for components: one set per environment.
    import rewardnorm_jax as rn
    from rewardnorm_jax import gymnax as rgx

    env = rgx.VecEnv(make_env())
    keys = jax.random.split(jax.random.key(0), 4)
    for wrapped in (
        rgx.NormalizeReward(env, statistics=rn.Statistics(components=1)),
        rgx.RewardTransformWrapper(
            env, rn.chain(rn.normalize_reward(statistics=rn.Statistics(components=1)))
        ),
    ):
        with pytest.raises(ValueError, match=r"has components=1: .* one number per environment"):
            wrapped.reset(keys, None)
