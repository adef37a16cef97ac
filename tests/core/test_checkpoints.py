"""save_state / load_state: bit-exact msgpack checkpoints that refuse mismatches."""

import pathlib
import pickle
import re
import zlib

import chex
import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest
from flax import serialization
from jax.experimental import checkify

import rewardnorm_jax as rn
from rewardnorm_jax import gymnasium as rn_gym
from rewardnorm_jax.gymnasium import vector as rn_gym_vector
from tests.core.test_transform_contract import TRANSFORMS as EVERY_TRANSFORM
from tests.streams import scan_steps

DATA = pathlib.Path(__file__).parents[1] / "data"  # checkpoints written by earlier versions


def assert_bit_identical(a, b):
    leaves_a, tree_a = jax.tree.flatten(a)
    leaves_b, tree_b = jax.tree.flatten(b)
    assert tree_a == tree_b  # type: ignore[operator, unused-ignore]  # jax's PyTreeDef is opaque to mypy
    for x, y in zip(leaves_a, leaves_b, strict=True):
        assert type(x) is type(y) or (isinstance(x, jax.Array) and isinstance(y, jax.Array))
        assert np.asarray(x).dtype == np.asarray(y).dtype
        assert np.asarray(x).shape == np.asarray(y).shape
        assert np.asarray(x).tobytes() == np.asarray(y).tobytes()


def stepped(transform, batch_shape=(4,), steps=7, seed=0):
    rewards = jax.random.normal(jax.random.key(seed), (steps, *batch_shape)) * 3.0 + 0.1
    t = jnp.arange(steps)

    def run():
        return scan_steps(transform, rewards, t % 3 == 2, t % 5 == 4)[0]

    err, state = jax.jit(checkify.checkify(run))()  # check_finite_reward needs checkify
    err.throw()
    return state


TRANSFORMS = {
    "gymnasium": lambda: rn.normalize_reward(),
    "sb3": lambda: rn.normalize_reward(semantics="sb3"),
    "ema_per_env_gmax": lambda: rn.normalize_reward(
        g_max=10.0, statistics=rn.Statistics(per_env=True, decay=0.9)
    ),
    "chain": lambda: rn.chain(
        rn.check_finite_reward(),
        rn.clip_reward(-5.0, 5.0),
        rn.normalize_reward(),
        rn.symlog_reward(),
    ),
    "percentile": lambda: rn.percentile_scale_reward(),
}


@pytest.mark.parametrize("name", sorted(TRANSFORMS))
def test_round_trip_is_bit_exact_and_the_run_continues_identically(name):
    transform = TRANSFORMS[name]()
    state = stepped(transform)
    restored = rn.load_state(transform.init((4,)), rn.save_state(state))
    assert_bit_identical(state, restored)
    reward = jnp.array([1.0, -2.0, 0.5, 3.0])
    step = jax.jit(checkify.checkify(transform.step))
    assert_bit_identical(step(state, reward)[1], step(restored, reward)[1])


def continues_identically(transform, state, restored):
    """One more step from ``state`` and from ``restored`` gives the same bits."""
    step = jax.jit(checkify.checkify(transform.step))
    reward = jnp.array([1.0, -2.0, 0.5, 3.0])
    assert_bit_identical(step(state, reward)[1], step(restored, reward)[1])


@pytest.mark.parametrize("name", sorted(EVERY_TRANSFORM))
def test_every_state_round_trips_through_flax_serialization(name):
    """The state is a plain pytree: flax's own functions and save_state restore it alike."""
    transform = EVERY_TRANSFORM[name]()
    state, template = stepped(transform), transform.init((4,))
    by_bytes = serialization.from_bytes(template, serialization.to_bytes(state))
    by_dict = serialization.from_state_dict(template, serialization.to_state_dict(state))
    checked = rn.load_state(template, rn.save_state(state, transform.config), transform.config)
    for restored in (by_bytes, by_dict, checked):
        chex.assert_trees_all_equal_shapes_and_dtypes(restored, state)
        chex.assert_trees_all_equal(restored, state)
    continues_identically(transform, state, checked)


@pytest.mark.parametrize("name", sorted(EVERY_TRANSFORM))
def test_every_state_round_trips_through_orbax(name, tmp_path):
    transform = EVERY_TRANSFORM[name]()
    state = stepped(transform)
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, transform.init((4,)))
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(tmp_path / "state", state)
        checkpointer.wait_until_finished()
        restored = checkpointer.restore(tmp_path / "state", abstract)
    chex.assert_trees_all_equal_shapes_and_dtypes(restored, state)
    chex.assert_trees_all_equal(restored, state)
    continues_identically(transform, state, restored)


def test_round_trip_float64_under_x64_and_nan_payloads():
    with jax.enable_x64(True):
        norm = rn.normalize_reward()
        state = stepped(norm)
        assert state.stats.mean.dtype == jnp.float64
        assert_bit_identical(state, rn.load_state(norm.init((4,)), rn.save_state(state)))
    # Arbitrary pytrees, NaN payloads and signed zeros survive bit for bit.
    odd = np.array([np.nan, -0.0, np.inf], np.float32)
    odd.view(np.uint32)[0] = 0x7FC00123  # a NaN with a payload
    tree = {"a": jnp.asarray(odd), "b": (np.float64(-0.0), 3, None)}
    assert_bit_identical(tree, rn.load_state(tree, rn.save_state(tree)))


def test_wrong_batch_shape_is_named_never_broadcast():
    norm = rn.normalize_reward()
    data = rn.save_state(stepped(norm, (4,)))
    with pytest.raises(
        ValueError, match=r"leaf 'ret': checkpoint has 'float32\[4\]', expected 'float32\[8\]'"
    ):
        rn.load_state(norm.init((8,)), data)
    with pytest.raises(
        ValueError, match=r"leaf 'ret': checkpoint has 'float32\[4\]', expected 'float32\[\]'"
    ):
        rn.load_state(norm.init(()), data)


def test_wrong_dtype_is_named():
    data = rn.save_state(stepped(rn.normalize_reward()))
    with (
        jax.enable_x64(True),
        pytest.raises(ValueError, match="leaf 'ret': checkpoint has 'float32") as excinfo,
    ):
        rn.load_state(rn.normalize_reward().init((4,)), data)
    message = str(excinfo.value)
    for leaf in ("ret", "stats/moments"):
        assert f"leaf {leaf!r}: checkpoint has 'float32" in message
        assert "expected 'float64" in message


def test_wrong_semantics_and_options_are_named():
    sb3 = {"semantics": "sb3", "gamma": 0.99}
    data = rn.save_state(stepped(rn.normalize_reward(semantics="sb3")), sb3)
    template = rn.normalize_reward().init((4,))  # the states of all semantics look alike
    assert_bit_identical(
        rn.load_state(template, data, sb3), stepped(rn.normalize_reward(semantics="sb3"))
    )
    with pytest.raises(
        ValueError, match="metadata 'semantics': checkpoint has 'sb3', expected 'gymnasium'"
    ):
        rn.load_state(template, data, {"semantics": "gymnasium", "gamma": 0.99})
    with pytest.raises(ValueError, match=r"metadata 'gamma': checkpoint has 0\.99, expected 0\.9"):
        rn.load_state(template, data, {"semantics": "sb3", "gamma": 0.9})

    ema = rn.save_state(stepped(rn.normalize_reward(statistics=rn.Statistics(decay=0.9))))
    with pytest.raises(
        ValueError,
        match=re.escape("static field 'stats/decay': checkpoint has 0.9, expected 0.99"),
    ):
        rn.load_state(rn.normalize_reward(statistics=rn.Statistics(decay=0.99)).init((4,)), ema)
    with pytest.raises(
        ValueError,
        match=re.escape("leaf 'stats/moments': checkpoint has 'float32[5]', expected 'float32[4]'"),
    ):
        rn.load_state(rn.normalize_reward().init((4,)), ema)


def test_wrong_structure_is_named():
    data = rn.save_state(stepped(rn.normalize_reward()))
    template = rn.chain(rn.clip_reward(), rn.normalize_reward()).init((4,))
    with pytest.raises(
        ValueError, match="leaf '1/ret': expected 'float32\\[4\\]', not in the checkpoint"
    ):
        rn.load_state(template, data)


def test_every_truncation_and_every_corrupted_byte_is_refused():
    data = rn.save_state(stepped(rn.normalize_reward()), {"semantics": "gymnasium"})
    template = rn.normalize_reward().init((4,))
    for size in range(len(data)):
        with pytest.raises(ValueError, match=r"truncated|not a|corrupt"):
            rn.load_state(template, data[:size])
    for position in range(len(data)):
        corrupted = bytearray(data)
        corrupted[position] ^= 0x10
        with pytest.raises(ValueError, match="checkpoint"):  # every load error names it
            rn.load_state(template, bytes(corrupted))


class _Exploit:
    ran = False

    def __reduce__(self):
        return (setattr, (_Exploit, "ran", True))


def test_a_pickle_is_refused_and_never_executed():
    with pytest.raises(ValueError, match=r"truncated or not msgpack|not a"):
        rn.load_state(rn.normalize_reward().init(), pickle.dumps(_Exploit()))
    assert not _Exploit.ran
    with pytest.raises(ValueError, match="data should be the bytes"):
        rn.load_state(rn.normalize_reward().init(), "a path")  # type: ignore[arg-type]  # deliberately invalid


def test_metadata_must_be_plain_values():
    with pytest.raises(ValueError, match="metadata should map strings"):
        rn.save_state(rn.init_stats(), {"semantics": rn.Semantics("x", "never", "never")})


# --- Gymnasium adapters: their statistics in the same format ----------------


def run_gymnasium(env, steps=50):
    env.reset(seed=3)
    env.action_space.seed(3)
    for _ in range(steps):
        env.step(env.action_space.sample())
    return env


def test_gymnasium_wrapper_statistics_round_trip_bit_exactly():
    env = run_gymnasium(rn_gym.NormalizeReward(gym.make("MountainCarContinuous-v0")))
    saved = {"return_rms": env.return_rms.get_state(), "discounted_reward": env.discounted_reward}
    data = rn.save_state(saved, {"wrapper": "NormalizeReward", "gamma": env.gamma})

    fresh = rn_gym.NormalizeReward(gym.make("MountainCarContinuous-v0"))
    template = {
        "return_rms": fresh.return_rms.get_state(),
        "discounted_reward": fresh.discounted_reward,
    }
    loaded = rn.load_state(template, data, {"wrapper": "NormalizeReward", "gamma": 0.99})
    fresh.return_rms.set_state(loaded["return_rms"])
    fresh.discounted_reward = loaded["discounted_reward"]
    assert fresh.return_rms.get_state() == env.return_rms.get_state()
    assert [float(v).hex() for v in fresh.return_rms.get_state().values()] == [
        float(v).hex() for v in env.return_rms.get_state().values()
    ]
    assert (
        np.asarray(fresh.discounted_reward).tobytes() == np.asarray(env.discounted_reward).tobytes()
    )


def test_gymnasium_vector_wrapper_statistics_round_trip_bit_exactly():
    envs = run_gymnasium(rn_gym_vector.NormalizeReward(gym.make_vec("MountainCarContinuous-v0", 3)))
    saved = {
        "return_rms": envs.return_rms.get_state(),
        "accumulated_reward": envs.accumulated_reward,
    }
    fresh = rn_gym_vector.NormalizeReward(gym.make_vec("MountainCarContinuous-v0", 3))
    template = {
        "return_rms": fresh.return_rms.get_state(),
        "accumulated_reward": fresh.accumulated_reward,
    }
    loaded = rn.load_state(template, rn.save_state(saved))
    assert_bit_identical(saved, loaded)
    wrong = rn_gym_vector.NormalizeReward(gym.make_vec("MountainCarContinuous-v0", 2))
    with pytest.raises(
        ValueError,
        match=r"leaf 'accumulated_reward': checkpoint has 'float32\[3\]', expected 'float32\[2\]'",
    ):
        rn.load_state(
            {
                "return_rms": wrong.return_rms.get_state(),
                "accumulated_reward": wrong.accumulated_reward,
            },
            rn.save_state(saved),
        )


def test_gymnasium_statistics_through_the_jax_core_state_under_x64():
    env = run_gymnasium(rn_gym.NormalizeReward(gym.make("MountainCarContinuous-v0")))
    with jax.enable_x64(True):
        stats = env.return_rms.to_running_stats()
        loaded = rn.load_state(rn.init_stats(), rn.save_state(stats))
        back = rn_gym.RunningMeanStd.from_running_stats(loaded)
    assert back.get_state() == env.return_rms.get_state()


def test_transform_config_as_metadata_names_every_difference():
    norm = rn.chain(rn.clip_reward(-5.0, 5.0), rn.normalize_reward(semantics="sb3", gamma=0.9))
    data = rn.save_state(stepped(norm), norm.config)
    assert_bit_identical(rn.load_state(norm.init((4,)), data, norm.config), stepped(norm))
    other = rn.chain(rn.clip_reward(-5.0, 5.0), rn.normalize_reward(semantics="purejaxrl"))
    with pytest.raises(ValueError, match="metadata '1/semantics/name'") as excinfo:
        rn.load_state(other.init((4,)), data, other.config)
    message = str(excinfo.value)
    assert "metadata '1/semantics/name': checkpoint has 'sb3', expected 'purejaxrl'" in message
    assert "metadata '1/gamma': checkpoint has 0.9, expected 0.99" in message
    assert "metadata '1/semantics/clip': checkpoint has 10.0, expected None" in message
    assert "1/transform" not in message
    assert "0/" not in message


def test_crafted_bodies_with_a_valid_checksum_raise_value_error():
    def envelope(record):
        body = serialization.msgpack_serialize(record)
        return serialization.msgpack_serialize(
            {"format": "rewardnorm_jax.state", "crc32": zlib.crc32(body), "body": body}
        )

    template = rn.normalize_reward().init((4,))
    good = rn.save_state(stepped(rn.normalize_reward()))
    version = serialization.msgpack_restore(serialization.msgpack_restore(good)["body"])["version"]
    for record, message in [
        ([1, 2, 3], "not a record"),
        ({"version": version, "static": {}, "metadata": {}}, "holds no 'state'"),
        ({"version": version, "state": {}, "static": [1], "metadata": {}}, "no 'static' mapping"),
        ({"version": version, "state": {}, "static": {}, "metadata": 3}, "no 'metadata' mapping"),
        ({"version": version, "state": [1.0], "static": {}, "metadata": {}}, "does not match"),
    ]:
        with pytest.raises(ValueError, match=message):
            rn.load_state(template, envelope(record))


def test_gymnasium_wrappers_save_and_load_continue_bit_for_bit(tmp_path):
    """Save mid-run, load into a wrapper around an identical environment: same rewards after."""

    def base_envs(num_envs=3):
        return gym.make_vec("CartPole-v1", num_envs, vectorization_mode="sync")

    actions = iter(np.random.default_rng(0).integers(0, 2, (400, 3)))
    saved, twin = rn_gym_vector.NormalizeReward(base_envs()), base_envs()
    saved.reset(seed=3)
    twin.reset(seed=3)
    for _ in range(300):  # save on a step where an environment awaits its autoreset
        action = next(actions)
        saved.step(action)
        twin.step(action)
        if saved._prev_dones.any():
            break
    assert saved._prev_dones.any()
    path = tmp_path / "vec.msgpack"
    saved.save(path)
    restored = rn_gym_vector.NormalizeReward(twin)
    restored.load(path)
    for action in actions:
        expected, got = saved.step(action)[1], restored.step(action)[1]
        assert got.tobytes() == expected.tobytes()
    with pytest.raises(ValueError, match=r"metadata 'gamma': checkpoint has 0\.99, expected 0\.9"):
        rn_gym_vector.NormalizeReward(base_envs(), gamma=0.9).load(path)
    with pytest.raises(
        ValueError, match=r"leaf 'accumulated_reward': checkpoint has 'float32\[3\]'"
    ):
        rn_gym_vector.NormalizeReward(base_envs(2)).load(path)

    env = rn_gym.NormalizeReward(gym.make("CartPole-v1"))
    env.reset(seed=0)
    for _ in range(30):
        if any(env.step(env.action_space.sample())[2:4]):
            env.reset()
    env.save(tmp_path / "one.msgpack")
    with pytest.raises(ValueError, match="metadata 'wrapper'"):
        rn_gym_vector.NormalizeReward(base_envs()).load(tmp_path / "one.msgpack")
    restored_one = rn_gym.NormalizeReward(gym.make("CartPole-v1"))
    restored_one.load(tmp_path / "one.msgpack")
    assert restored_one.discounted_reward.tobytes() == env.discounted_reward.tobytes()
    assert restored_one.return_rms.get_state() == env.return_rms.get_state()


V1_CHECKPOINTS = {
    # Written by rewardnorm_jax 0.1.0 (format version 1, one leaf per statistic):
    # three steps of rewards [[1, -2, 0.5, 3], [0.25, 1.5, -1, 2], [4, 0, 1, -0.5]],
    # environment 1 terminating every step.
    "normalize_reward": rn.normalize_reward(),
    "chain_ema_per_env": rn.chain(
        rn.clip_reward(-5.0, 5.0),
        rn.normalize_reward(statistics=rn.Statistics(per_env=True, decay=0.9)),
    ),
}


@pytest.mark.parametrize("name", sorted(V1_CHECKPOINTS))
def test_version_1_checkpoints_are_migrated_bit_for_bit(name):
    transform = V1_CHECKPOINTS[name]
    data = (DATA / f"v1_{name}.msgpack").read_bytes()
    body = serialization.msgpack_restore(serialization.msgpack_restore(data)["body"])
    assert body["version"] == 1
    saved = body["state"]["stats"] if "stats" in body["state"] else body["state"]["1"]["stats"]

    state = rn.load_state(transform.init((4,)), data, transform.config)
    stats = state.stats if "stats" in body["state"] else state[1].stats
    for quantity in ("mean", "mean_low", "m2", "m2_low", "count_hi", "count_lo"):
        assert np.asarray(getattr(stats, quantity)).tobytes() == saved[quantity].tobytes()
    assert (stats.weight is None) == (saved["weight"] is None)
    if stats.weight is not None:
        assert np.asarray(stats.weight).tobytes() == saved["weight"].tobytes()
    # The migrated state steps on, and saves in the current format.
    _, state = transform.step(state, jnp.ones(4))
    assert_bit_identical(rn.load_state(transform.init((4,)), rn.save_state(state)), state)


def crafted(record_changes):
    """A checkpoint with a valid checksum whose record is changed as given."""
    good = rn.save_state(stepped(rn.normalize_reward()))
    record = serialization.msgpack_restore(serialization.msgpack_restore(good)["body"])
    body = serialization.msgpack_serialize({**record, **record_changes})
    return serialization.msgpack_serialize(
        {"format": "rewardnorm_jax.state", "crc32": zlib.crc32(body), "body": body}
    )


@pytest.mark.parametrize("version", [True, 2.0, "3", 0, 4])
def test_only_the_integer_format_version_is_read(version):
    with pytest.raises(ValueError, match=f"format version {version!r} is not supported"):
        rn.load_state(rn.normalize_reward().init((4,)), crafted({"version": version}))


def test_metadata_with_nan_loads_back_and_bools_are_not_numbers():
    state = stepped(rn.normalize_reward())
    data = rn.save_state(state, {"target": float("nan"), "flag": True})
    loaded = rn.load_state(state, data, {"target": float("nan"), "flag": True})
    assert_bit_identical(loaded, state)
    with pytest.raises(ValueError, match="metadata 'flag': checkpoint has True, expected 1"):
        rn.load_state(state, data, {"target": float("nan"), "flag": 1})


@pytest.mark.parametrize(
    ("transform", "field", "value", "message"),
    [
        (rn.normalize_reward(), "mean", float("nan"), r"state.stats.mean holds nan"),
        (rn.normalize_reward(), "m2", -1.0, r"state.stats.m2 holds -1.0"),
        (rn.normalize_reward(), "m2_low", float("inf"), r"state.stats.m2_low holds inf"),
        (
            rn.normalize_reward(statistics=rn.Statistics(decay=0.9)),
            "weight",
            0.0,
            r"state.stats.weight holds 0.0",
        ),
        (
            rn.normalize_reward(statistics=rn.Statistics(decay=0.9)),
            "weight",
            float("nan"),
            r"state.stats.weight holds nan",
        ),
    ],
)
def test_crafted_statistics_with_a_valid_checksum_are_refused(transform, field, value, message):
    def with_quantity(state, field, value):
        position = ("mean", "mean_low", "m2", "m2_low", "weight").index(field)
        moments = state.stats.moments.at[..., position].set(value)
        return state.replace(stats=state.stats.replace(moments=moments))

    state = stepped(transform)
    with pytest.raises(ValueError, match=message):
        rn.load_state(state, rn.save_state(with_quantity(state, field, value)))
    saturated = with_quantity(state, "m2", jnp.inf)  # a saturated M is a state updates reach
    assert_bit_identical(rn.load_state(state, rn.save_state(saturated)), saturated)


def _set(state, path, value):
    """``state`` with the leaf at ``path`` (attribute names, or an index into a tuple) replaced."""
    head, *rest = path
    if isinstance(head, int):
        return tuple(_set(s, rest, value) if i == head else s for i, s in enumerate(state))
    if not rest:
        return state.replace(**{head: jnp.full_like(getattr(state, head), value)})
    return state.replace(**{head: _set(getattr(state, head), rest, value)})


CRAFTED = {
    # A g_max state whose running maximum is NaN normalizes every later reward to NaN.
    "g_max nan": (
        lambda: rn.normalize_reward(g_max=10.0),
        ("ret_abs_max",),
        float("nan"),
        r"state.ret_abs_max holds nan; expected a running maximum of \|G\| >= 0",
    ),
    "g_max negative": (
        lambda: rn.normalize_reward(g_max=10.0, statistics=rn.Statistics(per_env=True)),
        ("ret_abs_max",),
        -1.0,
        r"state.ret_abs_max holds -1.0",
    ),
    # A NaN return enters every later merge: the variance saturates for good.
    "return nan": (
        lambda: rn.normalize_reward(),
        ("ret",),
        float("nan"),
        r"state.ret holds nan; expected a return that is not NaN",
    ),
    # A NaN percentile makes the divisor, and every later reward, NaN.
    "percentile nan": (
        lambda: rn.percentile_scale_reward(),
        ("percentiles", "high"),
        float("nan"),
        r"state.percentiles.high holds nan; expected a finite moving percentile",
    ),
    "percentile inf": (
        lambda: rn.percentile_scale_reward(),
        ("percentiles", "low"),
        float("inf"),
        r"state.percentiles.low holds inf; expected a finite moving percentile",
    ),
    "percentiles out of order": (
        lambda: rn.percentile_scale_reward(),
        ("percentiles", "low"),
        1e6,
        r"state.percentiles.low holds 1000000.0; expected a low percentile <= the high one \(",
    ),
    "percentile return nan": (
        lambda: rn.percentile_scale_reward(),
        ("ret",),
        float("nan"),
        r"state.ret holds nan",
    ),
    "chain member": (
        lambda: rn.chain(rn.check_finite_reward(), rn.normalize_reward(g_max=10.0)),
        (1, "ret_abs_max"),
        float("nan"),
        r"state\[1\].ret_abs_max holds nan",
    ),
}


@pytest.mark.parametrize("name", sorted(CRAFTED))
def test_crafted_states_with_a_valid_checksum_are_refused_by_field(name):
    factory, path, value, message = CRAFTED[name]
    transform = factory()
    state = stepped(transform)
    crafted = _set(state, path, value)
    with pytest.raises(ValueError, match=message):
        rn.load_state(transform.init((4,)), rn.save_state(crafted, transform.config))


def test_a_crafted_rounding_error_that_makes_the_variance_negative_is_refused():
    state = stepped(rn.normalize_reward())
    m2 = float(state.stats.m2)
    moments = state.stats.moments.at[3].set(-2.0 * m2)  # m2 + m2_low < 0: a NaN divisor
    crafted = state.replace(stats=state.stats.replace(moments=moments))
    with pytest.raises(ValueError, match=r"state.stats.m2_low holds .*; expected a rounding error"):
        rn.load_state(state, rn.save_state(crafted))


def test_the_percentile_state_alone_is_checked_too():
    state = rn.update_percentiles(rn.init_percentiles(), jnp.arange(10.0), rate=0.5)
    assert_bit_identical(rn.load_state(state, rn.save_state(state)), state)
    with pytest.raises(ValueError, match=r"state.low holds nan"):
        rn.load_state(state, rn.save_state(state.replace(low=jnp.float32(jnp.nan))))


def test_overflowed_returns_are_states_a_run_reaches_and_load():
    """Returns past float32's range become inf (the variance saturates): such states load."""
    norm = rn.normalize_reward(g_max=10.0)
    state = norm.init((2,))
    for _ in range(20):
        _, state = norm.step(state, jnp.array([3e37, 1.0]))
    assert np.isinf(state.ret[0])
    assert np.isinf(state.ret_abs_max)
    assert np.isinf(state.stats.var)
    loaded = rn.load_state(norm.init((2,)), rn.save_state(state, norm.config), norm.config)
    assert_bit_identical(loaded, state)
    out, _ = norm.step(loaded, jnp.array([1.0, 1.0]), jnp.array([True, False]))
    assert not np.isnan(out).any()


V2_CHECKPOINTS = {
    # Written by format version 2 (packed statistics, flat options).
    "non_episodic_per_env": (
        rn.normalize_reward(
            semantics="non_episodic", gamma=0.99, statistics=rn.Statistics(per_env=True)
        ),
        (2,),
    ),
    "chain_keyed_percentile": (
        rn.chain(
            rn.normalize_reward(
                semantics="sb3",
                gamma=0.9,
                g_max=10.0,
                statistics=rn.Statistics(decay=0.99, num_tasks=2, components=1),
            ),
            rn.percentile_scale_reward(gamma=0.9, low=5.0, high=95.0, rate=0.5, limit=1.0),
            rn.clip_reward(-5.0, 5.0),
        ),
        (3, 2),
    ),
}


@pytest.mark.parametrize("name", sorted(V2_CHECKPOINTS))
def test_version_2_checkpoints_load_bit_for_bit(name):
    transform, batch_shape = V2_CHECKPOINTS[name]
    data = (DATA / f"v2_{name}.msgpack").read_bytes()
    body = serialization.msgpack_restore(serialization.msgpack_restore(data)["body"])
    assert body["version"] == 2
    state = rn.load_state(transform.init(batch_shape), data, transform.config)
    saved, loaded = body["state"], serialization.to_state_dict(state)
    saved_leaves = jax.tree.leaves(saved)
    assert saved_leaves, "the file holds arrays"
    for want, got in zip(saved_leaves, jax.tree.leaves(loaded), strict=True):
        assert np.asarray(got).tobytes() == np.asarray(want).tobytes()
    tasks = {"task": jnp.array([0, 1, 1])} if name == "chain_keyed_percentile" else {}
    _, state = transform.step(state, jnp.ones(batch_shape), **tasks)
    assert_bit_identical(rn.load_state(transform.init(batch_shape), rn.save_state(state)), state)


# Written in format version 3 before observation states recorded their placement
# (static per_env, num_tasks) and before the configurations held normalize_observation's
# epsilon_on and until_count and group_advantages' levels and arithmetic.
OBSERVATION_BATCHES = (
    [[1.0, -2.0], [0.5, 3.0], [2.25, -0.75]],
    [[0.0, 1.0], [1.5, -3.0], [0.25, 0.75]],
)
EARLY_V3_OBSERVATIONS = {
    # "brax" statistics of 2 features: shared, updated with the first batch; one set per
    # environment of (3,), updated with both.
    "shared": (rn.normalize_observation("brax"), (), 1),
    "per_env": (
        rn.normalize_observation("brax", statistics=rn.Statistics(per_env=True)),
        (3,),
        2,
    ),
}


@pytest.mark.parametrize("name", sorted(EARLY_V3_OBSERVATIONS))
def test_observation_checkpoints_saved_before_the_placement_load_bit_for_bit(name):
    norm, batch_shape, steps = EARLY_V3_OBSERVATIONS[name]
    data = (DATA / f"v3_observation_{name}.msgpack").read_bytes()
    body = serialization.msgpack_restore(serialization.msgpack_restore(data)["body"])
    assert body["version"] == 3
    assert not {"per_env", "num_tasks"} & (set(body["static"]) | set(body["layout"]))
    assert not {"epsilon_on", "until_count"} & set(body["metadata"])
    template = norm.init(jnp.zeros(2), batch_shape=batch_shape)

    loaded = rn.load_state(template, data, norm.config)
    assert (loaded.per_env, loaded.num_tasks) == (template.per_env, template.num_tasks)
    assert loaded.env_shape == template.env_shape
    saved = body["state"]["stats"]
    assert np.asarray(loaded.stats.moments).tobytes() == saved["moments"].tobytes()
    assert np.asarray(loaded.stats.count_words).tobytes() == saved["count_words"].tobytes()
    # The same statistics as the current code computes from the same batches.
    state = template
    for batch in OBSERVATION_BATCHES[:steps]:
        state = norm.update(state, jnp.array(batch))
    assert_bit_identical(loaded, state)
    # Another arithmetic than the one that saved it is refused, naming the option.
    other = rn.normalize_observation(
        "brax", epsilon_on="std", statistics=rn.Statistics(per_env=name == "per_env")
    )
    with pytest.raises(ValueError, match="metadata 'epsilon_on': checkpoint has 'variance'"):
        rn.load_state(template, data, other.config)


def test_group_advantages_configs_saved_before_the_levels_load_as_their_preset():
    data = (DATA / "v3_group_advantages_grpo.msgpack").read_bytes()
    body = serialization.msgpack_restore(serialization.msgpack_restore(data)["body"])
    assert body["version"] == 3
    assert "mean" not in body["metadata"]
    grpo = rn.group_advantages("grpo", group_size=2)
    assert rn.load_state({}, data, grpo.config) == {}
    # The same levels named through the "normalized" estimator are another configuration.
    levels = rn.group_advantages(mean="group", std="group", group_size=2)
    with pytest.raises(ValueError, match="metadata 'estimator': checkpoint has 'grpo'"):
        rn.load_state({}, data, levels.config)
    for changed, message in (
        ({"epsilon_at": "variance"}, "metadata 'epsilon_at': checkpoint has 'std'"),
        ({"ddof": 0}, "metadata 'ddof': checkpoint has 1"),
        ({"epsilon": 1e-6}, "metadata 'epsilon': checkpoint has 0.0"),
    ):
        other = rn.group_advantages("grpo", group_size=2, **changed)
        with pytest.raises(ValueError, match=message):
            rn.load_state({}, data, other.config)


def test_a_checkpoint_of_one_state_type_is_refused_by_another_of_the_same_leaves():
    center, observations = rn.center_reward(), rn.normalize_observation()
    center_state = center.init(())
    observation_state = observations.init(jnp.zeros(()))
    assert jax.tree.map(jnp.shape, center_state.stats) == jax.tree.map(
        jnp.shape, observation_state.stats
    )
    for saved, template, holds, wanted in (
        (center_state, observation_state, "CenterRewardState", "ObservationNormState"),
        (observation_state, center_state, "ObservationNormState", "CenterRewardState"),
    ):
        message = rf"it holds {holds}, the template is {wanted}(.|\n)*type 'state'"
        with pytest.raises(ValueError, match=message):
            rn.load_state(template, rn.save_state(saved))


@pytest.mark.parametrize("layout", [["state"], "NormalizeRewardState", None, 3])
def test_a_crafted_layout_that_is_not_a_mapping_is_refused(layout):
    with pytest.raises(ValueError, match=r"checkpoint record's 'layout' is a \w+, not a mapping"):
        rn.load_state(rn.normalize_reward().init((4,)), crafted({"layout": layout}))


@pytest.mark.parametrize(
    "build",
    [
        lambda: rn.group_advantages(
            "grpo",
            group_size=np.int64(4),  # type: ignore[arg-type]  # NumPy scalars, on purpose
            standardize_batch=np.bool_(True),  # type: ignore[arg-type]
        ),
        lambda: rn.group_advantages(
            "gpg",
            num_groups=np.int32(3),  # type: ignore[arg-type]
            f_norm=np.float32(2.0),  # type: ignore[arg-type]
        ),
        lambda: rn.normalize_observation(clip=np.float32(5.0), epsilon=np.float64(1e-6)),
        lambda: rn.normalize_reward(gamma=np.float64(0.9)),
        lambda: rn.popart(step_size=np.float32(0.5)),
    ],
)
def test_configs_built_from_numpy_scalars_hold_plain_values_and_save(build):
    config = build().config
    metadata = config.metadata()
    assert not [v for v in metadata.values() if isinstance(v, np.generic)], metadata
    state = rn.center_reward().init(())
    assert_bit_identical(rn.load_state(state, rn.save_state(state, config), config), state)
