"""Reward streams beyond one scalar per environment, against NumPy float64 references.

Per objective (``components``), one scale across objectives, per task
(``num_tasks`` with ids drawn again at episode ends), non-episodic returns
(``episodic=False``), an extrinsic and an intrinsic stream in one pytree, and
the keyed merge across devices.
"""

import contextlib
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct
from jax.experimental import checkify

import rewardnorm_jax as rn
from rewardnorm_jax._src.stats import running as rs
from rewardnorm_jax._src.stats import summation
from tests import reference
from tests.reference import RunningMeanStd

GAMMA = 0.99
TOLERANCE = {"float64": 1e-10, "float32": 1e-5}


def stream(steps=40, num_envs=6, objectives=3, seed=0):
    """Rewards ``(T, N, k)`` of objectives of scales 1, 100 and 1e4, ends ``(T, N)``."""
    rng = np.random.default_rng(seed)
    scales = 10.0 ** (2 * np.arange(objectives))
    rewards = rng.normal(0.5, 1.0, (steps, num_envs, objectives)) * scales
    terminated = rng.random((steps, num_envs)) < 0.1
    return rewards, terminated


def run(transform, rewards, terminated, dtype, tasks=None):
    """Outputs ``(T, *batch)`` and the final state of ``transform`` stepped over the stream."""
    state = transform.init(rewards.shape[1:])

    def body(state, inputs):
        reward, done, *task = inputs
        ids = {"task": task[0]} if task else {}
        out, state = transform.step(state, reward, done, False, **ids)
        return state, out

    inputs: tuple = (jnp.asarray(rewards, dtype), jnp.asarray(terminated))
    inputs += () if tasks is None else (jnp.asarray(tasks),)
    state, outputs = jax.jit(lambda inputs: jax.lax.scan(body, state, inputs))(inputs)
    return np.asarray(outputs, np.float64), state


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("num_envs", [6, 100])
@pytest.mark.parametrize("form", [None, "plain"])  # the backend's sums, or the plain ones
def test_each_objective_matches_a_scalar_normalizer_of_its_own(dtype, num_envs, form):
    rewards, terminated = stream(num_envs=num_envs)
    sums = contextlib.nullcontext() if form is None else summation.everywhere(form)
    with jax.enable_x64(dtype == "float64"), sums:
        outputs, state = run(
            rn.normalize_reward(GAMMA, statistics=rn.Statistics(components=1)),
            rewards,
            terminated,
            dtype,
        )
        for k in range(rewards.shape[2]):
            expected, _, rms = reference.normalize_stream(
                rewards[:, :, k], terminated, np.zeros_like(terminated), gamma=GAMMA
            )
            np.testing.assert_allclose(outputs[:, :, k], expected, rtol=TOLERANCE[dtype])
            var = float(state.stats.var[k])
            np.testing.assert_allclose(var, rms.var, rtol=TOLERANCE[dtype])
            assert int(rn.count_as_int(state.stats)[k]) == round(rms.count)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_one_scale_across_objectives_keeps_their_ratios(dtype):
    rewards, terminated = stream()
    steps, _, objectives = rewards.shape
    with jax.enable_x64(dtype == "float64"):
        outputs, state = run(rn.normalize_reward(GAMMA), rewards, terminated, dtype)
        var = float(state.stats.var)
    # Every objective of every environment is one more return of one shared set.
    flat_ends = np.repeat(terminated, objectives, axis=1)
    expected, _, rms = reference.normalize_stream(
        rewards.reshape(steps, -1), flat_ends, np.zeros_like(flat_ends), gamma=GAMMA
    )
    np.testing.assert_allclose(outputs.reshape(steps, -1), expected, rtol=TOLERANCE[dtype])
    np.testing.assert_allclose(var, rms.var, rtol=TOLERANCE[dtype])
    ratios = outputs[-1] / rewards[-1]
    np.testing.assert_allclose(ratios, ratios[0, 0], rtol=TOLERANCE[dtype])


def keyed_reference(rewards, terminated, tasks, num_tasks, gamma=GAMMA, epsilon=1e-8):
    """Gymnasium's recurrence per environment, one ``RunningMeanStd`` per task."""
    stats = [RunningMeanStd() for _ in range(num_tasks)]
    ret = np.zeros(rewards.shape[1])
    outputs = np.zeros_like(rewards)
    for t in range(rewards.shape[0]):
        ret = np.where(terminated[t], 0.0, ret) * gamma + rewards[t]
        for task in range(num_tasks):
            if np.any(tasks[t] == task):
                stats[task].update(ret[tasks[t] == task])
        var = np.array([stats[task].var for task in tasks[t]])
        outputs[t] = rewards[t] / np.sqrt(var + epsilon)
    return outputs, stats


def redrawn_tasks(terminated, num_tasks, seed=1):
    """Each environment's task, drawn again at the step after its episode ended."""
    rng = np.random.default_rng(seed)
    tasks = np.zeros(terminated.shape, np.int32)
    current = rng.integers(0, num_tasks, terminated.shape[1])
    for t in range(terminated.shape[0]):
        if t > 0:
            current = np.where(
                terminated[t - 1], rng.integers(0, num_tasks, current.shape), current
            )
        tasks[t] = current
    return tasks


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_per_task_statistics_follow_ids_drawn_again_at_episode_ends(dtype):
    num_tasks = 4
    rng = np.random.default_rng(3)
    terminated = rng.random((60, 16)) < 0.15
    tasks = redrawn_tasks(terminated, num_tasks)
    scale = 10.0 ** (2 * tasks)  # tasks' rewards span 1 to 1e6
    rewards = rng.normal(1.0, 1.0, tasks.shape) * scale
    expected, stats = keyed_reference(rewards, terminated, tasks, num_tasks)
    with jax.enable_x64(dtype == "float64"):
        transform = rn.normalize_reward(GAMMA, statistics=rn.Statistics(num_tasks=num_tasks))
        outputs, state = run(transform, rewards, terminated, dtype, tasks)
        var = np.asarray(state.stats.var, np.float64)
        counts = rn.count_as_int(state.stats)
    np.testing.assert_allclose(outputs, expected, rtol=TOLERANCE[dtype])
    np.testing.assert_allclose(var, [s.var for s in stats], rtol=TOLERANCE[dtype])
    assert counts.tolist() == [round(s.count) for s in stats]


def test_a_task_absent_from_a_step_is_unchanged_bit_for_bit():
    transform = rn.normalize_reward(GAMMA, statistics=rn.Statistics(num_tasks=3))
    state = transform.init((4,))
    _, state = transform.step(state, jnp.array([1.0, 2.0, 3.0, 4.0]), task=jnp.array([0, 1, 2, 2]))
    before = state.stats
    _, state = transform.step(state, jnp.array([5.0, 6.0, 7.0, 8.0]), task=jnp.array([0, 0, 2, 2]))
    np.testing.assert_array_equal(state.stats.moments[1], before.moments[1])
    np.testing.assert_array_equal(state.stats.count_words[1], before.count_words[1])


def test_an_id_outside_the_tasks_changes_no_statistics_and_normalizes_to_nan():
    transform = rn.normalize_reward(GAMMA, statistics=rn.Statistics(num_tasks=2))
    state = transform.init((3,))
    rewards = jnp.array([1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match=r"task ids should be in \[0, 2\)"):
        transform.step(state, rewards, task=np.array([0, 2, 1]))
    with pytest.raises(TypeError, match=r"task should be integer ids in \[0, 2\)"):
        transform.step(state, rewards, task=np.array([0.0, 1.0, 1.0]))
    with pytest.raises(ValueError, match=r"task has shape \(2,\); expected \(3,\)"):
        transform.apply(state, rewards, task=np.array([0, 1]))

    @jax.jit
    def step_with(state, task):  # inside jit (without checkify) the ids are not checked
        return transform.step(state, rewards, False, False, task=task)

    out, bad = step_with(state, jnp.array([0, 5, -1]))
    _, good = step_with(state, jnp.array([0, 0, 0]))
    assert np.isfinite(out[0])
    assert np.isnan(out[1:]).all()
    assert rn.count_as_int(bad.stats).tolist() == [1, 0]
    np.testing.assert_array_equal(bad.stats.moments[1], state.stats.moments[1])
    assert rn.count_as_int(good.stats).tolist() == [3, 0]


@pytest.mark.parametrize(
    ("dtype", "num_tasks"), [("uint8", 256), ("int8", 128), ("uint16", 65536), ("uint8", 300)]
)
def test_ids_of_a_dtype_that_cannot_hold_the_number_of_tasks(dtype, num_tasks):
    transform = rn.normalize_reward(GAMMA, statistics=rn.Statistics(num_tasks=num_tasks))
    ids = jnp.array([0, 1, 2, 100], dtype)
    rewards = jnp.array([1.0, 2.0, 3.0, 4.0])

    def step(state, ids):
        return transform.step(state, rewards, False, False, task=ids)

    eager = step(transform.init((4,)), ids)
    traced = jax.jit(step)(transform.init((4,)), ids)
    error, checked = jax.jit(checkify.checkify(step))(transform.init((4,)), ids)
    assert error.get() is None
    for _, state in (eager, traced, checked):
        counts = rn.count_as_int(state.stats)
        assert counts[[0, 1, 2, 100]].tolist() == [1, 1, 1, 1]
        assert int(counts.sum()) == 4
    popart = rn.popart(step_size=0.1, num_tasks=num_tasks)
    stats = popart.update(popart.init(), rewards, ids).stats
    assert rn.count_as_int(stats)[[0, 1, 2, 100]].tolist() == [1, 1, 1, 1]
    assert int(rn.count_as_int(stats).sum()) == 4


def test_ids_outside_the_tasks_are_a_checkify_error_inside_jit():
    transform = rn.normalize_reward(GAMMA, statistics=rn.Statistics(num_tasks=4))
    state = transform.init((3,))

    def run(state, tasks):  # a scan over the ids of T steps, (T, 3)
        def body(state, task):
            out, state = transform.step(state, jnp.ones(3), False, False, task=task)
            return state, out

        return jax.lax.scan(body, state, tasks)

    checked = jax.jit(checkify.checkify(run))
    error, _ = checked(state, jnp.array([[0, 1, 3], [2, 9, -1]]))
    assert error.get().startswith(
        "task ids should be in [0, 4) (num_tasks=4), got 9 at flat index 1 of the "
        "environments' ids (2 out of range)."
    )
    error, _ = checked(state, jnp.array([[0, 1, 3], [2, 2, 0]]))
    assert error.get() is None
    # Without checkify the check is dropped: the compiled step is the one without the check.
    ids = jnp.zeros((2, 3), jnp.int32)

    def instructions(fn) -> int:
        text = str(jax.jit(fn).lower(state, ids).compile().as_text())
        return sum(" = " in line for line in text.splitlines())

    dropped = instructions(lambda state, tasks: run(state, tasks))  # traced afresh each time
    with mock.patch.object(checkify, "debug_check", return_value=None):
        absent = instructions(lambda state, tasks: run(state, tasks))
    assert dropped == absent
    assert instructions(checkify.checkify(run)) > absent


def test_tasks_need_shared_statistics_and_a_whole_number():
    with pytest.raises(ValueError, match="per_env=True keeps one set of statistics per reward"):
        rn.Statistics(per_env=True, num_tasks=3)
    with pytest.raises(TypeError, match="num_tasks should be an integer"):
        rn.normalize_reward(statistics=rn.Statistics(num_tasks=2.0))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"num_tasks should be an integer in \[1, 2147483647\]"):
        rn.normalize_reward(statistics=rn.Statistics(num_tasks=0))
    with pytest.raises(ValueError, match="got num_tasks=2147483648"):  # ids are int32
        rn.normalize_reward(statistics=rn.Statistics(num_tasks=2**31))
    with pytest.raises(ValueError, match="fewer axes than components=2"):
        rn.normalize_reward(statistics=rn.Statistics(components=2)).init((4,))


def test_a_keyed_transform_needs_ids_and_others_refuse_them():
    keyed = rn.normalize_reward(GAMMA, statistics=rn.Statistics(num_tasks=3))
    state = keyed.init((4,))
    for call in (
        lambda: keyed.step(state, jnp.ones(4)),
        lambda: keyed.update(state, jnp.ones(4)),
        lambda: keyed.apply(state, jnp.ones(4)),
        lambda: jax.jit(keyed.step)(state, jnp.ones(4)),
    ):
        with pytest.raises(ValueError, match=r"num_tasks=3\) .* needs each environment's task"):
            call()
    ids = np.zeros(4, int)
    for transform in (rn.normalize_reward(), rn.clip_reward(), rn.percentile_scale_reward()):
        plain = transform.init((4,))
        with pytest.raises(ValueError, match=r"task was given .* keeps no per-task statistics"):
            transform.step(plain, jnp.ones(4), task=ids)
        with pytest.raises(ValueError, match=r"task was given .* keeps no per-task statistics"):
            transform.apply(plain, jnp.ones(4), task=ids)
    plain_chain = rn.chain(rn.normalize_reward(), rn.clip_reward())
    with pytest.raises(ValueError, match=r"task was given .* chain keeps no per-task"):
        plain_chain.step(plain_chain.init((4,)), jnp.ones(4), task=ids)
    with pytest.raises(ValueError, match=r"different numbers of tasks \(num_tasks=\[2, 3\]\)"):
        rn.chain(
            rn.normalize_reward(statistics=rn.Statistics(num_tasks=2)),
            rn.normalize_reward(statistics=rn.Statistics(num_tasks=3)),
        )


@pytest.mark.parametrize("jit", [False, True])
def test_a_chain_passes_the_ids_to_its_keyed_members(jit):
    # Every environment merged into task 0 when only a NormalizeReward wrapper set the ids.
    ids = jnp.array([0, 1, 1, 2, 2])
    rewards = jnp.array([1.0, 2.0, 3.0, 40.0, 50.0])
    alone = rn.normalize_reward(0.9, statistics=rn.Statistics(num_tasks=3))
    chained = rn.chain(rn.scale_reward(1.0), alone, rn.clip_reward(-5.0, 5.0))
    assert chained.num_tasks == 3
    step = jax.jit(chained.step) if jit else chained.step
    out, state = rewards, chained.init((5,))
    for _ in range(3):
        out, state = step(state, rewards, task=ids)
    alone_step = jax.jit(alone.step) if jit else alone.step
    expected, alone_state = rewards, alone.init((5,))
    for _ in range(3):
        expected, alone_state = alone_step(alone_state, rewards, task=ids)
    assert rn.count_as_int(state[1].stats).tolist() == [3, 6, 6]
    np.testing.assert_array_equal(out, jnp.clip(expected, -5.0, 5.0))
    np.testing.assert_array_equal(
        chained.apply(state, rewards, task=ids),
        jnp.clip(alone.apply(alone_state, rewards, task=ids), -5.0, 5.0),
    )


def test_one_id_per_environment_serves_all_its_components():
    # Agents of one environment (components=0: the agent axis counts as environments)
    # share the environment's id, as an episode end is theirs too.
    transform = rn.normalize_reward(GAMMA, statistics=rn.Statistics(num_tasks=2))
    state = transform.init((3, 4))  # 3 environments, 4 agents
    rewards = jnp.arange(12.0).reshape(3, 4)
    _, by_env = transform.step(state, rewards, task=jnp.array([0, 1, 1]))
    _, by_reward = transform.step(state, rewards, task=jnp.array([[0] * 4, [1] * 4, [1] * 4]))
    assert rn.count_as_int(by_env.stats).tolist() == [4, 8]
    np.testing.assert_array_equal(by_env.stats.moments, by_reward.stats.moments)
    with pytest.raises(ValueError, match=r"task has shape \(4,\); expected \(3, 4\)"):
        transform.step(state, rewards, task=jnp.zeros(4, int))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_a_non_episodic_return_never_resets(dtype):
    rewards, terminated = stream(objectives=1)
    rewards = rewards[:, :, 0]
    never = np.zeros_like(terminated)
    with jax.enable_x64(dtype == "float64"):
        transform = rn.normalize_reward(GAMMA, semantics="non_episodic")
        outputs, state = run(transform, rewards, terminated, dtype)
        var = float(state.stats.var)
    expected, returns, rms = reference.normalize_stream(rewards, never, never, gamma=GAMMA)
    np.testing.assert_allclose(outputs, expected, rtol=TOLERANCE[dtype])
    np.testing.assert_allclose(np.asarray(state.ret), returns[-1], rtol=TOLERANCE[dtype])
    np.testing.assert_allclose(var, rms.var, rtol=TOLERANCE[dtype])


def test_intrinsic_and_extrinsic_streams_in_one_pytree():
    # RND: the intrinsic return never resets and keeps statistics of its own.
    rewards, terminated = stream(objectives=2, seed=5)
    extrinsic, intrinsic = rewards[:, :, 0], rewards[:, :, 1]
    never = np.zeros_like(terminated)
    with jax.enable_x64(True):
        transforms = {
            "extrinsic": rn.normalize_reward(GAMMA),
            "intrinsic": rn.normalize_reward(GAMMA, semantics="non_episodic"),
        }
        states = {name: t.init((rewards.shape[1],)) for name, t in transforms.items()}

        def body(states, inputs):
            reward, done = inputs
            outs = {}
            for name, transform in transforms.items():
                outs[name], states[name] = transform.step(states[name], reward[name], done, False)
            return states, outs

        inputs = ({"extrinsic": extrinsic, "intrinsic": intrinsic}, terminated)
        _, outputs = jax.jit(lambda s, i: jax.lax.scan(body, s, i))(states, inputs)
    expected_ext, _, _ = reference.normalize_stream(extrinsic, terminated, never, gamma=GAMMA)
    expected_int, _, _ = reference.normalize_stream(intrinsic, never, never, gamma=GAMMA)
    np.testing.assert_allclose(outputs["extrinsic"], expected_ext, rtol=1e-10)
    np.testing.assert_allclose(outputs["intrinsic"], expected_int, rtol=1e-10)


def test_flags_per_reward_or_per_environment_agree():
    rewards, terminated = stream(steps=10)
    per_reward = np.broadcast_to(terminated[:, :, None], rewards.shape)
    with jax.enable_x64(True):
        transform = rn.normalize_reward(GAMMA, statistics=rn.Statistics(components=1))
        by_env, _ = run(transform, rewards, terminated, "float64")
        by_reward, _ = run(transform, rewards, per_reward, "float64")
    np.testing.assert_array_equal(by_env, by_reward)
    transform = rn.normalize_reward(GAMMA, statistics=rn.Statistics(components=1))
    with pytest.raises(ValueError, match="a leading part of it"):
        transform.step(transform.init((6, 3)), jnp.zeros((6, 3)), jnp.zeros(3, bool), False)


@pytest.mark.parametrize("outlier", [False, True])
def test_per_task_sums_stay_precise_in_float32(outlier):
    # Shifted by each task's own mean, the sums keep float32's precision however
    # far the mean is from 0, and with an outlier among 65536 returns.
    rng = np.random.default_rng(7)
    batch = rng.normal(3.0, 1.0, 2**16)
    if outlier:
        batch[5] = 1e4
    keys = rng.integers(0, 2, batch.shape)
    merged = rs.merge_keyed(
        rs.init_stats((2,)), jnp.asarray(batch, jnp.float32), None, jnp.asarray(keys)
    )
    for key in (0, 1):
        ref = RunningMeanStd()
        ref.update(batch[keys == key])
        np.testing.assert_allclose(float(merged.var[key]), ref.var, rtol=1e-5)
        np.testing.assert_allclose(float(merged.mean[key]), ref.mean, rtol=1e-5)


def test_an_inactive_first_return_is_not_the_shift():
    # An environment that ended its episode and waits holds a return far from the others.
    transform = rn.normalize_reward(0.0)  # the return is the reward
    rng = np.random.default_rng(0)
    first, second = 1.0 + 0.01 * rng.standard_normal((2, 64))
    first[0] = 1e4  # environment 0 ends its episode on this step, then waits
    state = transform.init((64,))
    _, state = transform.step(state, jnp.asarray(first, jnp.float32), False, False)
    active = np.arange(64) > 0
    _, state = transform.step(state, jnp.asarray(second, jnp.float32), False, False, active=active)
    ref = RunningMeanStd()
    ref.update(first)
    ref.update(second[1:])
    # Shifted by the waiting return, the variance came out 7e4 times too large. What is
    # left is the first step's: its first entry, the outlier, was its shift (1.4e-5).
    np.testing.assert_allclose(float(state.stats.var), ref.var, rtol=1e-4)
    np.testing.assert_allclose(float(state.stats.mean), ref.mean, rtol=1e-5)


def test_task_ids_of_any_width_and_from_lists():
    with jax.enable_x64(True):
        transform = rn.normalize_reward(GAMMA, statistics=rn.Statistics(num_tasks=2))
        _, state = transform.step(transform.init((2,)), jnp.ones(2), task=[1, 1])  # a list
        assert rn.count_as_int(state.stats).tolist() == [0, 2]
        state = transform.init((2,))

        @jax.jit
        def step(state, task):
            return transform.step(state, jnp.ones(2), False, False, task=task)

        out, state = step(state, jnp.array([2**32 + 1, 0], jnp.int64))  # never wraps to 1
        assert np.isnan(out[0])
        assert rn.count_as_int(state.stats).tolist() == [1, 0]


def test_task_ids_that_are_no_integers_are_named():
    transform = rn.normalize_reward(GAMMA, statistics=rn.Statistics(num_tasks=2))
    state = transform.init((2,))
    for ids in (np.array([1, 0], "timedelta64[s]"), np.array([True, False]), "0"):
        with pytest.raises(TypeError, match=r"task should be integer ids in \[0, 2\)"):
            transform.step(state, jnp.ones(2), task=ids)  # type: ignore[arg-type]  # on purpose


class NormalizeRewardState(struct.PyTreeNode):
    """The keyed state as earlier versions saved it (same name): with the environments' task ids."""

    stats: rs.RunningStats
    ret: jax.Array
    ret_abs_max: jax.Array | None = None
    task: jax.Array | None = None


def test_a_checkpoint_holding_task_ids_loads_without_them():
    transform = rn.normalize_reward(GAMMA, statistics=rn.Statistics(num_tasks=2))
    _, state = transform.step(transform.init((3,)), jnp.array([1.0, 2.0, 5.0]), task=[0, 1, 1])
    earlier = NormalizeRewardState(state.stats, state.ret, task=jnp.array([0, 1, 1], jnp.int32))
    loaded = rn.load_state(transform.init((3,)), rn.save_state(earlier, transform.config))
    assert jax.tree.all(jax.tree.map(lambda a, b: bool((a == b).all()), loaded, state))
