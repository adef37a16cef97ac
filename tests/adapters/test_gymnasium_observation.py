"""The Gymnasium observation drop-ins, side by side with Gymnasium's own wrappers.

Ours keep float64 statistics with compensated sums, Gymnasium's keep float32 ones: each output
is checked against a float64 reference of the whole history (to float32 rounding) and against
Gymnasium's wrapper (to Gymnasium's float32 drift), on the same seeded environments.
"""

import math
import pickle
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.error import InvalidBound
from gymnasium.vector import AutoresetMode
from gymnasium.wrappers import NormalizeObservation as GymNormalizeObservation
from gymnasium.wrappers import NormalizeReward as GymNormalizeReward
from gymnasium.wrappers.utils import RunningMeanStd as GymRunningMeanStd
from gymnasium.wrappers.vector import NormalizeObservation as GymVectorNormalizeObservation

from rewardnorm_jax.gymnasium import NormalizeObservation, NormalizeReward, RunningMeanStd
from rewardnorm_jax.gymnasium import vector as rn_vector

EPSILON = 1e-8
OURS_RTOL = 1e-7  # float32 rounding of a float64 result: |error| <= OURS_RTOL * (|x| + 1)
GYM_RTOL = 3e-5  # Gymnasium's float32 statistics drift by up to ~1e-5 over these runs


def reference(history, observation: np.ndarray, batched=False) -> np.ndarray:
    """``observation`` (a batch, if ``batched``) normalized by float64 statistics of ``history``."""
    values = np.asarray(history, np.float64).reshape(-1, *observation.shape[batched:])
    count = len(values) + 1e-4
    mean = values.sum(0) / count  # the prior's mean is 0
    m2 = ((values - mean) ** 2).sum(0) + 1e-4 * (1.0 + mean**2)  # the prior: variance 1 at 0
    return (observation - mean) / np.sqrt(m2 / count + EPSILON)


def assert_close(ours, expected, rtol):
    assert ours.dtype == np.float32
    assert np.all(np.abs(ours - expected) <= rtol * (np.abs(expected) + 1)), (ours, expected)


@pytest.mark.parametrize("env_id", ["Pendulum-v1", "Acrobot-v1"])
def test_single_env_equals_gymnasium_and_float64(env_id):
    ours = NormalizeObservation(gym.make(env_id))
    theirs: Any = GymNormalizeObservation(gym.make(env_id))
    raw = gym.make(env_id)
    ours.action_space.seed(7)
    obs, theirs_obs, raw_obs = ours.reset(seed=7)[0], theirs.reset(seed=7)[0], raw.reset(seed=7)[0]
    history = [raw_obs]
    for _ in range(400):
        assert_close(obs, reference(history, raw_obs), OURS_RTOL)
        assert_close(obs, theirs_obs, GYM_RTOL)
        action = ours.action_space.sample()
        obs, _, terminated, truncated, _ = ours.step(action)
        theirs_obs = theirs.step(action)[0]
        raw_obs = raw.step(action)[0]
        history.append(raw_obs)
        if terminated or truncated:
            obs, theirs_obs, raw_obs = ours.reset()[0], theirs.reset()[0], raw.reset()[0]
            history.append(raw_obs)
    assert ours.obs_rms.samples == [len(history)] * raw_obs.size
    assert ours.observation_space == theirs.observation_space


def test_vector_env_equals_gymnasium_and_float64():
    make = lambda: gym.make_vec("Acrobot-v1", 4, vectorization_mode="sync")  # noqa: E731
    ours = rn_vector.NormalizeObservation(make())
    theirs: Any = GymVectorNormalizeObservation(make())
    raw = make()
    ours.action_space.seed(3)
    obs, theirs_obs, raw_obs = ours.reset(seed=3)[0], theirs.reset(seed=3)[0], raw.reset(seed=3)[0]
    history = [raw_obs]
    for _ in range(300):  # episodes end by time limit and by goal: NEXT_STEP resets included
        assert_close(obs, reference(history, raw_obs, batched=True), OURS_RTOL)
        assert_close(obs, theirs_obs, GYM_RTOL)
        actions = ours.action_space.sample()
        obs, theirs_obs, raw_obs = (
            ours.step(actions)[0],
            theirs.step(actions)[0],
            raw.step(actions)[0],
        )
        history.append(raw_obs)
    assert ours.obs_rms.samples == [4 * len(history)] * 6
    assert ours.observation_space == theirs.observation_space
    assert ours.single_observation_space == theirs.single_observation_space


def test_stacks_with_the_reward_wrapper_as_gymnasiums_stack():
    ours = NormalizeObservation(NormalizeReward(gym.make("Pendulum-v1"), gamma=0.9))
    theirs: Any = GymNormalizeObservation(GymNormalizeReward(gym.make("Pendulum-v1"), gamma=0.9))
    ours.action_space.seed(1)
    ours.reset(seed=1), theirs.reset(seed=1)
    for _ in range(200):
        action = ours.action_space.sample()
        (obs, reward, *_), (theirs_obs, theirs_reward, *_) = ours.step(action), theirs.step(action)
        assert_close(obs, theirs_obs, GYM_RTOL)
        assert math.isclose(reward, theirs_reward, rel_tol=1e-12)


class ScriptedObservations(gym.Env):
    """Plays a fixed sequence of observations (``reset`` gives the first)."""

    action_space = gym.spaces.Discrete(2)

    def __init__(self, observations, space=None):
        self.observations = np.asarray(observations)
        shape, dtype = self.observations.shape[1:], self.observations.dtype.type
        low, high = (0, 255) if dtype is np.uint8 else (-np.inf, np.inf)
        self.observation_space = space or gym.spaces.Box(low, high, shape, dtype)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return self.observations[0], {}

    def step(self, action):
        self.t += 1
        return self.observations[self.t], 0.0, False, False, {}


def test_non_finite_values_are_left_out_feature_by_feature():
    values = np.array([[1.0, 2.0], [math.nan, 4.0], [3.0, math.inf], [5.0, 6.0]])
    env = NormalizeObservation(ScriptedObservations(values))
    outputs = [env.reset()[0]] + [env.step(0)[0] for _ in range(3)]
    assert env.obs_rms.samples == [3, 3]
    assert np.isnan(outputs[1][0])
    assert np.isinf(outputs[2][1])
    np.testing.assert_allclose(env.obs_rms.mean, [9.0 / 3.0001, 12.0 / 3.0001], rtol=1e-15)
    assert_close(outputs[3][0:1], reference([[1.0], [3.0], [5.0]], values[3][:1]), OURS_RTOL)
    assert_close(outputs[3][1:], reference([[2.0], [4.0], [6.0]], values[3][1:]), OURS_RTOL)
    assert all(output.shape == (2,) for output in outputs)


def test_integer_observations_are_normalized_in_float64():
    frames = np.array([[0, 255], [255, 0], [128, 128]], np.uint8)
    env = NormalizeObservation(ScriptedObservations(frames))
    outputs = [env.reset()[0], env.step(0)[0], env.step(0)[0]]
    for t, output in enumerate(outputs):
        assert_close(output, reference(frames[: t + 1], frames[t].astype(np.float64)), OURS_RTOL)
    assert env.observation_space == gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)


def test_frozen_statistics_and_checkpoints(tmp_path):
    values = np.random.default_rng(0).normal(5.0, 2.0, (12, 3))
    train = NormalizeObservation(ScriptedObservations(values))
    train.reset()
    for _ in range(5):
        train.step(0)
    train.save(tmp_path / "obs.ckpt")
    evaluation = NormalizeObservation(ScriptedObservations(values[6:]))
    evaluation.load(tmp_path / "obs.ckpt")
    assert evaluation.obs_rms.get_state() == train.obs_rms.get_state()
    evaluation.update_running_mean = False
    frozen = evaluation.obs_rms.get_state()
    first = evaluation.reset()[0]
    assert evaluation.obs_rms.get_state() == frozen
    mean, var = train.obs_rms.mean, train.obs_rms.var
    np.testing.assert_array_equal(
        first, ((values[6] - mean) / np.sqrt(var + EPSILON)).astype(np.float32)
    )
    with pytest.raises(ValueError, match="epsilon"):
        NormalizeObservation(ScriptedObservations(values), epsilon=1e-6).load(tmp_path / "obs.ckpt")
    with pytest.raises(ValueError, match=r"shape"):
        NormalizeObservation(ScriptedObservations(values[:, :2])).load(tmp_path / "obs.ckpt")
    reward = NormalizeReward(ScriptedObservations(values))
    reward.save(tmp_path / "reward.ckpt")
    with pytest.raises(ValueError, match="metadata 'gamma': in the checkpoint"):
        train.load(tmp_path / "reward.ckpt")
    assert pickle.loads(pickle.dumps(train.obs_rms)).get_state() == train.obs_rms.get_state()


def test_assigned_statistics_are_shared_or_converted():
    values = np.random.default_rng(1).normal(0.0, 3.0, (6, 2))
    train = NormalizeObservation(ScriptedObservations(values))
    evaluation = NormalizeObservation(ScriptedObservations(values))
    evaluation.obs_rms = train.obs_rms
    assert evaluation.obs_rms is train.obs_rms
    theirs = GymRunningMeanStd(shape=(2,))
    theirs.update(values)
    evaluation.obs_rms = theirs
    assert isinstance(evaluation.obs_rms, RunningMeanStd)
    np.testing.assert_allclose(evaluation.obs_rms.mean, theirs.mean, rtol=1e-15)
    np.testing.assert_allclose(evaluation.obs_rms.var, theirs.var, rtol=1e-15)
    assert evaluation.obs_rms.samples == [6, 6]
    with pytest.raises(ValueError, match=r"obs_rms should be running statistics of shape \(2,\)"):
        evaluation.obs_rms = RunningMeanStd((3,))
    with pytest.raises(ValueError, match="obs_rms should be"):
        evaluation.obs_rms = None


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("var", np.full(2, -1.0), r"var holds -1\.0; expected a variance >= 0"),
        ("mean", np.full(2, np.nan), r"RunningMeanStd\.mean holds nan; expected a finite mean"),
        ("count", 0.0, r"count holds 0\.0; expected a number of samples plus the prior"),
    ],
)
@pytest.mark.parametrize("vector", [False, True])
def test_invalid_assigned_statistics_are_refused_naming_obs_rms(field, value, message, vector):
    if vector:
        env: Any = rn_vector.NormalizeObservation(
            gym.make_vec("MountainCar-v0", 2, vectorization_mode="sync")
        )
    else:
        env = NormalizeObservation(ScriptedObservations(np.zeros((2, 2))))
    theirs = GymRunningMeanStd(shape=(2,))
    setattr(theirs, field, value)
    before = env.obs_rms
    with pytest.raises(ValueError, match=r"^obs_rms was assigned a RunningMeanStd .*" + message):
        env.obs_rms = theirs
    assert env.obs_rms is before  # nothing written


def test_refusals_name_what_is_wrong():
    dict_space = gym.spaces.Dict({"a": gym.spaces.Box(-1, 1, (2,))})
    with pytest.raises(ValueError, match="requires the observation space to have a shape"):
        NormalizeObservation(ScriptedObservations(np.zeros((2, 2)), space=dict_space))
    with pytest.raises(InvalidBound, match="epsilon"):
        NormalizeObservation(ScriptedObservations(np.zeros((2, 2))), epsilon=0.0)
    env = NormalizeObservation(ScriptedObservations(np.zeros((2, 2))))
    with pytest.raises(ValueError, match=r"observation of shape \(3,\); expected \(2,\)"):
        env.observation(np.zeros(3))
    with pytest.raises(
        TypeError, match=r"observation should hold real numbers .* observation=a <U1\[2\] array\."
    ):
        env.observation(np.array(["a", "b"]))
    same_step = gym.make_vec(
        "CartPole-v1",
        2,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
    )
    with pytest.raises(ValueError, match=r"AutoresetMode\.NEXT_STEP"):
        rn_vector.NormalizeObservation(same_step)
    envs = rn_vector.NormalizeObservation(gym.make_vec("CartPole-v1", 2, vectorization_mode="sync"))
    with pytest.raises(ValueError, match="does not support partial resets"):
        envs.reset(options={"reset_mask": np.array([True, False])})
    envs.reset(options={"reset_mask": np.array([True, True])})


def test_zero_sized_observations_and_python_scalars():
    env = NormalizeObservation(ScriptedObservations(np.zeros((3, 0))))
    assert env.reset()[0].shape == (0,)
    assert env.step(0)[0].dtype == np.float32
    assert type(RunningMeanStd().count) is float
