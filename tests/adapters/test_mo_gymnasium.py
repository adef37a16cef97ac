"""Vector (multi-objective) rewards through the Gymnasium adapter, against MO-Gymnasium 1.3.

Per-objective statistics are compared with k stacked ``MONormalizeReward(env, idx)`` (single
environments) and with Gymnasium's vector ``NormalizeReward`` on each objective's column
(``MOSyncVectorEnv``); one scale across the objectives with a NumPy reference written here.
Tests marked ``requires("mo_gymnasium")`` skip where the ``mo-gymnasium`` extra is missing.
"""

import functools
import math
import pathlib
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import wrappers as gym_wrappers
from gymnasium.vector import AutoresetMode
from gymnasium.wrappers.utils import RunningMeanStd as GymRunningMeanStd

from rewardnorm_jax.gymnasium import NormalizeReward, ObjectiveStats, RunningMeanStd, vector
from tests.adapters.test_gymnasium_adapter import ScriptedEnv
from tests.adapters.test_gymnasium_vector_adapter import ScriptedVectorEnv

RTOL = 1e-12  # float64 rounding: the compensated merge and Gymnasium's plain one differ there
pytestmark = pytest.mark.filterwarnings("ignore:.*Box high.s precision lowered:UserWarning")
MO_ENVS = ["deep-sea-treasure-v0", "mo-mountaincar-v0"]
EPSILON = 1e-8


def mo_make(env_id: str) -> gym.Env:
    import mo_gymnasium

    return mo_gymnasium.make(env_id)


def mo_vector(env_id: str, num_envs: int):
    import mo_gymnasium
    from mo_gymnasium.wrappers.vector import MOSyncVectorEnv

    # MO-Gymnasium annotates the list of environment functions as an Iterator.
    return MOSyncVectorEnv([lambda: mo_gymnasium.make(env_id)] * num_envs)  # type: ignore[arg-type]


def objective(rewards: np.ndarray, index: int) -> np.ndarray:
    """One objective's rewards of every sub-environment (a copy)."""
    return np.array(rewards[:, index])


def stacked_mo_normalize(env_id: str, gamma: float):
    """``MONormalizeReward(env, idx)`` for every objective, and the wrappers in index order."""
    from mo_gymnasium.wrappers import MONormalizeReward

    env = mo_make(env_id)
    layers = []
    for idx in range(env.unwrapped.reward_space.shape[0]):  # type: ignore[attr-defined]
        env = MONormalizeReward(env, idx=idx, gamma=gamma, epsilon=EPSILON)
        layers.append(env)
    return env, layers


def play_single(envs, steps: int, seed: int, freeze=(), normalizers=()):
    """Steps every env with the same actions; yields each step's outputs, env by env.

    The ``normalizers`` stop learning at the steps in ``freeze``.
    """
    for env in envs:
        env.reset(seed=seed)
    envs[0].action_space.seed(seed)
    for t in range(steps):
        action = envs[0].action_space.sample()
        for normalizer in normalizers:
            normalizer.update_running_mean = t not in freeze
        outputs = [env.step(action) for env in envs]
        yield outputs
        if outputs[0][2] or outputs[0][3]:
            for env in envs:
                env.reset()


# --- Per objective: k stacked MONormalizeReward ---


@pytest.mark.requires("mo_gymnasium")
@pytest.mark.parametrize("env_id", MO_ENVS)
@pytest.mark.parametrize("gamma", [0.99, 0.9])
def test_each_objective_equals_stacked_mo_normalize_reward(env_id, gamma):
    ours = NormalizeReward(mo_make(env_id), gamma=gamma)
    theirs, layers = stacked_mo_normalize(env_id, gamma)
    raw = mo_make(env_id)
    ends = 0
    for (_, reward, term, trunc, _), (_, got, *_), (_, expected, *_) in play_single(
        [raw, ours, theirs], 1500, seed=3, freeze=range(400, 500), normalizers=[ours, *layers]
    ):
        variances = np.array([layer.return_rms.var for layer in layers])
        np.testing.assert_allclose(ours.return_rms.var, variances, rtol=RTOL)
        np.testing.assert_allclose(
            ours.return_rms.mean,
            [layer.return_rms.mean for layer in layers],
            rtol=RTOL,
            atol=1e-300,
        )
        # Gymnasium's count is a float sum (1e-4 + 1 + 1 ...), ours samples + 1e-4 exactly.
        np.testing.assert_allclose(
            ours.return_rms.count, [layer.return_rms.count for layer in layers], rtol=RTOL
        )
        np.testing.assert_allclose(
            ours.discounted_reward[0], [layer.discounted_reward[0] for layer in layers], rtol=RTOL
        )
        # MONormalizeReward writes into the environment's float32 reward: compare in float64
        # with its statistics, and after the same rounding.
        assert got.dtype == np.float64
        assert got.shape == reward.shape
        np.testing.assert_allclose(got, reward / np.sqrt(variances + EPSILON), rtol=RTOL)
        np.testing.assert_allclose(got.astype(expected.dtype), expected, rtol=1e-6)
        ends += term or trunc
    assert ends >= 5  # returns carried across episodes, as the scalar wrapper
    assert ours.return_rms.samples == [1400] * len(layers)  # 100 frozen steps


# --- Per objective, vector env: Gymnasium's vector NormalizeReward on each objective ---


@pytest.mark.requires("mo_gymnasium")
@pytest.mark.parametrize("env_id", MO_ENVS)
def test_vector_each_objective_equals_gymnasiums_vector_wrapper_per_objective(env_id):
    num_envs, steps, seed = 4, 700, 5
    ours = vector.NormalizeReward(mo_vector(env_id, num_envs))
    k = ours.env.reward_space.shape[0]  # type: ignore[attr-defined]
    columns = [
        gym_wrappers.vector.NormalizeReward(
            gym_wrappers.vector.TransformReward(
                mo_vector(env_id, num_envs), functools.partial(objective, index=i)
            )
        )
        for i in range(k)
    ]
    envs = [ours, *columns]
    for env in envs:
        env.reset(seed=seed)
    envs[0].action_space.seed(seed)
    ends = 0
    for _ in range(steps):
        actions = envs[0].action_space.sample()
        results: list[tuple] = [env.step(actions) for env in envs]
        (_, got, term, trunc, _), *outputs = results
        expected = np.stack([rewards for _, rewards, *_ in outputs], axis=-1)
        np.testing.assert_allclose(got, expected, rtol=RTOL, atol=1e-300)
        np.testing.assert_allclose(
            ours.return_rms.var, [c.return_rms.var for c in columns], rtol=RTOL
        )
        np.testing.assert_allclose(
            ours.return_rms.count, [c.return_rms.count for c in columns], rtol=RTOL
        )
        np.testing.assert_array_equal(
            ours.accumulated_reward, np.stack([c.accumulated_reward for c in columns], axis=-1)
        )
        ends += np.sum(term | trunc)
    assert ends >= 5
    assert ours.accumulated_reward.shape == (num_envs, k)


# --- One scale across the objectives: a NumPy reference ---


def shared_scale_reference(rewards, terminated, truncated, gamma, carry, next_step):
    """``objectives="shared"`` from the formulas: every objective's return joins one statistic.

    ``rewards`` (T, N, k), flags (T, N). Each step, the returns of the environments that take
    part (all of them, or under NEXT_STEP autoreset those that did not end at the previous step)
    advance as Gymnasium's, ``G <- gamma G (1 - terminated) + r``, kept in ``carry``; their
    ``n k`` values join the running mean and variance as one batch (Chan et al.), and every reward
    is divided by ``sqrt(var + epsilon)``.
    """
    steps, num_envs, k = rewards.shape
    ret = np.zeros((num_envs, k), carry)
    mean, var, count = np.float64(0.0), np.float64(1.0), 1e-4  # as Gymnasium: float64 moments
    prev_done = np.zeros(num_envs, bool)
    out = np.empty_like(rewards)
    for t in range(steps):
        active = ~prev_done if next_step else np.ones(num_envs, bool)
        keep = (1 - terminated[t][active])[:, None]
        ret[active] = ret[active] * gamma * keep + rewards[t][active]
        batch = ret[active].ravel()
        if batch.size:
            batch_mean, batch_var, n = np.mean(batch), np.var(batch), batch.size
            delta, total = batch_mean - mean, count + n
            m2 = var * count + batch_var * n + delta**2 * count * n / total
            mean, var, count = mean + delta * n / total, m2 / total, total
        prev_done = terminated[t] | truncated[t]
        out[t] = rewards[t] / np.sqrt(var + EPSILON)
    return out, (mean, var, count), ret


@pytest.mark.requires("mo_gymnasium")
@pytest.mark.parametrize("env_id", MO_ENVS)
def test_shared_scale_single_env_matches_the_reference(env_id):
    ours = NormalizeReward(mo_make(env_id), objectives="shared")
    raw = mo_make(env_id)
    rewards, ends, cuts, got = [], [], [], []
    for (_, reward, term, trunc, _), (_, scaled, *_) in play_single([raw, ours], 800, seed=7):
        rewards.append([reward])
        ends.append([term])
        cuts.append([trunc])
        got.append(scaled)
    # One environment: reset() keeps the return, so no step is left out.
    expected, (mean, var, count), ret = shared_scale_reference(
        np.array(rewards, np.float64), np.array(ends), np.array(cuts), 0.99, np.float64, False
    )
    np.testing.assert_allclose(np.array(got), expected[:, 0], rtol=RTOL)
    assert isinstance(ours.return_rms, RunningMeanStd)
    np.testing.assert_allclose([ours.return_rms.mean, ours.return_rms.var], [mean, var], rtol=RTOL)
    assert ours.return_rms.count == pytest.approx(count, rel=RTOL)
    np.testing.assert_allclose(ours.discounted_reward, ret, rtol=RTOL)
    # The ratio of two objectives' rewards is kept (per-objective statistics change it).
    nonzero = np.all(np.array(rewards)[:, 0] != 0, axis=-1)
    ratio = np.array(rewards)[nonzero, 0, 0] / np.array(rewards)[nonzero, 0, 1]
    np.testing.assert_allclose(np.array(got)[nonzero, 0] / np.array(got)[nonzero, 1], ratio)


@pytest.mark.requires("mo_gymnasium")
@pytest.mark.parametrize("env_id", MO_ENVS)
def test_shared_scale_vector_env_matches_the_reference(env_id):
    num_envs, seed = 3, 11
    ours = vector.NormalizeReward(mo_vector(env_id, num_envs), gamma=0.95, objectives="shared")
    raw = mo_vector(env_id, num_envs)
    for env in (ours, raw):
        env.reset(seed=seed)
    raw.action_space.seed(seed)
    rewards, ends, cuts, got = [], [], [], []
    for _ in range(500):
        actions = raw.action_space.sample()
        _, reward, term, trunc, _ = raw.step(actions)
        rewards.append(reward)
        ends.append(term)
        cuts.append(trunc)
        got.append(ours.step(actions)[1])
    expected, (mean, var, count), ret = shared_scale_reference(
        np.array(rewards, np.float64), np.array(ends), np.array(cuts), 0.95, np.float32, True
    )
    assert np.array(ends).any() or np.array(cuts).any()
    np.testing.assert_allclose(np.array(got), expected, rtol=RTOL, atol=1e-300)
    np.testing.assert_allclose([ours.return_rms.mean, ours.return_rms.var], [mean, var], rtol=RTOL)
    assert ours.return_rms.count == pytest.approx(count, rel=RTOL)
    np.testing.assert_array_equal(ours.accumulated_reward, ret)


# --- Every objective is the scalar wrapper on that objective (no MO-Gymnasium needed) ---


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_vector_each_objective_is_the_scalar_wrapper_on_its_column(mode):
    rng = np.random.default_rng(0)
    steps, num_envs, k = 60, 3, 2
    rewards = rng.normal(size=(steps, num_envs, k)) * [1.0, 100.0]
    rewards[7, 1, 0] = math.nan  # skipped by objective 0 of env 1 only
    ends, cuts = rng.random((2, steps, num_envs)) < 0.1
    metadata = {"autoreset_mode": mode}
    ours = vector.NormalizeReward(ScriptedVectorEnv(rewards, ends, cuts, metadata))
    columns = [
        vector.NormalizeReward(ScriptedVectorEnv(rewards[..., i], ends, cuts, metadata))
        for i in range(k)
    ]
    for env in (ours, *columns):
        env.reset()
    for t in range(steps):
        if t == 30:  # a partial reset zeroes those environments' returns, every objective
            for env in (ours, *columns):
                env.reset(options={"reset_mask": np.array([True, False, False])})
        got = ours.step(None)[1]
        expected = np.stack([column.step(None)[1] for column in columns], axis=-1)
        np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(ours.return_rms.samples, [c.return_rms.samples for c in columns])
    assert ours.return_rms.samples[0] == ours.return_rms.samples[1] - 1  # the NaN


def test_single_env_each_objective_is_the_scalar_wrapper_bit_for_bit():
    rewards = [(1.0, -3.0), (2.0, math.inf), (0.5, 2.0), (4.0, -1.0)]
    flags = [(False, False), (False, True), (True, False), (False, False)]
    ours = NormalizeReward(
        ScriptedEnv([(np.array(r), *f) for r, f in zip(rewards, flags, strict=True)])
    )
    scalars = [
        NormalizeReward(ScriptedEnv([(r[i], *f) for r, f in zip(rewards, flags, strict=True)]))
        for i in range(2)
    ]
    for _ in rewards:
        got = np.asarray(ours.step(0)[1])
        expected = [float(env.step(0)[1]) for env in scalars]
        assert got.tolist() == expected  # inf passes through, as the scalar wrapper's
    assert ours.return_rms.samples == [4, 3]
    assert [stats.get_state() for stats in ours.return_rms] == [
        env.return_rms.get_state() for env in scalars
    ]
    assert ours.discounted_reward.tolist() == [[env.discounted_reward[0] for env in scalars]]


# --- The reward's layout: set once, errors naming what differs ---


def test_objectives_must_be_each_or_shared():
    with pytest.raises(
        ValueError,
        match=r"objectives should be one of 'each', 'shared', got objectives='per_objective'\.",
    ):
        NormalizeReward(ScriptedEnv([]), objectives="per_objective")
    with pytest.raises(ValueError, match="got objectives=None"):
        vector.NormalizeReward(ScriptedVectorEnv(np.zeros((1, 2))), objectives=None)  # type: ignore[arg-type]  # deliberately invalid
    env = NormalizeReward(ScriptedEnv([]), objectives="shared")
    assert env.objectives == "shared"
    assert env._saved_kwargs["objectives"] == "shared"


@pytest.mark.parametrize(
    ("first", "then", "message"),
    [
        (
            1.0,
            np.ones(2),
            (
                "a vector of 2 objectives per environment, but this wrapper normalizes "
                r"one number \(reward shape \(\)"
            ),
        ),
        (np.ones(2), 1.0, r"one number per environment, but .* a vector of 2 objectives"),
        (np.ones(2), np.ones(3), "a vector of 3 objectives .* normalizes a vector of 2"),
    ],
)
def test_a_reward_that_changes_shape_is_refused(first, then, message):
    env = NormalizeReward(ScriptedEnv([(first, False, False), (then, False, False)]))
    env.reset()
    env.step(0)
    before = env.state_dict()
    with pytest.raises(ValueError, match="the environment returned a reward of " + message):
        env.step(0)
    np.testing.assert_array_equal(
        env.state_dict()["return_rms"].moments, before["return_rms"].moments
    )


def test_vector_rewards_that_change_shape_are_refused():
    flags = np.zeros((2, 3), bool)
    envs = vector.NormalizeReward(ScriptedVectorEnv(np.ones((2, 3, 2)), flags, flags))
    envs.reset()
    envs.step(None)
    envs.env.rewards = np.ones((2, 3))  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="returned rewards of one number per environment"):
        envs.step(None)


# --- Checkpoints of the vector layout ---


def scripted_mo_env(k: int, steps: int = 20, **kwargs) -> NormalizeReward:
    rng = np.random.default_rng(k)
    script = [(rng.normal(size=k), t % 7 == 6, False) for t in range(steps)]
    return NormalizeReward(ScriptedEnv(script), **kwargs)


@pytest.mark.parametrize(
    ("objectives", "stats_type"), [("each", ObjectiveStats), ("shared", RunningMeanStd)]
)
def test_save_and_load_round_trip_bit_exactly_and_a_fresh_wrapper_takes_the_layout(
    tmp_path, objectives, stats_type
):
    path = tmp_path / "mo.ckpt"
    env = scripted_mo_env(3, objectives=objectives)
    for _ in range(10):
        env.step(0)
    env.save(path)
    fresh = scripted_mo_env(3, objectives=objectives)
    fresh.load(path)
    before, after = env.state_dict(), fresh.state_dict()
    np.testing.assert_array_equal(after["return_rms"].moments, before["return_rms"].moments)
    np.testing.assert_array_equal(after["return_rms"].count_words, before["return_rms"].count_words)
    np.testing.assert_array_equal(after["discounted_reward"], before["discounted_reward"])
    assert isinstance(fresh.return_rms, stats_type)
    fresh.env.t = env.env.t  # type: ignore[attr-defined]  # the same script from here
    for _ in range(10):
        np.testing.assert_array_equal(fresh.step(0)[1], env.step(0)[1])
    assert np.sum(env.return_rms.samples) == 60  # 20 steps of 3 objectives


def test_vector_env_checkpoint_keeps_the_objective_axis(tmp_path):
    rewards = np.random.default_rng(1).normal(size=(8, 2, 3))
    flags = np.zeros((8, 2), bool)
    envs = vector.NormalizeReward(ScriptedVectorEnv(rewards, flags, flags))
    envs.reset()
    for _ in range(4):
        envs.step(None)
    envs.save(tmp_path / "v.ckpt")
    fresh = vector.NormalizeReward(ScriptedVectorEnv(rewards, flags, flags))
    fresh.load(tmp_path / "v.ckpt")
    assert isinstance(fresh.return_rms, ObjectiveStats)
    assert fresh.accumulated_reward.shape == (2, 3)
    assert fresh.accumulated_reward.dtype == np.float32
    np.testing.assert_array_equal(fresh.accumulated_reward, envs.accumulated_reward)
    assert fresh.return_rms.get_state() == envs.return_rms.get_state()


def saved(env, tmp_path: pathlib.Path, steps: int = 3) -> pathlib.Path:
    env.reset()
    for _ in range(steps):
        env.step(0)
    path = tmp_path / f"{id(env)}.ckpt"
    env.save(path)
    return path


@pytest.mark.parametrize(
    ("saved_env", "loading_env", "message"),
    [
        (
            lambda: scripted_mo_env(3),
            lambda: scripted_mo_env(2),
            (
                "holds a vector of 3 objectives per environment, but this wrapper normalizes a "
                r"vector of 2 objectives \(reward shape \(2,\)"
            ),
        ),
        (
            lambda: NormalizeReward(ScriptedEnv([(1.0, False, False)] * 5)),
            lambda: scripted_mo_env(2),
            "holds one number per environment, but this wrapper normalizes a vector of 2",
        ),
        (
            lambda: scripted_mo_env(2),
            lambda: NormalizeReward(ScriptedEnv([(1.0, False, False)] * 5)),
            r"holds a vector of 2 objectives .* normalizes one number \(reward shape \(\)",
        ),
        (
            lambda: scripted_mo_env(2),
            lambda: scripted_mo_env(2, objectives="shared"),
            "metadata 'objectives': checkpoint has 'each', expected 'shared'",
        ),
    ],
)
def test_a_checkpoint_of_another_layout_is_refused_naming_it(
    tmp_path, saved_env, loading_env, message
):
    path = saved(saved_env(), tmp_path)
    env = loading_env()
    env.step(0)
    before = env.state_dict()
    with pytest.raises(ValueError, match=message):
        env.load(path)
    after = env.state_dict()
    np.testing.assert_array_equal(after["return_rms"].moments, before["return_rms"].moments)


def test_a_failed_load_leaves_a_fresh_wrapper_free_to_take_any_layout(tmp_path):
    path = saved(scripted_mo_env(3, gamma=0.9), tmp_path)
    env = scripted_mo_env(2)
    with pytest.raises(ValueError, match=r"metadata 'gamma': checkpoint has 0\.9, expected 0\.99"):
        env.load(path)
    assert np.asarray(env.step(0)[1]).shape == (2,)


def test_load_state_dict_checks_the_layout():
    env = scripted_mo_env(2)
    env.step(0)
    other = scripted_mo_env(3)
    other.step(0)
    with pytest.raises(ValueError, match="the state holds returns of a vector of 3 objectives"):
        env.load_state_dict(other.state_dict())
    state = env.state_dict()
    state["return_rms"] = scripted_mo_env(2, objectives="shared").state_dict()["return_rms"]
    with pytest.raises(
        ValueError,
        match=r"ObjectiveStats holds statistics of shape \(2,\), got statistics of shape \(\)\.",
    ):
        env.load_state_dict(state)


def test_objective_stats_convert_to_the_jax_core_and_pickle():
    import pickle

    env = scripted_mo_env(2)
    for _ in range(5):
        env.step(0)
    stats = env.return_rms
    core = stats.to_running_stats(np.float32)
    assert core.mean.shape == (2,)
    assert core.mean.dtype == np.float32
    np.testing.assert_allclose(core.mean, stats.mean, rtol=1e-7)
    restored = pickle.loads(pickle.dumps(stats))
    assert restored.get_state() == stats.get_state()
    message = r"num_objectives should be an integer >= 1, got num_objectives=0\."
    with pytest.raises(ValueError, match=message):
        ObjectiveStats(0)
    for count in (2.0, True, "2"):  # the core's check_count: not an integer, a TypeError
        message = f"num_objectives should be an integer, got num_objectives={count!r}"
        with pytest.raises(TypeError, match=message):
            ObjectiveStats(count)  # type: ignore[arg-type]  # deliberately invalid


@pytest.mark.requires("mo_gymnasium")
def test_mo_gymnasiums_linear_reward_gives_one_number_normalized_as_usual():
    from mo_gymnasium.wrappers import LinearReward

    weights = np.array([0.9, 0.1])
    ours = NormalizeReward(LinearReward(mo_make("deep-sea-treasure-v0"), weights))
    theirs = gym_wrappers.NormalizeReward(LinearReward(mo_make("deep-sea-treasure-v0"), weights))
    for (_, got, *_), (_, expected, *_) in play_single([ours, theirs], 300, seed=2):
        assert np.ndim(got) == 0
        np.testing.assert_allclose(got, expected, rtol=RTOL)


def test_vector_normalize_helper_works_objective_by_objective():
    rewards = np.random.default_rng(2).normal(size=(5, 2, 3)) * [1.0, 10.0, 100.0]
    flags = np.zeros((5, 2), bool)
    ours = vector.NormalizeReward(ScriptedVectorEnv(rewards, flags, flags))
    columns = [
        vector.NormalizeReward(ScriptedVectorEnv(rewards[..., i], flags, flags)) for i in range(3)
    ]
    for env in (ours, *columns):
        env.reset()
        env.step(None)
    got = ours.normalize(rewards[1])
    expected = np.stack([c.normalize(rewards[1, :, i]) for i, c in enumerate(columns)], axis=-1)
    np.testing.assert_array_equal(got, expected)
    assert ours.return_rms.samples == [4, 4, 4]


def test_shared_scale_leaves_a_non_finite_objective_out_of_the_batch():
    script = [(np.array([1.0, 2.0]), False, False), (np.array([3.0, math.nan]), False, False)]
    env = NormalizeReward(ScriptedEnv(script), gamma=0.5, objectives="shared")
    env.step(0)
    scaled = np.asarray(env.step(0)[1])
    expected = RunningMeanStd()
    expected.update(np.array([1.0, 2.0]))
    expected.update(np.array([3.5]))  # 0.5 * 1 + 3; objective 1's return stays 2
    assert env.return_rms.get_state() == expected.get_state()
    assert env.discounted_reward.tolist() == [[3.5, 2.0]]
    assert scaled[0] == 3.0 / math.sqrt(float(expected.var) + 1e-8)
    assert math.isnan(scaled[1])


# --- Statistics assigned to return_rms: kept and used, checked against the layout ---

# Two steps of a vector of 2 objectives (deep-sea-treasure's first treasure, then its last),
# per sub-environment of the vector wrapper.
ASSIGNED_REWARDS = np.array([[[0.7, -1.0], [2.0, -3.0]], [[23.7, -1.0], [5.0, -1.0]]])


def declared(env, k: int):
    """``env`` declaring a reward of k objectives, as MO-Gymnasium's ``reward_space`` does."""
    env.reward_space = gym.spaces.Box(-np.inf, np.inf, (k,), np.float64)
    return env


def scripted_wrapper(kind: str, rewards: np.ndarray, declare: int | None = None, **kwargs):
    """The single wrapper over ``rewards[:, 0]`` or the vector one over ``rewards`` (T, N, ...).

    No episode ends; ``declare`` makes the environment declare that many objectives.
    """
    if kind == "single":
        env: gym.Env = ScriptedEnv([(reward, False, False) for reward in rewards[:, 0]])
        env = env if declare is None else declared(env, declare)
        return NormalizeReward(env, **kwargs)
    flags = np.zeros(rewards.shape[:2], bool)
    envs = ScriptedVectorEnv(rewards, flags, flags)
    envs = envs if declare is None else declared(envs, declare)
    return vector.NormalizeReward(envs, **kwargs)


def rewards_of(kind: str, rewards: np.ndarray) -> np.ndarray:
    """What the scripted wrapper of ``kind`` steps through: one environment's, or all."""
    return rewards[:, 0] if kind == "single" else rewards


def trained_stats(objectives: str, variances):
    """Statistics a run leaves: 10 samples of mean 0.5 and ``variances`` (one per objective)."""
    if objectives == "shared":
        stats = RunningMeanStd()
        stats.count, stats.mean, stats.var = 10.0001, 0.5, variances
        return stats
    objective_stats = ObjectiveStats(len(variances))
    for each, var in zip(objective_stats, variances, strict=True):
        each.count, each.mean, each.var = 10.0001, 0.5, var
    return objective_stats


def chan_merge(moments, batch: np.ndarray):
    """``(mean, var, count)`` after merging ``batch``, as Gymnasium's ``RunningMeanStd``."""
    mean, var, count = map(np.float64, moments)
    batch_mean, batch_var, n = np.mean(batch), np.var(batch), batch.size
    delta, total = batch_mean - mean, count + n
    m2 = var * count + batch_var * n + delta**2 * count * n / total
    return mean + delta * n / total, m2 / total, total


@pytest.mark.parametrize("kind", ["single", "vector"])
@pytest.mark.parametrize(("objectives", "variances"), [("each", [4.0, 0.25]), ("shared", 16.0)])
@pytest.mark.parametrize("declare", [None, 2])
def test_statistics_assigned_before_the_first_step_are_kept_and_used(
    kind, objectives, variances, declare
):
    env = scripted_wrapper(kind, ASSIGNED_REWARDS, declare, objectives=objectives)
    rewards = rewards_of(kind, ASSIGNED_REWARDS)
    stats = trained_stats(objectives, variances)
    env.return_rms = stats  # before the first step: fits the declared layout, or any layout
    env.update_running_mean = False
    # Frozen: reward / sqrt(var + epsilon) with the assigned variances ([0.35, -2.0] and
    # [0.175, -0.25] for deep-sea-treasure's first treasure), not the prior's 1.
    got = np.asarray(env.step(0)[1])
    np.testing.assert_allclose(got, rewards[0] / np.sqrt(np.array(variances) + EPSILON), rtol=RTOL)
    assert env.return_rms is stats
    # Learning: the assigned statistics merge the returns, float32 ones for the vector wrapper.
    env.update_running_mean = True
    got = np.asarray(env.step(0)[1])
    carry = np.float64 if kind == "single" else np.float32
    returns = (0.99 * rewards[0].astype(carry) + rewards[1]).astype(carry)
    if objectives == "each":
        merged = [chan_merge((0.5, v, 10.0001), returns[..., i]) for i, v in enumerate(variances)]
        var = np.array([moments[1] for moments in merged])
    else:
        var = chan_merge((0.5, variances, 10.0001), returns)[1]
    np.testing.assert_allclose(got, rewards[1] / np.sqrt(var + EPSILON), rtol=RTOL)
    np.testing.assert_allclose(stats.var, var, rtol=RTOL)
    assert env.return_rms is stats


@pytest.mark.parametrize("kind", ["single", "vector"])
def test_a_declared_reward_space_gives_return_rms_its_layout_from_construction(kind):
    env = scripted_wrapper(kind, ASSIGNED_REWARDS, declare=2)
    assert isinstance(env.return_rms, ObjectiveStats)
    assert len(env.return_rms) == 2
    env.return_rms.set_state(trained_stats("each", [4.0, 0.25]).get_state())
    env.update_running_mean = False
    got = np.asarray(env.step(0)[1])
    expected = rewards_of(kind, ASSIGNED_REWARDS)[0] / np.sqrt(np.array([4.0, 0.25]) + EPSILON)
    np.testing.assert_allclose(got, expected, rtol=RTOL)  # [0.35, -2.0] for the first env


SCALAR_STEP_REFUSES_2 = (
    r"return_rms holds an ObjectiveStats of 2 objectives, but the environment returned a reward "
    r"of one number per environment: return_rms should be a RunningMeanStd of shape \(\)"
)


def test_default_statistics_of_a_declared_layout_give_way_to_another_first_reward():
    # The environment declares 2 objectives and returns one number, as a wrapper that
    # scalarizes the reward (other than LinearReward) gives.
    env = NormalizeReward(declared(ScriptedEnv([(2.0, False, False)] * 2), 2))
    assert isinstance(env.return_rms, ObjectiveStats)
    assert env.discounted_reward.shape == (1, 2)
    var = chan_merge((0.0, 1.0, 1e-4), np.array([2.0]))[1]  # the prior and one return
    np.testing.assert_allclose(float(env.step(0)[1]), 2.0 / np.sqrt(var + EPSILON), rtol=RTOL)
    assert isinstance(env.return_rms, RunningMeanStd)
    assert env.return_rms.samples == 1
    assert env.discounted_reward.tolist() == [2.0]
    filled = NormalizeReward(declared(ScriptedEnv([(2.0, False, False)]), 2))
    filled.return_rms.set_state(trained_stats("each", [4.0, 0.25]).get_state())
    with pytest.raises(ValueError, match=SCALAR_STEP_REFUSES_2):
        filled.step(0)


def linear_reward(env: gym.Env, weights) -> gym.Env:
    """MO-Gymnasium's ``LinearReward``: the dot product of the vector reward and ``weights``."""
    from mo_gymnasium.wrappers import LinearReward

    return LinearReward(env, np.asarray(weights, np.float64))


@pytest.mark.requires("mo_gymnasium")
@pytest.mark.parametrize("outer", [None, gym_wrappers.RecordEpisodeStatistics])
def test_linear_reward_in_the_stack_declares_no_layout(outer):
    # The environment declares 2 objectives; LinearReward, alone or below another wrapper,
    # gives objective 0 alone (2.0).
    script = [(np.array([2.0, 5.0]), False, False)] * 2
    scalarized = linear_reward(declared(ScriptedEnv(script), 2), [1.0, 0.0])
    env = NormalizeReward(scalarized if outer is None else outer(scalarized))
    assert type(env.return_rms) is RunningMeanStd
    assert env.discounted_reward.shape == (1,)
    var = chan_merge((0.0, 1.0, 1e-4), np.array([2.0]))[1]  # the prior and one return
    np.testing.assert_allclose(float(env.step(0)[1]), 2.0 / np.sqrt(var + EPSILON), rtol=RTOL)
    assert type(env.return_rms) is RunningMeanStd
    assert env.return_rms.samples == 1
    assert env.discounted_reward.tolist() == [2.0]
    # Nothing declared: any layout-valid value is kept, and the first step checks it.
    filled = NormalizeReward(linear_reward(declared(ScriptedEnv(script), 2), [1.0, 0.0]))
    filled.return_rms = trained_stats("each", [4.0, 0.25])
    with pytest.raises(ValueError, match=SCALAR_STEP_REFUSES_2):
        filled.step(0)


@pytest.mark.requires("mo_gymnasium")
def test_linear_reward_evaluation_takes_the_training_state_before_the_first_step(tmp_path):
    env_id, weights, seed = "deep-sea-treasure-v0", [0.9, 0.1], 5
    train = NormalizeReward(linear_reward(mo_make(env_id), weights))
    for _ in play_single([train], 300, seed=seed):
        pass
    state = train.return_rms.get_state()
    var = float(train.return_rms.var)
    assert var > 10.0  # far from the prior's 1
    evaluation = NormalizeReward(linear_reward(mo_make(env_id), weights))
    assert type(evaluation.return_rms) is RunningMeanStd
    assert evaluation.discounted_reward.shape == (1,)
    evaluation.return_rms.set_state(state)  # before the first step
    evaluation.save(tmp_path / "eval.ckpt")  # one number: a scalar reward's checkpoint
    scalar = NormalizeReward(ScriptedEnv([]))
    scalar.load(tmp_path / "eval.ckpt")
    assert scalar.return_rms.get_state() == state
    evaluation.update_running_mean = False
    raw = linear_reward(mo_make(env_id), weights)
    for (_, got, *_), (_, reward, *_) in play_single([evaluation, raw], 60, seed=11):
        assert np.ndim(got) == 0
        np.testing.assert_allclose(got, np.float64(reward) / np.sqrt(var + 1e-8), rtol=RTOL)
    assert evaluation.return_rms.get_state() == state  # frozen


def test_the_adapter_never_imports_mo_gymnasium():
    code = (
        "import sys, gymnasium as gym\n"
        "from rewardnorm_jax.gymnasium import NormalizeReward, vector\n"
        "NormalizeReward(gym.make('CartPole-v1'))\n"
        "vector.NormalizeReward(gym.make_vec('CartPole-v1', 2))\n"
        "assert 'mo_gymnasium' not in sys.modules, sorted(sys.modules)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.requires("mo_gymnasium")
@pytest.mark.parametrize("kind", ["single", "vector"])
@pytest.mark.parametrize("objectives", ["each", "shared"])
@pytest.mark.parametrize("transfer", ["assign", "set_state"])
def test_gymnasiums_evaluation_pattern_normalizes_with_the_training_statistics(
    kind, objectives, transfer
):
    env_id, num_envs, seed = "deep-sea-treasure-v0", 3, 4

    def make(wrap: bool):
        env = mo_make(env_id) if kind == "single" else mo_vector(env_id, num_envs)
        if not wrap:
            return env
        wrapper = NormalizeReward if kind == "single" else vector.NormalizeReward
        return wrapper(env, objectives=objectives)  # type: ignore[arg-type]

    train = make(wrap=True)
    train.reset(seed=seed)
    train.action_space.seed(seed)
    for _ in range(200):
        _, _, term, trunc, _ = train.step(train.action_space.sample())
        if kind == "single" and (term or trunc):
            train.reset()
    evaluation, raw = make(wrap=True), make(wrap=False)
    if transfer == "assign":  # Gymnasium's pattern, right after construction
        evaluation.return_rms = train.return_rms
    else:
        evaluation.return_rms.set_state(train.return_rms.get_state())
    evaluation.update_running_mean = False
    state = train.return_rms.get_state()
    var = np.asarray(train.return_rms.var, np.float64)  # (2,) for "each", () for "shared"
    assert np.all(var > 10.0)  # far from the prior's 1
    for env in (raw, evaluation):
        env.reset(seed=9)
    raw.action_space.seed(9)
    for _ in range(40):
        action = raw.action_space.sample()
        _, reward, term, trunc, _ = raw.step(action)
        got = evaluation.step(action)[1]
        np.testing.assert_allclose(got, reward / np.sqrt(var + EPSILON), rtol=RTOL)
        if kind == "single" and (term or trunc):
            for env in (raw, evaluation):
                env.reset()
    assert train.return_rms.get_state() == state  # frozen: evaluation learned nothing
    assert (evaluation.return_rms is train.return_rms) == (transfer == "assign")


@pytest.mark.parametrize("kind", ["single", "vector"])
@pytest.mark.parametrize("when", ["before", "after"])
def test_gymnasiums_running_mean_std_of_k_objectives_becomes_their_objective_stats(kind, when):
    theirs = GymRunningMeanStd(shape=(2,))
    theirs.update(np.array([[1.0, 10.0], [3.0, 30.0], [5.0, -20.0]]))
    rewards = rewards_of(kind, ASSIGNED_REWARDS)
    env = scripted_wrapper(kind, ASSIGNED_REWARDS)
    if when == "after":  # the first step has set the layout
        env.step(0)
    env.return_rms = theirs
    stats = env.return_rms
    assert isinstance(stats, ObjectiveStats)
    np.testing.assert_array_equal(stats.mean, theirs.mean)  # [3.0, 6.6667]
    np.testing.assert_allclose(stats.var, theirs.var, rtol=1e-15)  # [2.6667, 422.22]
    np.testing.assert_allclose(stats.count, [theirs.count] * 2, rtol=1e-15)
    assert stats.samples == [3, 3]
    env.update_running_mean = False
    got = np.asarray(env.step(0)[1])
    reward = rewards[0] if when == "before" else rewards[1]
    np.testing.assert_allclose(got, reward / np.sqrt(theirs.var + EPSILON), rtol=RTOL)


def stepped(kind: str, objectives: str, k: int):
    """A wrapper after one step, of rewards of k objectives (0: one number)."""
    rewards = ASSIGNED_REWARDS[..., :k] if k else ASSIGNED_REWARDS[..., 0]
    env = scripted_wrapper(kind, rewards, objectives=objectives)
    env.step(0)
    return env


EACH_OF_2 = (
    r"return_rms should be an ObjectiveStats of 2 objectives \(or Gymnasium's RunningMeanStd "
    r"of shape \(2,\), converted\), as objectives='each' keeps statistics for each of the 2 "
    "objectives; got "
)
SHARED_OF_2 = (
    r"return_rms should be a RunningMeanStd of shape \(\) \(this library's or Gymnasium's\), "
    "as objectives='shared' keeps one scale across the 2 objectives; got "
)
ONE_NUMBER = (
    r"return_rms should be a RunningMeanStd of shape \(\) \(this library's or Gymnasium's\) "
    "for this wrapper's reward of one number; got "
)


@pytest.mark.parametrize("kind", ["single", "vector"])
@pytest.mark.parametrize(
    ("objectives", "k", "value", "message"),
    [
        ("each", 2, RunningMeanStd, EACH_OF_2 + r"a RunningMeanStd of shape \(\)\."),
        ("each", 2, lambda: GymRunningMeanStd(shape=()), EACH_OF_2 + r"a .* shape \(\)\."),
        ("each", 2, lambda: GymRunningMeanStd(shape=(3,)), EACH_OF_2 + r"a .* shape \(3,\)\."),
        ("each", 2, lambda: ObjectiveStats(3), EACH_OF_2 + "an ObjectiveStats of 3 objectives"),
        ("each", 2, lambda: None, EACH_OF_2 + r"None \(a NoneType, not running statistics\)"),
        ("shared", 2, lambda: GymRunningMeanStd(shape=(2,)), SHARED_OF_2 + r"a .* \(2,\)\."),
        ("shared", 2, lambda: ObjectiveStats(2), SHARED_OF_2 + "an ObjectiveStats of 2"),
        ("each", 0, lambda: ObjectiveStats(2), ONE_NUMBER + "an ObjectiveStats of 2 objectives"),
        ("each", 0, lambda: GymRunningMeanStd(shape=(1,)), ONE_NUMBER + r"a .* shape \(1,\)\."),
    ],
)
def test_return_rms_of_another_layout_is_refused_at_assignment(kind, objectives, k, value, message):
    env = stepped(kind, objectives, k)
    before = env.return_rms
    with pytest.raises(ValueError, match=message):
        env.return_rms = value()
    assert env.return_rms is before


@pytest.mark.parametrize("kind", ["single", "vector"])
@pytest.mark.parametrize(
    ("objectives", "value", "message"),
    [
        ("each", RunningMeanStd, EACH_OF_2 + r"a RunningMeanStd of shape \(\)\."),
        ("each", lambda: GymRunningMeanStd(shape=()), EACH_OF_2 + r"a .* shape \(\)\."),
        ("each", lambda: GymRunningMeanStd(shape=(3,)), EACH_OF_2 + r"a .* shape \(3,\)\."),
        ("each", lambda: ObjectiveStats(3), EACH_OF_2 + "an ObjectiveStats of 3 objectives"),
        ("shared", lambda: GymRunningMeanStd(shape=(2,)), SHARED_OF_2 + r"a .* \(2,\)\."),
        ("shared", lambda: ObjectiveStats(2), SHARED_OF_2 + "an ObjectiveStats of 2"),
    ],
)
def test_return_rms_of_another_layout_than_declared_is_refused_at_assignment(
    kind, objectives, value, message
):
    env = scripted_wrapper(kind, ASSIGNED_REWARDS, declare=2, objectives=objectives)
    before = env.return_rms
    with pytest.raises(ValueError, match=message):
        env.return_rms = value()
    assert env.return_rms is before
    assert env._objective_shape is None  # refused before any step


@pytest.mark.requires("mo_gymnasium")
@pytest.mark.parametrize("kind", ["single", "vector"])
def test_mo_gymnasiums_declared_layout_checks_assignments(kind):
    def make(objectives: str):
        if kind == "single":
            return NormalizeReward(mo_make("deep-sea-treasure-v0"), objectives=objectives)
        envs = mo_vector("deep-sea-treasure-v0", 3)
        return vector.NormalizeReward(envs, objectives=objectives)

    each = make("each")
    with pytest.raises(ValueError, match=EACH_OF_2 + r"a RunningMeanStd of shape \(\)\."):
        each.return_rms = RunningMeanStd()
    with pytest.raises(ValueError, match=EACH_OF_2 + r"a .* shape \(3,\)\."):
        each.return_rms = GymRunningMeanStd(shape=(3,))
    shared, stats = make("shared"), RunningMeanStd()
    shared.return_rms = stats  # one scale across the 2 objectives: valid
    assert shared.return_rms is stats


@pytest.mark.parametrize(
    ("objectives", "value", "message"),
    [
        ("shared", lambda: ObjectiveStats(2), "as objectives='shared' keeps one scale; got an"),
        ("each", lambda: GymRunningMeanStd(shape=(2, 3)), r"per objective; got a .* \(2, 3\)\."),
        ("each", lambda: 1.0, r"got 1\.0 \(a float, not running statistics\)"),
    ],
)
def test_return_rms_valid_for_no_layout_is_refused_before_the_first_step(
    objectives, value, message
):
    env = NormalizeReward(ScriptedEnv([]), objectives=objectives)
    with pytest.raises(ValueError, match="return_rms should be a RunningMeanStd .*" + message):
        env.return_rms = value()


@pytest.mark.parametrize("kind", ["single", "vector"])
@pytest.mark.parametrize(
    ("k", "value", "holds", "returned"),
    [
        (2, RunningMeanStd, r"a RunningMeanStd of shape \(\)", "a vector of 2 objectives"),
        (
            2,
            lambda: ObjectiveStats(3),
            "an ObjectiveStats of 3 objectives",
            "a vector of 2 objectives",
        ),
        (0, lambda: ObjectiveStats(2), "an ObjectiveStats of 2 objectives", "one number"),
    ],
)
def test_statistics_assigned_before_the_first_step_that_do_not_fit_are_named_by_it(
    kind, k, value, holds, returned
):
    rewards = ASSIGNED_REWARDS[..., :k] if k else ASSIGNED_REWARDS[..., 0]
    env = scripted_wrapper(kind, rewards)
    stats = value()
    env.return_rms = stats
    returns_attr = env._checkpointed[0][1]
    returns = getattr(env, returns_attr)
    output = "a reward of" if kind == "single" else "rewards of"
    with pytest.raises(
        ValueError,
        match=(
            f"return_rms holds {holds}, but the environment returned {output} {returned} "
            "per environment: return_rms should be "
        ),
    ):
        env.step(0)
    assert env.return_rms is stats
    assert env._objective_shape is None  # nothing changed: the layout is still unset
    assert getattr(env, returns_attr) is returns


def test_load_restores_into_assigned_statistics_or_names_the_misfit(tmp_path):
    path = saved(scripted_mo_env(2), tmp_path)
    env = scripted_mo_env(2)
    stats = ObjectiveStats(2)
    env.return_rms = stats
    env.load(path)
    assert env.return_rms is stats
    assert stats.samples == [3, 3]
    scalar = scripted_mo_env(2)
    scalar.return_rms = RunningMeanStd()
    with pytest.raises(
        ValueError,
        match=(
            r"return_rms holds a RunningMeanStd of shape \(\), but the state holds returns of a "
            "vector of 2 objectives per environment: return_rms should be an ObjectiveStats of 2"
        ),
    ):
        scalar.load(path)


def test_a_shaped_running_mean_std_becomes_the_objective_stats_it_fits():
    shaped = RunningMeanStd((2,))
    shaped.update(np.array([[1.0, 10.0], [3.0, 30.0]]))
    env = scripted_mo_env(2)
    env.return_rms = shaped
    assert isinstance(env.return_rms, ObjectiveStats)
    assert (
        np.asarray(env.return_rms.stats.moments).tobytes()
        == np.asarray(shaped.stats.moments).tobytes()
    )
    env.step(0)  # each objective's statistics learn that objective's return
    assert env.return_rms.samples == [3, 3]
    converted = ObjectiveStats.from_running_stats(shaped.stats)
    assert isinstance(converted, ObjectiveStats)
    assert converted.samples == [2, 2]
