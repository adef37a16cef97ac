"""Single-environment Gymnasium adapter: rewardnorm_jax.gymnasium against Gymnasium's wrappers.

Gymnasium 1.3.0 is installed; its single-env wrappers are the reference (1.4.0
changed only the constructor checks there, tested here from their messages).
"""

import copy
import math
import pickle
import re
from typing import Any

import gymnasium as gym
import jax
import numpy as np
import pytest
from gymnasium import wrappers as gym_wrappers
from gymnasium.error import InvalidBound
from gymnasium.wrappers.utils import RunningMeanStd as GymRunningMeanStd

import rewardnorm_jax as rn
from benchmarks import gymnasium_overhead
from rewardnorm_jax.gymnasium import ClipReward, NormalizeReward, RunningMeanStd, TransformReward
from rewardnorm_jax.gymnasium import vector as rn_vector

RTOL = 1e-12  # agreement with Gymnasium: float64 rounding (the golden tolerance)


class ScriptedEnv(gym.Env):
    """Plays a fixed list of (reward, terminated, truncated); reset does not rewind."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, script):
        self.script = list(script)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action):
        reward, terminated, truncated = self.script[self.t]
        self.t += 1
        return np.zeros(1, np.float32), reward, terminated, truncated, {}


def run_side_by_side(env_id, steps, seed, freeze=(), **kwargs):
    """Steps Gymnasium's wrapper and ours on identically seeded envs and actions."""
    theirs = gym_wrappers.NormalizeReward(gym.make(env_id), **kwargs)
    ours = NormalizeReward(gym.make(env_id), **kwargs)
    results: dict[str, list[tuple]] = {"theirs": [], "ours": []}
    for name, env in (("theirs", theirs), ("ours", ours)):
        env.reset(seed=seed)
        env.action_space.seed(seed)
        for t in range(steps):
            env.update_running_mean = t not in freeze
            obs, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            results[name].append((obs, reward, terminated, truncated, env.discounted_reward[0]))
            if terminated or truncated:
                env.reset()
    return results, theirs, ours


def test_golden_mountain_car_continuous():
    for wrap, golden in ((False, 0.0008876301247721108), (True, 0.010162116476634746)):
        env = gym.make("MountainCarContinuous-v0")
        if wrap:
            env = NormalizeReward(env, gamma=0.99, epsilon=1e-8)
        env.reset(seed=123)
        env.action_space.seed(123)
        rewards: list[float] = []
        terminated, truncated = False, False
        while not (terminated or truncated):
            _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            rewards.append(float(reward))
        assert len(rewards) == 999
        np.testing.assert_allclose(np.var(rewards), golden, rtol=RTOL, atol=0)


@pytest.mark.parametrize(
    ("env_id", "steps", "kwargs"),
    [
        ("CartPole-v1", 1500, {}),  # many terminations: the return restarts from r
        ("MountainCarContinuous-v0", 2100, {"gamma": 0.9, "epsilon": 1e-4}),  # truncations
    ],
)
def test_side_by_side_with_gymnasium(env_id, steps, kwargs):
    freeze = set(range(300, 420))  # frozen statistics for a while, the return still runs
    results, theirs, ours = run_side_by_side(env_id, steps, seed=7, freeze=freeze, **kwargs)
    for (o1, r1, te1, tr1, g1), (o2, r2, te2, tr2, g2) in zip(
        results["theirs"], results["ours"], strict=True
    ):
        np.testing.assert_array_equal(o1, o2)
        assert (te1, tr1) == (te2, tr2)
        assert g1 == g2  # the return recurrence is bit-identical
        assert type(r2) is type(r1) is np.float64
        np.testing.assert_allclose(r2, r1, rtol=RTOL, atol=0)
    assert any(step[2] or step[3] for step in results["theirs"])
    assert ours.return_rms.samples == steps - len(freeze)
    np.testing.assert_allclose(ours.return_rms.count, theirs.return_rms.count, rtol=1e-15)
    np.testing.assert_allclose(ours.return_rms.mean, theirs.return_rms.mean, rtol=RTOL)
    np.testing.assert_allclose(ours.return_rms.var, theirs.return_rms.var, rtol=RTOL)


def test_bit_identical_to_gymnasium_with_its_own_statistics_object():
    """With Gymnasium's RunningMeanStd swapped in, only the shared formulas differ: none."""
    theirs = gym_wrappers.NormalizeReward(gym.make("CartPole-v1"))
    ours = NormalizeReward(gym.make("CartPole-v1"))
    ours.return_rms = GymRunningMeanStd(shape=())
    outputs: dict[Any, list] = {}
    for env in (theirs, ours):
        env.reset(seed=3)
        env.action_space.seed(3)
        outputs[env] = []
        for _ in range(600):
            _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            outputs[env].append(reward)
            if terminated or truncated:
                env.reset()
    np.testing.assert_array_equal(outputs[ours], outputs[theirs])


def test_tracked_return_follows_semantics_example():
    # gamma = 0.5, rewards 1, 2, 3 per episode, terminating on the 3rd.
    script = [(1.0, False, False), (2.0, False, False), (3.0, True, False)] * 2
    env = NormalizeReward(ScriptedEnv(script), gamma=0.5)
    env.reset()
    tracked = []
    for t in range(6):
        env.step(0)
        tracked.append(float(env.discounted_reward[0]))
        if t == 2:
            env.reset()  # does not clear the return
    assert tracked == [1.0, 2.5, 3.0, 2.5, 3.25, 3.0]


def test_first_step_closed_form_and_truncation_ignored():
    env = NormalizeReward(ScriptedEnv([(1.0, False, True), (1.0, False, False)]))
    env.reset()
    _, reward, *_ = env.step(0)
    assert env.return_rms.mean == 1 / 1.0001
    np.testing.assert_allclose(env.return_rms.var, 1e-4 * (1 + 1 / 1.0001) / 1.0001, rtol=1e-15)
    assert round(float(reward), 1) == 70.7
    env.step(0)
    assert env.discounted_reward[0] == 1.0 * 0.99 + 1.0  # truncated did not reset it


def test_non_finite_reward_passes_through_and_leaves_statistics_alone():
    rewards = [0.5, -1.0, 2.0, 0.25, 1.5]
    with_nan = NormalizeReward(
        ScriptedEnv(
            [(r, False, False) for r in rewards[:2]]
            + [(math.nan, False, False), (math.inf, False, False)]
            + [(r, False, False) for r in rewards[2:]]
        )
    )
    without = NormalizeReward(ScriptedEnv([(r, False, False) for r in rewards]))
    with_nan.reset()
    without.reset()
    out_nan = [with_nan.step(0)[1] for _ in range(len(rewards) + 2)]
    out = [without.step(0)[1] for _ in rewards]
    assert math.isnan(out_nan[2])
    assert out_nan[3] == math.inf
    np.testing.assert_array_equal(out_nan[:2] + out_nan[4:], out)
    assert with_nan.return_rms.get_state() == without.return_rms.get_state()


@pytest.mark.parametrize("gamma", [-1.0, -0.01, 1.01, 2.0, 99, math.nan])
def test_gamma_outside_unit_interval_is_rejected(gamma):
    with pytest.raises(InvalidBound, match="`gamma` should be in the interval"):
        NormalizeReward(ScriptedEnv([]), gamma=gamma)


@pytest.mark.parametrize("epsilon", [0.0, -1e-8, -1.0, math.nan, math.inf])
def test_non_positive_epsilon_is_rejected(epsilon):
    with pytest.raises(InvalidBound, match="`epsilon` should be strictly positive"):
        NormalizeReward(ScriptedEnv([]), epsilon=epsilon)


@pytest.mark.parametrize("gamma", [0, 0.0, 0.5, 0.99, 1.0])
def test_gamma_inside_unit_interval_is_accepted(gamma):
    assert NormalizeReward(ScriptedEnv([]), gamma=gamma).gamma == gamma


def test_wrapper_interface_matches_gymnasium():
    base = gym.make("CartPole-v1")
    env = NormalizeReward(base, gamma=0.95, epsilon=1e-6)
    assert isinstance(env, gym.Wrapper)
    assert env.env is base
    assert env.unwrapped is base.unwrapped
    assert (env.gamma, env.epsilon) == (0.95, 1e-6)
    assert env.update_running_mean is True
    env.update_running_mean = False
    assert env.update_running_mean is False
    assert env._saved_kwargs == {"gamma": 0.95, "epsilon": 1e-6}
    np.testing.assert_array_equal(env.discounted_reward, np.array([0.0]))
    # The spec rebuilds the wrapper stack, ours included.
    assert env.spec is not None
    rebuilt = gym.make(env.spec)
    assert isinstance(rebuilt, NormalizeReward)
    assert rebuilt.gamma == 0.95


def test_statistics_state_round_trips_bit_exactly():
    env = NormalizeReward(gym.make("CartPole-v1"))
    env.reset(seed=0)
    env.action_space.seed(0)
    for _ in range(200):
        if any(env.step(env.action_space.sample())[2:4]):
            env.reset()
    state = env.return_rms.get_state()
    assert set(state) == {"mean", "mean_low", "m2", "m2_low", "samples"}
    assert state["samples"] == 200

    restored = NormalizeReward(gym.make("CartPole-v1"))
    restored.return_rms.set_state(state)
    for other in (
        restored.return_rms,
        pickle.loads(pickle.dumps(env.return_rms)),
        copy.deepcopy(env.return_rms),
        RunningMeanStd.from_state(state),
    ):
        assert other.get_state() == state
        assert (other.mean, other.var, other.count) == (
            env.return_rms.mean,
            env.return_rms.var,
            env.return_rms.count,
        )
    with pytest.raises(ValueError, match="samples"):
        RunningMeanStd.from_state({**state, "samples": -1})
    with pytest.raises(ValueError, match="missing"):
        RunningMeanStd.from_state({"mean": 0.0})


def test_conversion_to_and_from_the_jax_core():
    rng = np.random.default_rng(0)
    rms = RunningMeanStd()
    for size in (1, 5, 3):
        rms.update(rng.normal(3.0, 2.0, size))
    with jax.enable_x64(True):
        stats = rms.to_running_stats(np.float64)
        assert stats.mean.dtype == np.float64
        assert int(rn.count_as_int(stats)) == rms.samples == 9
        assert RunningMeanStd.from_running_stats(stats).get_state() == rms.get_state()
        # Continuing in the core or on the host gives the same statistics.
        batch = rng.normal(3.0, 2.0, 4)
        core = RunningMeanStd.from_running_stats(jax.jit(rn.merge_stats)(stats, batch))
        rms.update(batch)
        assert core.samples == rms.samples
        np.testing.assert_allclose(core.mean, rms.mean, rtol=1e-14)
        np.testing.assert_allclose(core.var, rms.var, rtol=1e-14)
    stats32 = rms.to_running_stats(np.float32)
    assert stats32.mean.dtype == np.float32
    back = RunningMeanStd.from_running_stats(stats32)
    np.testing.assert_allclose(back.mean, rms.mean, rtol=1e-13)
    np.testing.assert_allclose(back.m2, rms.m2, rtol=1e-13)
    # Core float32 statistics -> host -> core is exact, low words included.
    core32 = jax.jit(rn.merge_stats)(
        rn.init_stats((), np.float32), np.array([0.1, 0.7, 1.3], np.float32)
    )
    again = RunningMeanStd.from_running_stats(core32).to_running_stats(np.float32)
    for name in ("mean", "mean_low", "m2", "m2_low", "count_hi", "count_lo"):
        np.testing.assert_array_equal(getattr(again, name), getattr(core32, name))
    assert RunningMeanStd.from_running_stats(rn.init_stats((2,), np.float32)).shape == (2,)
    with pytest.raises(
        ValueError, match=r"RunningMeanStd holds statistics of shape \(\), got .* shape \(2,\)"
    ):
        rms.stats = rn.init_stats((2,), np.float32)
    ema = rn.init_stats((), np.float32, decay=0.99)
    with pytest.raises(ValueError, match="decay"):
        RunningMeanStd.from_running_stats(ema)
    # Other weightings: their variance divides by another weight, never read as equal weights.
    for weighting, given in (
        ({"step_size": 0.1}, "None, 0.1, 0.0001"),
        ({"prior_count": 1.0}, "None, None, 1.0"),
    ):
        with pytest.raises(ValueError, match=rf"prior_count\)=\({given}\) have no sample count"):
            rms.stats = rn.init_stats((), np.float32, **weighting)


def test_running_mean_std_matches_gymnasiums():
    rng = np.random.default_rng(1)
    ours, theirs = RunningMeanStd(), GymRunningMeanStd(shape=())
    for size, dtype in ((1, np.float64), (7, np.float64), (16, np.float32), (3, np.float32)):
        batch = rng.normal(-2.0, 5.0, size).astype(dtype)
        ours.update(batch)
        theirs.update(batch)
        np.testing.assert_allclose(ours.mean, theirs.mean, rtol=RTOL)
        np.testing.assert_allclose(ours.var, theirs.var, rtol=RTOL)
        np.testing.assert_allclose(ours.count, theirs.count, rtol=1e-15)
    with pytest.raises(ValueError, match="1-D"):
        ours.update(np.zeros((2, 2)))


def test_transform_and_clip_reward_match_gymnasium():
    pairs: list[tuple[Any, Any, str, dict[str, Any]]] = [
        (
            gym_wrappers.TransformReward,
            TransformReward,
            "CartPole-v1",
            {"func": lambda r: 2 * r + 1},
        ),
        (
            gym_wrappers.ClipReward,
            ClipReward,
            "MountainCarContinuous-v0",
            {"min_reward": -0.05, "max_reward": 0.0},
        ),
        (gym_wrappers.ClipReward, ClipReward, "MountainCarContinuous-v0", {"max_reward": -0.01}),
    ]
    for theirs_cls, ours_cls, env_id, kwargs in pairs:
        outputs = []
        for cls in (theirs_cls, ours_cls):
            env = cls(gym.make(env_id), **kwargs)
            env.reset(seed=5)
            env.action_space.seed(5)
            rewards = []
            for _ in range(300):
                _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
                rewards.append(reward)
                if terminated or truncated:
                    env.reset()
            outputs.append(rewards)
        assert [type(r) for r in outputs[1]] == [type(r) for r in outputs[0]]
        np.testing.assert_array_equal(outputs[1], outputs[0])
    clip = ClipReward(gym.make("CartPole-v1"), 0.0, 0.5)
    assert clip._saved_kwargs == {"min_reward": 0.0, "max_reward": 0.5}
    assert isinstance(clip, gym.RewardWrapper)


def test_transform_and_clip_reward_errors():
    with pytest.raises(InvalidBound, match="Both `min_reward` and `max_reward` cannot be None"):
        ClipReward(ScriptedEnv([]))
    with pytest.raises(InvalidBound, match=r"Min reward \(1.0\) must be smaller than max reward"):
        ClipReward(ScriptedEnv([]), 1.0, 0.5)
    with pytest.raises(ValueError, match="func should be callable"):
        TransformReward(ScriptedEnv([]), 3.0)  # type: ignore[arg-type]  # deliberately invalid


def scripted_stream(steps, seed):
    """Rewards with NaN, inf and integer entries, terminations and truncations."""
    rng = np.random.default_rng(seed)
    rewards = [float(r) for r in rng.normal(2.0, 3.0, steps)]
    rewards[7], rewards[20] = math.nan, -math.inf
    return [(r, bool(rng.random() < 0.1), bool(rng.random() < 0.05)) for r in rewards]


def test_single_env_runs_the_jax_cores_code_bit_for_bit():
    """The wrapper and the jitted core (float64 under x64) agree to float64 rounding.

    XLA contracts a multiply-add into one FMA and divides by a square root through
    its reciprocal, where the host rounds each operation as Gymnasium does; the
    sample counts agree exactly.
    """
    script = scripted_stream(300, seed=4)
    freeze = set(range(100, 130))
    env = NormalizeReward(ScriptedEnv(script), gamma=0.95, epsilon=1e-6)
    env.reset()
    wrapper_rewards: list[float] = []
    for t in range(len(script)):
        env.update_running_mean = t not in freeze
        wrapper_rewards.append(float(env.step(0)[1]))
    with jax.enable_x64(True):
        norm = rn.normalize_reward(gamma=0.95, epsilon=1e-6, dtype=np.float64)
        step = jax.jit(norm.step)
        state = norm.init()
        core_rewards = []
        for t, (reward, terminated, truncated) in enumerate(script):
            scaled, state = step(state, reward, terminated, truncated, t not in freeze)
            core_rewards.append(float(scaled))
        core_stats = jax.tree.map(np.asarray, state.stats)
    np.testing.assert_allclose(env.discounted_reward[0], state.ret, rtol=RTOL)
    host = env.return_rms.stats
    for name in ("count_hi", "count_lo"):
        np.testing.assert_array_equal(getattr(host, name), getattr(core_stats, name))
    for name in ("mean", "m2"):
        np.testing.assert_allclose(
            getattr(host, name) + getattr(host, name + "_low"),
            getattr(core_stats, name) + getattr(core_stats, name + "_low"),
            rtol=RTOL,
        )
    np.testing.assert_allclose(wrapper_rewards, core_rewards, rtol=RTOL, atol=0)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_numpy_scalar_hyperparameters_compute_as_python_floats(dtype):
    script = scripted_stream(200, seed=5)
    outputs = {}
    for kind in ("numpy", "python"):
        gamma, epsilon = dtype(0.99), dtype(1e-3)
        if kind == "python":
            gamma, epsilon = float(gamma), float(epsilon)
        env = NormalizeReward(ScriptedEnv(script), gamma=gamma, epsilon=epsilon)
        env.reset()
        outputs[kind] = [env.step(0)[1] for _ in script]
        assert env.discounted_reward.dtype == np.float64
        assert type(env.gamma) is float
        assert type(env.epsilon) is float
        outputs[kind].append(env.return_rms.get_state())
    assert all(type(r) is np.float64 for r in outputs["numpy"][:-1])
    np.testing.assert_array_equal(outputs["numpy"][:-1], outputs["python"][:-1])
    assert outputs["numpy"][-1] == outputs["python"][-1]


def test_float32_gamma_matches_gymnasium_to_float64_rounding():
    theirs = gym_wrappers.NormalizeReward(gym.make("CartPole-v1"), gamma=float(np.float32(0.99)))
    ours = NormalizeReward(gym.make("CartPole-v1"), gamma=np.float32(0.99))
    rewards: dict[Any, list] = {}
    for env in (theirs, ours):
        env.reset(seed=1)
        env.action_space.seed(1)
        rewards[env] = []
        for _ in range(300):
            _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            rewards[env].append(reward)
            if terminated or truncated:
                env.reset()
    np.testing.assert_allclose(rewards[ours], rewards[theirs], rtol=RTOL, atol=0)


def test_in_place_writes_to_discounted_reward_take_effect():
    results = {}
    for cls in (gym_wrappers.NormalizeReward, NormalizeReward):
        env = cls(gym.make("CartPole-v1"))
        env.reset(seed=0)
        for t in range(5):
            env.step(t % 2)
        env.discounted_reward[:] = 0
        env.step(0)
        results[cls] = env.discounted_reward[0]
    assert results[NormalizeReward] == results[gym_wrappers.NormalizeReward] == 1.0
    env = NormalizeReward(gym.make("CartPole-v1"))
    env.discounted_reward = 2.5  # assignment copies into the wrapper's array
    assert env.discounted_reward.tolist() == [2.5]
    assert env.discounted_reward.dtype == np.float64
    with pytest.raises(
        ValueError, match=r"discounted_reward holds nan; expected a return that is not NaN"
    ):
        env.discounted_reward = math.nan
    with pytest.raises(ValueError, match=r"discounted_reward should be .* shape \(1,\)"):
        env.discounted_reward = [1.0, 2.0]


RANGE = r" in \[0, 18446744073709551615\], got samples="  # check_count's ValueError


@pytest.mark.parametrize(
    ("samples", "error", "message"),
    [
        (2**64, ValueError, RANGE + r"18446744073709551616\."),
        (10**400, ValueError, RANGE + "1000000000"),
        (2.0**64, ValueError, RANGE + r"18446744073709551616\."),  # an integral float
        (1e30, ValueError, RANGE + "1000000000000000019884"),
        (-1, ValueError, RANGE + r"-1\."),
        (2.5, TypeError, r", got samples=2\.5\."),
        (None, TypeError, r", got samples=None\."),
        (True, TypeError, r", got samples=True\."),
        ("3", TypeError, r", got samples='3'\."),
        (math.nan, TypeError, r", got samples=nan\."),
        (math.inf, TypeError, r", got samples=inf\."),
    ],
)
def test_set_state_rejects_counts_the_statistics_cannot_hold(samples, error, message):
    state = {"mean": 0.0, "m2": 1.0, "samples": samples}
    with pytest.raises(error, match="samples should be an integer" + message):
        RunningMeanStd.from_state(state)


def test_set_state_accepts_the_largest_count_and_converts_it():
    assert RunningMeanStd.from_state({"mean": 0.0, "m2": 1.0, "samples": 3.0}).samples == 3
    rms = RunningMeanStd.from_state({"mean": 1.0, "m2": 2.0, "samples": 2**64 - 1})
    stats = rms.to_running_stats(np.float32)
    assert int(rn.count_as_int(stats)) == 2**64 - 1
    with pytest.raises(ValueError, match="exceed 2\\*\\*64 - 1"):
        rms.update_from_moments(0.0, 0.0, 1)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("mean", math.nan, "mean holds nan"),
        ("mean", math.inf, "mean holds inf"),
        ("m2", -1.0, "m2 holds -1.0"),
        ("m2", math.nan, "m2 holds nan"),
        ("m2_low", math.inf, "m2_low holds inf"),
        ("mean", None, "mean should be a real number"),
        ("m2", "1", "m2 should be a real number"),
    ],
)
def test_set_state_rejects_statistics_no_merge_produces(field, value, message):
    state = {"mean": 0.0, "m2": 1.0, "samples": 3, field: value}
    with pytest.raises(ValueError, match=message):
        RunningMeanStd.from_state(state)
    with pytest.raises(ValueError, match="state should be a mapping"):
        RunningMeanStd.from_state([0.0, 1.0, 3])  # type: ignore[arg-type]  # deliberately invalid


def test_gymnasium_attributes_are_assignable_as_in_gymnasium():
    rms, theirs = RunningMeanStd(), GymRunningMeanStd(shape=())
    for stats in (rms, theirs):
        stats.update(np.array([1.0, 4.0, 2.0]))
        stats.mean, stats.var, stats.count = 0.5, 2.0, 10.0001
        stats.update(np.array([3.0, -1.0]))
    np.testing.assert_allclose(
        [rms.mean, rms.var, rms.count], [theirs.mean, theirs.var, theirs.count], rtol=RTOL
    )
    assert rms.samples == 12
    for name, value in (("mean", math.nan), ("var", -1.0), ("count", 2.5), ("count", -1.0)):
        with pytest.raises(ValueError, match=name):
            setattr(rms, name, value)
    assert rms.samples == 12  # a refused assignment changes nothing


def test_save_and_load_with_gymnasiums_own_statistics_object(tmp_path):
    env = NormalizeReward(gym.make("CartPole-v1"))
    env.return_rms = GymRunningMeanStd(shape=())
    env.reset(seed=0)
    for t in range(20):
        env.step(t % 2)
    env.save(tmp_path / "stats.msgpack")
    for restored_rms in (RunningMeanStd(), GymRunningMeanStd(shape=())):
        restored = NormalizeReward(gym.make("CartPole-v1"))
        restored.return_rms = restored_rms
        restored.load(tmp_path / "stats.msgpack")
        np.testing.assert_allclose(restored.return_rms.mean, env.return_rms.mean, rtol=RTOL)
        np.testing.assert_allclose(restored.return_rms.var, env.return_rms.var, rtol=RTOL)
        np.testing.assert_allclose(restored.return_rms.count, env.return_rms.count, rtol=1e-15)
        assert restored.discounted_reward[0] == env.discounted_reward[0]


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("mean", math.nan, r"state\['return_rms'\].mean holds nan"),
        ("m2", -1.0, r"state\['return_rms'\].m2 holds -1.0"),
        ("mean_low", math.inf, "mean_low holds inf"),
    ],
)
def test_load_refuses_crafted_statistics_with_a_valid_checksum(tmp_path, field, value, message):
    env = NormalizeReward(gym.make("CartPole-v1"))
    env.reset(seed=0)
    env.step(0)
    state = env.state_dict()
    moments = state["return_rms"].moments
    moments[("mean", "mean_low", "m2", "m2_low").index(field)] = value
    data = rn.save_state(state, env._checkpoint_metadata(state))
    (tmp_path / "crafted").write_bytes(data)
    fresh = NormalizeReward(gym.make("CartPole-v1"))
    before = fresh.return_rms.get_state()
    with pytest.raises(ValueError, match=message):
        fresh.load(tmp_path / "crafted")
    assert fresh.return_rms.get_state() == before


def test_load_refuses_a_nan_tracked_return(tmp_path):
    env = NormalizeReward(gym.make("CartPole-v1"))
    state = env.state_dict()
    state["discounted_reward"] = np.array([math.nan])
    (tmp_path / "crafted").write_bytes(rn.save_state(state, env._checkpoint_metadata(state)))
    with pytest.raises(
        ValueError, match=r"discounted_reward holds nan; expected a return that is not NaN"
    ):
        env.load(tmp_path / "crafted")


def test_a_return_that_overflowed_in_a_run_saves_and_loads(tmp_path):
    env = NormalizeReward(ScriptedEnv([(1e308, False, False)] * 2), gamma=1.0)
    env.reset(seed=0)
    env.step(0)
    env.step(0)
    assert env.discounted_reward.tolist() == [math.inf]  # 2e308 is past float64's range
    env.save(tmp_path / "overflowed")
    restored = NormalizeReward(ScriptedEnv([]), gamma=1.0)
    restored.load(tmp_path / "overflowed")
    assert restored.discounted_reward.tolist() == [math.inf]
    assert restored.return_rms.get_state() == env.return_rms.get_state()


@pytest.mark.parametrize(("name", "value"), [("gamma", 1.5), ("gamma", -0.1), ("epsilon", 0.0)])
def test_hyperparameters_assigned_later_are_checked(name, value):
    env = NormalizeReward(ScriptedEnv([]))
    with pytest.raises(InvalidBound, match=f"`{name}` should be"):
        setattr(env, name, value)
    with pytest.raises(ValueError, match=f"{name} should be a real number"):
        setattr(env, name, "0.5")
    with pytest.raises(ValueError, match="gamma should be a real number"):
        NormalizeReward(ScriptedEnv([]), gamma=None)  # type: ignore[arg-type]  # deliberately invalid


def test_benchmark_script_runs_with_tiny_sizes(capsys):
    """Smoke test of ``python -m benchmarks.gymnasium_overhead`` (no timing asserted)."""
    gymnasium_overhead.main(
        ["--steps", "3", "--repeats", "1", "--num-envs", "1", "16", "--markdown"]
    )
    out = capsys.readouterr().out
    assert "| rewardnorm_jax.gymnasium.NormalizeReward |" in out
    assert "| num_envs | bare env | Gymnasium added | ours added |" in out
    assert out.count("\n| 16 |") == 1


@pytest.mark.parametrize(
    ("setting", "given"),
    [("no", "'no'"), (0, "0"), (None, "None"), (np.array([False]), r"array\(\[False\]\)")],
)
def test_update_running_mean_takes_only_booleans(setting, given):
    env = NormalizeReward(ScriptedEnv([(1.0, False, False)]))
    message = r"update_running_mean should be a bool, got update_running_mean=" + given + r"\."
    with pytest.raises(TypeError, match=message):
        env.update_running_mean = setting
    env.update_running_mean = np.bool_(False)
    assert env.update_running_mean is False
    # A 0-d bool array is taken too, as the core's check_bool takes it (the setter is typed bool).
    env.update_running_mean = np.array(True)  # type: ignore[assignment]
    assert env.update_running_mean is True


def test_set_state_refuses_unknown_keys():
    with pytest.raises(ValueError, match=r"unknown keys \['var'\]"):
        RunningMeanStd.from_state({"mean": 0.0, "m2": 1.0, "samples": 2, "var": 4.0})


def test_to_float32_refuses_statistics_beyond_its_range():
    rms = RunningMeanStd.from_state({"mean": 1e39, "m2": 1.0, "samples": 2})
    with pytest.raises(ValueError, match=r"return_rms in float32\.mean holds inf"):
        rms.to_running_stats(np.float32)


@pytest.mark.parametrize(("low", "high"), [(math.nan, 1.0), (0.0, math.nan), (None, math.nan)])
def test_clip_reward_refuses_nan_bounds(low, high):
    with pytest.raises(InvalidBound, match="should not be NaN"):
        ClipReward(ScriptedEnv([]), low, high)


# --- Hostile inputs: refused with an error naming the value, never a silent wrong number ---

REAL = r"reward should hold real numbers \(a bool, integer or floating dtype\), got reward="
FLAG = r" should be a boolean flag: a Python or NumPy bool, .* Got "


@pytest.mark.parametrize(
    ("reward", "error", "message"),
    [
        (np.complex128(1 + 2j), TypeError, REAL + r"np.complex128\(1\+2j\) \(of type complex128,"),
        (1 + 2j, TypeError, REAL + r"\(1\+2j\) \(of type complex, dtype complex128\)"),
        ("1.0", TypeError, REAL + r"'1.0' \(of type str, dtype <U3\)\."),
        (None, TypeError, REAL + r"None \(of type NoneType\)\."),
        (
            np.ones((2, 2)),
            ValueError,
            r"reward of shape \(2, 2\); expected \(\) \(one number\) or \(k,\)",
        ),
        (np.ones(0), ValueError, r"reward of shape \(0,\); expected .* k >= 1 objectives"),
    ],
)
def test_rewards_that_are_not_one_real_number_are_refused(reward, error, message):
    env = NormalizeReward(ScriptedEnv([(reward, False, False)]))
    env.reset()
    with pytest.raises(error, match=message):
        env.step(0)
    assert env.return_rms.samples == 0


@pytest.mark.parametrize(
    ("terminated", "truncated", "error", "message"),
    [
        ("False", False, TypeError, "terminated" + FLAG + r"terminated='False' \(of type str"),
        (False, "False", TypeError, "truncated" + FLAG + r"truncated='False' \(of type str"),
        ([False], False, ValueError, r"terminated of shape \(1,\); expected \(\) \(one flag\)\."),
        (None, False, TypeError, "terminated" + FLAG + r"terminated=None \(of type NoneType\)\."),
    ],
)
def test_flags_that_are_not_booleans_are_refused(terminated, truncated, error, message):
    env = NormalizeReward(ScriptedEnv([(1.0, False, False), (1.0, terminated, truncated)]))
    env.reset()
    env.step(0)
    with pytest.raises(error, match=message):
        env.step(0)  # "False" is truthy: it would have reset the return
    assert env.discounted_reward[0] == 1.0


def test_numpy_scalars_0d_arrays_integers_and_bools_compute_as_python_floats():
    rewards, flags = [1.0, 2.0, 0.0, -3.0, 1.0, 5.0], [False, False, True, False, False, True]
    converters: dict[str, tuple[Any, Any]] = {
        "python": (float, bool),
        "numpy scalars": (np.float64, np.bool_),
        "float32": (np.float32, np.bool_),
        "0-d arrays": (np.array, np.array),
        "integers": (np.int64, int),  # flags true where nonzero, as Gymnasium's 1 - terminated
        "bools and floats": (lambda r: r if r not in (0.0, 1.0) else bool(r), float),
    }
    outputs = {}
    for kind, (to_reward, to_flag) in converters.items():
        script = [
            (to_reward(r), to_flag(t), to_flag(False)) for r, t in zip(rewards, flags, strict=True)
        ]
        env = NormalizeReward(ScriptedEnv(script))
        env.reset()
        outputs[kind] = [env.step(0)[1] for _ in script]
        outputs[kind].append(env.return_rms.get_state())
        assert all(type(r) is np.float64 for r in outputs[kind][:-1])
    for kind in converters:
        assert outputs[kind] == outputs["python"], kind


RETURNS = r"discounted_reward should hold real numbers .* got discounted_reward="
SHAPE = r"discounted_reward should be a number or an array of shape \(1,\), got "


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        (1 + 1j, TypeError, RETURNS + r"\(1\+1j\) \(of type complex"),
        ("2.0", TypeError, RETURNS + r"'2.0' \(of type str"),
        (np.array([1.0, math.nan]), ValueError, SHAPE + r"array\(\[ 1., nan\]\)\."),
    ],
)
def test_assigned_returns_must_be_real_numbers(value, error, message):
    env = NormalizeReward(ScriptedEnv([]))
    with pytest.raises(error, match=message):
        env.discounted_reward = value
    assert env.discounted_reward.tolist() == [0.0]


def test_assigned_moments_out_of_range_are_refused_naming_the_value():
    rms = RunningMeanStd()
    with pytest.raises(ValueError, match=r"var holds -1\.0; expected a variance >= 0"):
        rms.var = -1.0
    with pytest.raises(ValueError, match=r"count holds 10\.5; expected a number of samples plus"):
        rms.count = 10.5
    assert rms.get_state() == RunningMeanStd().get_state()


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("var", -1.0, r"var holds -1\.0; expected a variance >= 0"),
        ("var", math.nan, r"var holds nan; expected a variance >= 0"),
        ("mean", math.nan, r"mean holds nan; expected a finite mean"),
        ("mean", math.inf, r"mean holds inf; expected a finite mean"),
        ("count", 0.0, r"count holds 0\.0; expected a finite count above 0"),
    ],
)
@pytest.mark.parametrize("vector", [False, True])
def test_invalid_assigned_statistics_are_refused_naming_return_rms(field, value, message, vector):
    """Gymnasium's RunningMeanStd is kept as it is when valid; invalid, it would give NaN."""
    if vector:
        env: Any = rn_vector.NormalizeReward(gym.make_vec("CartPole-v1", 2, "sync"))
    else:
        env = NormalizeReward(ScriptedEnv([]))
    theirs = GymRunningMeanStd(shape=())
    setattr(theirs, field, np.float64(value))
    before = env.return_rms
    with pytest.raises(ValueError, match=r"^return_rms was assigned a RunningMeanStd .*" + message):
        env.return_rms = theirs
    assert env.return_rms is before  # nothing written
    # Valid, of any prior count (Gymnasium's epsilon): kept as it is.
    valid = GymRunningMeanStd(epsilon=1e-8, shape=())
    env.return_rms = valid
    assert env.return_rms is valid


def test_statistics_refuse_values_that_are_not_real_numbers():
    rms = RunningMeanStd()
    for batch in (np.array([1 + 1j, 2.0]), np.array(["1", "2"])):
        with pytest.raises(
            ValueError, match=r"x should be a 1-D array of real values, got .* dtype"
        ):
            rms.update(batch)
    for mean in ("1", 1 + 1j, np.array([1.0, 2.0]), True):
        with pytest.raises(ValueError, match="batch_mean should be a real number"):
            rms.update_from_moments(mean, 0.0, 1)
    with pytest.raises(ValueError, match="batch_var should be a real number"):
        rms.update_from_moments(1.0, "0", 1)
    with pytest.raises(
        TypeError, match=r"batch_count should be an integer, got batch_count=True\."
    ):
        rms.update_from_moments(1.0, 0.0, True)
    assert rms.get_state() == RunningMeanStd().get_state()


def test_assigned_and_unpickled_statistics_are_checked():
    rms = RunningMeanStd()
    rms.update(np.array([1.0, 3.0]))
    crafted = rms.stats.replace(moments=np.array([math.nan, 0.0, 1.0, 0.0]))
    with pytest.raises(ValueError, match="mean holds nan"):
        rms.stats = crafted
    assert rms.samples == 2
    rms.stats = RunningMeanStd.from_state({"mean": 2.0, "m2": 4.0, "samples": 5}).stats
    assert (rms.mean, rms.m2, rms.samples) == (2.0, 4.0, 5)
    for field, value in (("mean", math.nan), ("m2", math.nan), ("mean_low", math.inf)):
        state = {**rms.get_state(), field: value}
        crafted_pickle = pickle.dumps(CraftedPickle(state))
        with pytest.raises(ValueError, match=f"{field} holds"):
            pickle.loads(crafted_pickle)
    assert pickle.loads(pickle.dumps(CraftedPickle(rms.get_state()))).samples == 5


class CraftedPickle:
    """Pickles as a RunningMeanStd holding ``state``, whatever its values."""

    def __init__(self, state):
        self.state = state

    def __reduce__(self):
        return RunningMeanStd.__new__, (RunningMeanStd,), self.state


@pytest.mark.parametrize("bound", [0.5 + 1j, "0"])
def test_clip_bounds_must_be_real_numbers(bound):
    message = f"min_reward should hold real numbers .* got min_reward={re.escape(repr(bound))} "
    with pytest.raises(TypeError, match=message):
        ClipReward(ScriptedEnv([]), bound, 2.0)


def test_saturated_statistics_convert_to_the_jax_core():
    """Returns whose square overflows saturate M at +inf: a state the merge produces."""
    rms = RunningMeanStd()
    with np.errstate(over="ignore", invalid="ignore"):
        rms.update(np.array([1e200, -1e200]))
    assert rms.m2 == math.inf
    for dtype in (np.float32, np.float64):
        with jax.enable_x64(dtype == np.float64):
            stats = rms.to_running_stats(dtype)
        assert (float(stats.m2), float(stats.m2_low)) == (math.inf, 0.0)
        assert RunningMeanStd.from_running_stats(stats).m2 == math.inf
