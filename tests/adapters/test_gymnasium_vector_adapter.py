"""Vector Gymnasium adapter: rewardnorm_jax.gymnasium.vector against Gymnasium's wrappers.

NEXT_STEP (and the reward wrappers) are compared with the installed Gymnasium
1.3.0 wrappers; SAME_STEP, DISABLED and partial resets with a small reference
of SEMANTICS.md's 1.4.0 formulas written below (1.3.0 has bugs there).
"""

import math
import re
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.error import InvalidBound
from gymnasium.vector import AutoresetMode, SyncVectorEnv, VectorEnv, VectorWrapper
from gymnasium.vector.utils import batch_space
from gymnasium.wrappers import vector as gym_vector
from gymnasium.wrappers.utils import RunningMeanStd as GymRunningMeanStd

from rewardnorm_jax.gymnasium import RunningMeanStd
from rewardnorm_jax.gymnasium.vector import ClipReward, NormalizeReward, TransformReward

RTOL = 1e-12  # agreement with Gymnasium: float64 rounding (the golden tolerance)


class Recorder(VectorWrapper):
    """Records the raw stream under a wrapper: ("step", r, term, trunc) and ("reset", mask)."""

    def __init__(self, env):
        super().__init__(env)
        self.events = []

    def reset(self, *, seed=None, options=None):
        mask = None if options is None else options.get("reset_mask")
        self.events.append(("reset", None if mask is None else mask.copy()))
        return self.env.reset(seed=seed, options=options)

    def step(self, actions):
        obs, reward, terminated, truncated, info = self.env.step(actions)
        self.events.append(("step", reward.copy(), terminated.copy(), truncated.copy()))
        return obs, reward, terminated, truncated, info


class ScriptedVectorEnv(VectorEnv):
    """Plays fixed (T, N) arrays of rewards and flags; the metadata names the autoreset mode."""

    def __init__(self, rewards, terminated=None, truncated=None, metadata=None):
        self.rewards = np.asarray(rewards, np.float64)
        self.num_envs = self.rewards.shape[1]
        zeros = np.zeros(self.rewards.shape, bool)
        self.terminated = zeros if terminated is None else np.asarray(terminated, bool)
        self.truncated = zeros if truncated is None else np.asarray(truncated, bool)
        self.metadata = (
            {"autoreset_mode": AutoresetMode.NEXT_STEP} if metadata is None else metadata
        )
        self.single_observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.single_action_space = gym.spaces.Discrete(2)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        return np.zeros((self.num_envs, 1), np.float32), {}

    def step(self, actions):
        t, self.t = self.t, self.t + 1
        obs = np.zeros((self.num_envs, 1), np.float32)
        return obs, self.rewards[t], self.terminated[t], self.truncated[t], {}


def reference(events, same_step, gamma=0.99, epsilon=1e-8):
    """Gymnasium 1.4.0's vector NormalizeReward (SEMANTICS.md), float32 returns.

    Partial resets zero only the masked returns; non-finite rewards are skipped.
    """
    rms = GymRunningMeanStd(shape=())
    acc: np.ndarray | None = None
    prev = np.zeros((), bool)  # replaced, with acc, at the first step
    outputs = []
    for event in events:
        if event[0] == "reset":
            mask = slice(None) if event[1] is None else event[1]
            if acc is not None:
                acc[mask], prev[mask] = 0.0, False
            continue
        _, r, term, trunc = event
        if acc is None:
            acc, prev = np.zeros(r.shape, np.float32), np.zeros(r.shape, bool)
        active = (np.ones_like(prev) if same_step else ~prev) & np.isfinite(r)
        acc[active] = acc[active] * gamma * (1 - term[active]) + r[active]
        if np.any(active):
            rms.update(acc[active])
        prev = term | trunc
        if same_step:
            acc[prev] = 0.0
        with np.errstate(invalid="ignore"):
            outputs.append(r / np.sqrt(rms.var + epsilon))
    return np.array(outputs), rms, acc


def run(env, steps, seed, freeze=(), reset_done=False):
    env.reset(seed=seed)
    env.action_space.seed(seed)
    outputs = []
    for t in range(steps):
        env.update_running_mean = t not in freeze
        _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
        outputs.append(reward)
        done = terminated | truncated
        if reset_done and done.any():
            env.reset(options={"reset_mask": done})
    return np.array(outputs)


def test_golden_make_vec_mountain_car_continuous():
    for wrap, golden_mean, golden_std in (
        (False, -0.03359492141887935, 0.029028230434438706),
        (True, -0.1598639409552856, 0.2780030923586878),
    ):
        envs = gym.make_vec("MountainCarContinuous-v0", 3)
        if wrap:
            envs = NormalizeReward(envs)
        envs.reset(seed=123)
        envs.action_space.seed(123)
        rewards = [envs.step(envs.action_space.sample())[1] for _ in range(100)]
        envs.close()
        np.testing.assert_allclose(np.mean(rewards), golden_mean, rtol=RTOL, atol=0)
        np.testing.assert_allclose(np.std(rewards), golden_std, rtol=RTOL, atol=0)


@pytest.mark.parametrize(("num_envs", "mode"), [(4, "sync"), (16, "sync"), (16, None)])
def test_next_step_side_by_side_with_gymnasium(num_envs, mode):
    """Many episode ends (CartPole), side by side with Gymnasium's wrapper.

    16 envs exercise NumPy's pairwise sums; the native CartPole vector env
    returns float32 rewards.
    """
    freeze = set(range(100, 150))
    theirs = gym_vector.NormalizeReward(
        gym.make_vec("CartPole-v1", num_envs, vectorization_mode=mode)
    )
    ours = NormalizeReward(gym.make_vec("CartPole-v1", num_envs, vectorization_mode=mode))
    bitwise = NormalizeReward(gym.make_vec("CartPole-v1", num_envs, vectorization_mode=mode))
    bitwise.return_rms = GymRunningMeanStd(shape=())  # Gymnasium's own merge: bit-identical
    expected = run(theirs, 400, seed=11, freeze=freeze)
    got = run(ours, 400, seed=11, freeze=freeze)
    np.testing.assert_array_equal(run(bitwise, 400, seed=11, freeze=freeze), expected)
    assert got.dtype == expected.dtype == np.float64
    np.testing.assert_allclose(got, expected, rtol=RTOL, atol=0)
    np.testing.assert_array_equal(ours.accumulated_reward, theirs.accumulated_reward)
    np.testing.assert_allclose(ours.return_rms.count, theirs.return_rms.count, rtol=1e-15)
    np.testing.assert_allclose(ours.return_rms.mean, theirs.return_rms.mean, rtol=RTOL)
    np.testing.assert_allclose(ours.return_rms.var, theirs.return_rms.var, rtol=RTOL)
    # Reset-only steps are left out: fewer samples than steps x envs.
    assert ours.return_rms.samples < (400 - len(freeze)) * num_envs


def test_same_step_matches_gymnasium_1_4_formulas():
    recorder = Recorder(
        gym.make_vec(
            "CartPole-v1",
            4,
            vectorization_mode="sync",
            vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
        )
    )
    envs = NormalizeReward(recorder)
    envs.reset(seed=5)
    envs.action_space.seed(5)
    outputs, ended = [], 0
    for _ in range(300):
        _, reward, terminated, truncated, _ = envs.step(envs.action_space.sample())
        outputs.append(reward)
        done = terminated | truncated
        ended += done.sum()
        assert np.all(envs.accumulated_reward[done] == 0)  # a new episode starts from 0
    assert ended > 10
    expected, rms, acc = reference(recorder.events, same_step=True)
    np.testing.assert_allclose(outputs, expected, rtol=RTOL, atol=0)
    np.testing.assert_array_equal(envs.accumulated_reward, acc)
    assert envs.return_rms.samples == 300 * 4  # every step is a real step
    np.testing.assert_allclose(envs.return_rms.var, rms.var, rtol=RTOL)


def test_disabled_mode_with_partial_resets():
    recorder = Recorder(
        SyncVectorEnv(
            [lambda: gym.make("CartPole-v1") for _ in range(4)],
            autoreset_mode=AutoresetMode.DISABLED,
        )
    )
    envs = NormalizeReward(recorder)
    got = run(envs, 300, seed=2, reset_done=True)
    partial = [e for e in recorder.events if e[0] == "reset" and e[1] is not None]
    assert len(partial) > 5
    assert not all(mask.all() for _, mask in partial)
    expected, _rms, acc = reference(recorder.events, same_step=False)
    np.testing.assert_allclose(got, expected, rtol=RTOL, atol=0)
    np.testing.assert_array_equal(envs.accumulated_reward, acc)
    assert envs.return_rms.samples == 300 * 4


def test_partial_reset_zeroes_only_the_masked_returns():
    envs = NormalizeReward(gym.make_vec("CartPole-v1", 4, vectorization_mode="sync"))
    envs.reset(seed=0)
    for _ in range(3):
        envs.step(np.zeros(4, np.int64))
    before = envs.accumulated_reward.copy()
    assert np.all(before > 0)
    mask = np.array([True, False, True, False])
    options = {"reset_mask": mask}
    envs.reset(options=options)
    np.testing.assert_array_equal(envs.accumulated_reward, np.where(mask, 0.0, before))
    envs.reset()
    np.testing.assert_array_equal(envs.accumulated_reward, np.zeros(4))


def test_missing_autoreset_metadata_means_next_step():
    rewards = np.arange(1.0, 13.0).reshape(6, 2)
    terminated = np.zeros((6, 2), bool)
    terminated[2, 0] = True
    outputs: dict[bool, list[np.ndarray]] = {}
    metadata: dict[str, Any] | None
    for metadata in ({}, None):  # no key, explicit NEXT_STEP
        envs = NormalizeReward(ScriptedVectorEnv(rewards, terminated, metadata=metadata))
        envs.reset()
        outputs[metadata is None] = [envs.step(None)[1] for _ in range(6)]
        assert envs.return_rms.samples == 11  # env 0 sat out step 3
    np.testing.assert_array_equal(outputs[False], outputs[True])


def test_non_finite_rewards_pass_through_and_are_skipped():
    rng = np.random.default_rng(0)
    rewards = rng.normal(size=(8, 3))
    rewards[2, 1], rewards[5, 0] = math.nan, -math.inf
    recorder = Recorder(ScriptedVectorEnv(rewards))
    envs = NormalizeReward(recorder)
    envs.reset()
    got = np.array([envs.step(None)[1] for _ in range(8)])
    assert math.isnan(got[2, 1])
    assert got[5, 0] == -math.inf
    assert np.isfinite(np.delete(got.ravel(), [2 * 3 + 1, 5 * 3 + 0])).all()
    assert envs.return_rms.samples == 8 * 3 - 2
    expected, _rms, acc = reference(recorder.events, same_step=False)
    np.testing.assert_allclose(got, expected, rtol=RTOL, atol=0)
    np.testing.assert_array_equal(envs.accumulated_reward, acc)


def test_statistics_save_and_load_reproduce_the_rewards():
    rng = np.random.default_rng(3)
    rewards = rng.normal(size=(40, 5))
    trained = NormalizeReward(ScriptedVectorEnv(rewards))
    trained.reset()
    for _ in range(20):
        trained.step(None)
    state = trained.return_rms.get_state()
    loaded = NormalizeReward(ScriptedVectorEnv(rewards[20:]))
    loaded.return_rms.set_state(state)
    trained.reset()
    loaded.reset()
    for _ in range(20):
        np.testing.assert_array_equal(loaded.step(None)[1], trained.step(None)[1])
    assert loaded.return_rms.get_state() == trained.return_rms.get_state()
    assert isinstance(loaded.return_rms, RunningMeanStd)


@pytest.mark.parametrize("gamma", [-1.0, 1.01, 2.0, 99])
def test_gamma_outside_unit_interval_is_rejected(gamma):
    with pytest.raises(InvalidBound, match="`gamma` should be in the interval"):
        NormalizeReward(ScriptedVectorEnv(np.zeros((1, 2))), gamma=gamma)


@pytest.mark.parametrize("epsilon", [0.0, -1e-8, -1.0])
def test_non_positive_epsilon_is_rejected(epsilon):
    with pytest.raises(InvalidBound, match="`epsilon` should be strictly positive"):
        NormalizeReward(ScriptedVectorEnv(np.zeros((1, 2))), epsilon=epsilon)


def test_normalize_helper_matches_gymnasium_1_3():
    """Gymnasium 1.3's public ``normalize`` (not called by ``step``): merge all returns, scale."""
    theirs = gym_vector.NormalizeReward(gym.make_vec("CartPole-v1", 4, vectorization_mode="sync"))
    ours = NormalizeReward(gym.make_vec("CartPole-v1", 4, vectorization_mode="sync"))
    run(theirs, 30, seed=5)
    run(ours, 30, seed=5)
    reward = np.array([1.0, -2.0, 0.5, 3.0])
    for update in (True, False):
        theirs.update_running_mean = ours.update_running_mean = update
        np.testing.assert_allclose(ours.normalize(reward), theirs.normalize(reward), rtol=RTOL)
        np.testing.assert_allclose(ours.return_rms.count, theirs.return_rms.count, rtol=1e-15)
        np.testing.assert_allclose(ours.return_rms.var, theirs.return_rms.var, rtol=RTOL)


def test_wrapper_interface_matches_gymnasium():
    base = gym.make_vec("CartPole-v1", 3, vectorization_mode="sync")
    envs = NormalizeReward(base, gamma=0.9, epsilon=1e-6)
    assert isinstance(envs, VectorWrapper)
    assert envs.env is base
    assert envs.unwrapped is base.unwrapped
    assert envs.num_envs == 3
    assert (envs.gamma, envs.epsilon, envs.update_running_mean) == (0.9, 1e-6, True)
    envs.update_running_mean = False
    assert envs.update_running_mean is False
    assert envs._saved_kwargs == {"gamma": 0.9, "epsilon": 1e-6}
    assert envs.accumulated_reward.dtype == np.float32
    assert envs.accumulated_reward.shape == (3,)


def test_transform_and_clip_reward_match_gymnasium():
    pairs: list[tuple[Any, Any, dict[str, Any]]] = [
        (gym_vector.TransformReward, TransformReward, {"func": lambda r: (r - 1.0) * 2.0}),
        (gym_vector.ClipReward, ClipReward, {"min_reward": -0.05, "max_reward": 0.0}),
        (gym_vector.ClipReward, ClipReward, {"min_reward": -0.02}),
    ]
    for theirs_cls, ours_cls, kwargs in pairs:
        outputs = []
        for cls in (theirs_cls, ours_cls):
            envs = cls(gym.make_vec("MountainCarContinuous-v0", 3), **kwargs)
            outputs.append(run(envs, 100, seed=123))
        assert outputs[1].dtype == outputs[0].dtype
        np.testing.assert_array_equal(outputs[1], outputs[0])


def test_clip_reward_leaves_the_environment_array_alone():
    inner = ScriptedVectorEnv(np.array([[-3.0, 0.5, 4.0]]))
    envs = ClipReward(inner, -1.0, 1.0)
    assert envs.step(None)[1].tolist() == [-1.0, 0.5, 1.0]
    assert inner.rewards.tolist() == [[-3.0, 0.5, 4.0]]
    assert envs._saved_kwargs == {"min_reward": -1.0, "max_reward": 1.0}
    with pytest.raises(InvalidBound, match="Both `min_reward` and `max_reward` cannot be None"):
        ClipReward(inner)
    with pytest.raises(InvalidBound, match="must be smaller than max reward"):
        ClipReward(inner, 2.0, 1.0)
    with pytest.raises(ValueError, match="func should be callable"):
        TransformReward(inner, None)  # type: ignore[arg-type]  # deliberately invalid


def test_numpy_scalar_hyperparameters_compute_as_python_floats():
    rng = np.random.default_rng(6)
    rewards = rng.normal(size=(60, 4))
    terminated = rng.random((60, 4)) < 0.1
    outputs = []
    for gamma in (
        np.float32(0.99),
        float(np.float32(0.99)),
        np.float16(0.9),
        float(np.float16(0.9)),
    ):
        envs = NormalizeReward(ScriptedVectorEnv(rewards, terminated), gamma=gamma)
        envs.reset()
        outputs.append(np.array([envs.step(None)[1] for _ in range(60)]))
        assert type(envs.gamma) is float
        assert outputs[-1].dtype == np.float64
    np.testing.assert_array_equal(outputs[0], outputs[1])
    np.testing.assert_array_equal(outputs[2], outputs[3])
    assert not np.array_equal(outputs[0], outputs[2])


def test_float32_gamma_matches_gymnasium_to_float64_rounding():
    theirs = gym_vector.NormalizeReward(
        gym.make_vec("CartPole-v1", 4, vectorization_mode="sync"), gamma=float(np.float32(0.99))
    )
    ours = NormalizeReward(
        gym.make_vec("CartPole-v1", 4, vectorization_mode="sync"), gamma=np.float32(0.99)
    )
    np.testing.assert_allclose(run(ours, 200, seed=4), run(theirs, 200, seed=4), rtol=RTOL, atol=0)


def test_in_place_writes_to_accumulated_reward_take_effect():
    results = {}
    for cls in (gym_vector.NormalizeReward, NormalizeReward):
        envs = cls(gym.make_vec("CartPole-v1", 3, vectorization_mode="sync"))
        envs.reset(seed=0)
        for t in range(4):
            envs.step(np.full(3, t % 2))
        envs.accumulated_reward[:] = 0
        envs.step(np.zeros(3, np.int64))
        results[cls] = envs.accumulated_reward.copy()
    np.testing.assert_array_equal(results[NormalizeReward], results[gym_vector.NormalizeReward])
    np.testing.assert_array_equal(results[NormalizeReward], np.ones(3))


def test_save_and_load_with_gymnasiums_own_statistics_object(tmp_path):
    rng = np.random.default_rng(7)
    envs = NormalizeReward(ScriptedVectorEnv(rng.normal(size=(30, 3))))
    envs.return_rms = GymRunningMeanStd(shape=())
    envs.reset()
    for _ in range(30):
        envs.step(None)
    envs.save(tmp_path / "stats.msgpack")
    restored = NormalizeReward(ScriptedVectorEnv(np.zeros((1, 3))))
    restored.load(tmp_path / "stats.msgpack")
    np.testing.assert_allclose(restored.return_rms.mean, envs.return_rms.mean, rtol=RTOL)
    np.testing.assert_allclose(restored.return_rms.var, envs.return_rms.var, rtol=RTOL)
    assert restored.return_rms.samples == 90
    np.testing.assert_array_equal(restored.accumulated_reward, envs.accumulated_reward)


def test_load_refuses_crafted_values_and_keeps_the_arrays_live(tmp_path):
    from rewardnorm_jax import save_state

    envs = NormalizeReward(ScriptedVectorEnv(np.ones((3, 2))))
    envs.reset()
    envs.step(None)
    live = envs.accumulated_reward
    state = envs.state_dict()
    state["accumulated_reward"] = np.array([1.0, np.nan], np.float32)
    (tmp_path / "nan").write_bytes(save_state(state, envs._checkpoint_metadata(state)))
    with pytest.raises(
        ValueError, match=r"accumulated_reward holds nan; expected a return that is not NaN"
    ):
        envs.load(tmp_path / "nan")
    state = envs.state_dict()
    state["return_rms"].moments[2] = -2.0  # m2
    (tmp_path / "m2").write_bytes(save_state(state, envs._checkpoint_metadata(state)))
    with pytest.raises(ValueError, match=r"m2 holds -2\.0"):
        envs.load(tmp_path / "m2")
    envs.save(tmp_path / "good")
    envs.step(None)
    envs.load(tmp_path / "good")
    assert envs.accumulated_reward is live  # restored in place
    np.testing.assert_array_equal(live, np.ones(2, np.float32))


@pytest.mark.parametrize(("name", "value"), [("gamma", 2.0), ("epsilon", -1.0)])
def test_hyperparameters_assigned_later_are_checked(name, value):
    envs = NormalizeReward(ScriptedVectorEnv(np.zeros((1, 2))))
    with pytest.raises(InvalidBound, match=f"`{name}` should be"):
        setattr(envs, name, value)
    with pytest.raises(ValueError, match="epsilon should be a real number"):
        NormalizeReward(ScriptedVectorEnv(np.zeros((1, 2))), epsilon=[1e-8])  # type: ignore[arg-type]  # deliberately invalid


def test_rewards_of_another_shape_are_refused():
    envs = NormalizeReward(ScriptedVectorEnv(np.zeros((2, 3))))
    # A matrix per environment: neither one number nor a vector of objectives.
    envs.env.rewards = np.zeros((2, 3, 1, 1))  # type: ignore[attr-defined]
    envs.reset()
    expected = r"rewards of shape \(3, 1, 1\); expected \(3,\) .* or \(3, k\)"
    with pytest.raises(ValueError, match=expected):
        envs.step(None)
    with pytest.raises(
        TypeError, match="update_running_mean should be a bool, got update_running_mean='False'"
    ):
        envs.update_running_mean = "False"  # type: ignore[assignment]  # deliberately invalid
    with pytest.raises(InvalidBound, match="`min_reward` should not be NaN"):
        ClipReward(envs, np.array([0.0, math.nan, 0.0]), 1.0)


def test_assigned_returns_are_checked_and_copied_in():
    envs = NormalizeReward(ScriptedVectorEnv(np.ones((2, 3))))
    live = envs.accumulated_reward
    envs.accumulated_reward = [0.5, 1.0, 2.0]
    assert envs.accumulated_reward is live
    assert live.dtype == np.float32
    assert live.tolist() == [0.5, 1.0, 2.0]
    with pytest.raises(
        ValueError, match=r"accumulated_reward holds nan; expected a return that is not NaN"
    ):
        envs.accumulated_reward = np.array([0.0, np.nan, 0.0])
    envs.accumulated_reward = np.array([0.0, np.inf, 0.0])  # an overflowed return, as runs reach
    assert live.tolist() == [0.0, math.inf, 0.0]
    with pytest.raises(ValueError, match=r"accumulated_reward should be .* shape \(3,\)"):
        envs.accumulated_reward = np.zeros(4)
    with pytest.raises(ValueError, match=r"batch_var holds -1\.0; expected a variance >= 0"):
        envs.return_rms.update_from_moments(0.0, -1.0, 3)


# --- Hostile inputs: refused with an error naming the value, never a silent wrong number ---

REAL = r"rewards should hold real numbers \(a bool, integer or floating dtype\), got "
FLAG = r"terminated should be a boolean flag: a Python or NumPy bool, .* Got terminated"
EACH = r"\(one flag, one per sub-environment\)\."


@pytest.mark.parametrize(
    ("rewards", "terminated", "error", "message"),
    [
        (np.array([1 + 2j, 1.0, 1.0]), None, TypeError, REAL + r"rewards=a complex128\[3\] array"),
        (np.array(["1", "2", "3"]), None, TypeError, REAL + r"rewards=a <U1\[3\] array\."),
        (np.array([1.0, None, 2.0], dtype=object), None, TypeError, REAL + "rewards=an object"),
        (np.ones(3), np.array(["False", "False", "True"]), TypeError, FLAG + "=a <U5"),
        (np.ones(3), ["False", "False", "False"], TypeError, FLAG + r"=\['False', 'False'"),
        (np.ones(3), True, ValueError, r"terminated of shape \(\); expected \(3,\) " + EACH),
        (
            np.ones(3),
            np.zeros(2, bool),
            ValueError,
            r"terminated of shape \(2,\); expected \(3,\) " + EACH,
        ),
    ],
)
def test_rewards_and_flags_that_are_not_real_numbers_per_environment_are_refused(
    rewards, terminated, error, message
):
    inner = ScriptedVectorEnv(np.ones((2, 3)))
    envs = NormalizeReward(inner)
    envs.reset()
    envs.step(None)
    inner.rewards = [np.ones(3), rewards]  # type: ignore[assignment]  # deliberately invalid
    inner.terminated = [np.zeros(3, bool), np.zeros(3, bool) if terminated is None else terminated]  # type: ignore[assignment]  # deliberately invalid
    before = (envs.accumulated_reward.copy(), envs.return_rms.get_state())
    with pytest.raises(error, match=message):
        envs.step(None)
    np.testing.assert_array_equal(envs.accumulated_reward, before[0])
    assert envs.return_rms.get_state() == before[1]


def test_integer_and_bool_rewards_and_flags_compute_as_floats_and_bools():
    rng = np.random.default_rng(9)
    rewards = rng.integers(-3, 4, size=(20, 4))
    terminated = rng.random((20, 4)) < 0.2
    outputs = []
    for reward_dtype, flag_dtype in (
        (np.float64, bool),
        (np.int64, np.int8),
        (np.int32, np.float32),
    ):
        inner = ScriptedVectorEnv(rewards, terminated)
        inner.rewards, inner.terminated = (
            rewards.astype(reward_dtype),
            terminated.astype(flag_dtype),
        )
        envs = NormalizeReward(inner)
        envs.reset()
        outputs.append([envs.step(None)[1] for _ in range(20)])
    np.testing.assert_array_equal(outputs[1], outputs[0])
    np.testing.assert_array_equal(outputs[2], outputs[0])
    streams = []
    for kind in (bool, float):
        inner = ScriptedVectorEnv(np.zeros((3, 2)))
        inner.rewards = np.array([[True, False], [False, True], [True, True]]).astype(kind)
        envs = NormalizeReward(inner)
        envs.reset()
        streams.append([envs.step(None)[1] for _ in range(3)])
    np.testing.assert_array_equal(streams[0], streams[1])


def test_normalize_helper_refuses_complex_rewards():
    envs = NormalizeReward(ScriptedVectorEnv(np.ones((1, 3))))
    with pytest.raises(TypeError, match=r"reward should hold real numbers .* reward=a complex128"):
        envs.normalize(np.array([1 + 1j, 1.0, 1.0]))


def test_clip_bounds_are_one_number_or_one_per_sub_environment():
    inner = ScriptedVectorEnv(np.array([[-3.0, 0.5]]))
    with pytest.raises(ValueError, match=r"max_reward should be .* \(2,\)\), got shape \(3,\)"):
        ClipReward(inner, -1.0, np.array([1.0, 2.0, 3.0]))
    envs = ClipReward(inner, np.array([-1.0, -2.0]), 1.0)
    envs.reset()
    assert envs.step(None)[1].tolist() == [-1.0, 0.5]


def test_statistics_of_another_shape_assigned_to_return_rms_are_named_at_save(tmp_path):
    envs = NormalizeReward(ScriptedVectorEnv(np.ones((2, 2))))
    envs.return_rms = GymRunningMeanStd(shape=(2,))
    with pytest.raises(
        ValueError,
        match=(
            "return_rms holds an ObjectiveStats of 2 objectives, but the wrapper saves returns of "
            r"one number per environment: return_rms should be a RunningMeanStd of shape \(\)"
        ),
    ):
        envs.save(tmp_path / "stats")


def test_load_state_dict_refuses_flags_of_another_shape_before_writing_anything():
    envs = NormalizeReward(gym.make_vec("CartPole-v1", 3, vectorization_mode="sync"))
    envs.reset(seed=0)
    for _ in range(4):
        envs.step(envs.action_space.sample())
    before = envs.state_dict()
    for flags in (np.zeros(2, bool), np.zeros((), bool), np.zeros((3, 1), bool)):
        state = {**envs.state_dict(), "prev_dones": flags}
        state["accumulated_reward"] = np.ones(3)
        with pytest.raises(
            ValueError,
            match=rf"prev_dones should have shape \(3,\), got {re.escape(str(flags.shape))}",
        ):
            envs.load_state_dict(state)
        after = envs.state_dict()  # nothing was written
        np.testing.assert_array_equal(after["accumulated_reward"], before["accumulated_reward"])
        np.testing.assert_array_equal(after["prev_dones"], before["prev_dones"])
        np.testing.assert_array_equal(after["return_rms"].moments, before["return_rms"].moments)
