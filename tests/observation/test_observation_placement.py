"""normalize_observation with statistics per environment and per task.

Per-environment and per-task statistics must equal separate normalizers fed
each environment's (each task's) entries: a separate normalizer of task k is
fed the whole batch with ``active=task == k``, which merges the same entries.
"""

import functools
import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import serialization

import rewardnorm_jax as rn

T, N, K = 4, 6, 3
PER_ENV = rn.Statistics(per_env=True)
PER_TASK = rn.Statistics(num_tasks=K)


def data(seed=0):
    """``T`` batches of ``N`` dict observations, of very different scales per environment."""
    rng = np.random.default_rng(seed)
    scale = 10.0 ** rng.integers(-2, 4, size=(N, 1))
    offset = rng.normal(size=(N, 1)) * 100
    obs = {
        "a": rng.normal(size=(T, N, 2)) * scale + offset,
        "b": rng.normal(size=(T, N)) * scale[:, 0] - offset[:, 0],
    }
    weights = rng.integers(0, 4, size=(T, N)).astype(np.float64)
    task = rng.integers(0, K, size=(T, N)).astype(np.int32)
    return obs, weights, task


ONE = {"a": jax.ShapeDtypeStruct((2,), jnp.float64), "b": jax.ShapeDtypeStruct((), jnp.float64)}


@functools.partial(jax.jit, static_argnums=0)
def scanned(norm, state, obs, per_step):
    """``norm.step`` over the ``T`` batches: one compilation per normalizer and shapes."""

    def body(state, inputs):
        batch, kwargs = inputs
        out, state = norm.step(state, batch, **kwargs)
        return state, out

    return jax.lax.scan(body, state, (obs, per_step))


def rollout(norm, state, obs, **per_step):
    """``(state, normalized observations)`` of ``norm.step`` over the ``T`` batches."""
    return scanned(norm, state, obs, per_step)


@pytest.mark.parametrize("preset", ["gymnasium", "brax"])
def test_per_env_statistics_equal_one_normalizer_per_environment(preset):
    with jax.enable_x64(True):
        obs, weights, _ = data()
        per_env = rn.normalize_observation(preset, statistics=PER_ENV)
        state, got = rollout(per_env, per_env.init(ONE, batch_shape=(N,)), obs, weights=weights)
        assert state.stats["a"].mean.shape == (N, 2)
        assert state.env_shape == (N,)
        one = rn.normalize_observation(preset)
        for i in range(N):
            slice_i = jax.tree.map(lambda x, i=i: x[:, i], obs)
            ref_state, want = rollout(one, one.init(ONE), slice_i, weights=weights[:, i])
            for key in obs:
                np.testing.assert_allclose(got[key][:, i], want[key], rtol=1e-12, atol=1e-12)
                np.testing.assert_allclose(
                    state.stats[key].mean[i], ref_state.stats[key].mean, rtol=1e-12
                )
            assert int(rn.count_as_int(state.stats["b"])[i]) == weights[:, i].sum()
        back = per_env.denormalize(state, per_env.apply(state, jax.tree.map(lambda x: x[0], obs)))
        np.testing.assert_allclose(back["a"], obs["a"][0], rtol=1e-12)


@pytest.mark.parametrize("preset", ["gymnasium", "brax"])
def test_per_task_statistics_equal_one_normalizer_per_task(preset):
    with jax.enable_x64(True):
        obs, weights, task = data(1)
        active = task != 0  # with weights: both apply
        active[0, :] = True  # ... and task 0 still learns from the first batch
        per_task = rn.normalize_observation(preset, statistics=PER_TASK)
        state, got = rollout(
            per_task, per_task.init(ONE), obs, weights=weights, active=active, task=task
        )
        assert state.stats["a"].mean.shape == (K, 2)
        one = rn.normalize_observation(preset)
        for k in range(K):
            ref_state, want = rollout(
                one, one.init(ONE), obs, weights=weights, active=active & (task == k)
            )
            for key in obs:
                mine = task == k
                np.testing.assert_allclose(got[key][mine], want[key][mine], rtol=1e-12, atol=1e-12)
                np.testing.assert_allclose(
                    state.stats[key].mean[k], ref_state.stats[key].mean, rtol=1e-12
                )
                np.testing.assert_array_equal(
                    rn.count_as_int(state.stats[key])[k], rn.count_as_int(ref_state.stats[key])
                )
        batch = jax.tree.map(lambda x: x[0], obs)
        back = per_task.denormalize(state, per_task.apply(state, batch, task=task[0]), task=task[0])
        np.testing.assert_allclose(back["b"], batch["b"], rtol=1e-12)


def test_per_env_statistics_merge_leading_axes_into_each_environment():
    norm = rn.normalize_observation("brax", statistics=PER_ENV)
    steps = jnp.array([[1.0, 10.0], [3.0, 30.0], [5.0, 60.0]])  # 3 steps of 2 environments
    state = norm.update(norm.init(jnp.zeros(()), batch_shape=(2,)), steps)
    np.testing.assert_allclose(state.stats.mean, [3.0, 100.0 / 3], rtol=1e-6)
    np.testing.assert_allclose(state.stats.var, [8.0 / 3, 3800.0 / 9], rtol=1e-6)
    assert rn.count_as_int(state.stats).tolist() == [3, 3]


def test_per_env_under_a_named_vmap_shares_environment_i_across_participants():
    obs, _, _ = data(2)
    batch = jnp.asarray(obs["b"][:2], jnp.float32)  # 2 participants, N environments each
    norm = rn.normalize_observation(statistics=PER_ENV, axis_name="p")
    state = norm.init(jnp.zeros(()), batch_shape=(N,))
    step = jax.vmap(norm.step, in_axes=(None, 0), out_axes=(0, None), axis_name="p")
    out, merged = jax.jit(step)(state, batch)
    one = rn.normalize_observation()
    for i in range(N):
        want, ref = jax.jit(one.step)(one.init(jnp.zeros(())), batch[:, i])
        np.testing.assert_allclose(out[:, i], want, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(merged.stats.mean[i], ref.stats.mean, rtol=1e-6)


def test_per_task_under_a_named_vmap_merges_each_task_across_participants():
    obs, _, task = data(3)
    batch = jnp.asarray(obs["b"][:2], jnp.float32)
    ids = jnp.asarray(task[:2])
    norm = rn.normalize_observation(statistics=PER_TASK, axis_name="p")
    whole = rn.normalize_observation(statistics=PER_TASK)
    state = norm.init(jnp.zeros(()))
    step = jax.vmap(
        lambda s, x, t: norm.step(s, x, task=t),
        in_axes=(None, 0, 0),
        out_axes=(0, None),
        axis_name="p",
    )
    out, merged = jax.jit(step)(state, batch, ids)
    want, ref = jax.jit(lambda s, x, t: whole.step(s, x, task=t))(
        whole.init(jnp.zeros(())), batch, ids
    )
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(merged.stats.mean, ref.stats.mean, rtol=1e-6)


def test_an_out_of_range_task_id_under_jit_joins_no_set_and_normalizes_to_nan():
    norm = rn.normalize_observation(statistics=rn.Statistics(num_tasks=2))
    state = norm.init(jnp.zeros(()))
    out, new = jax.jit(lambda s, x, t: norm.step(s, x, task=t))(
        state, jnp.array([1.0, 3.0, 5.0]), jnp.array([0, 0, 7])
    )
    assert np.isnan(out[2])
    assert np.isfinite(out[:2]).all()
    assert rn.count_as_int(new.stats).tolist() == [2, 0]
    np.testing.assert_allclose(new.stats.mean, [4.0 / (2 + 1e-4), 0.0], rtol=1e-6)  # prior


def test_refusals_name_the_parameter_and_what_is_valid():
    per_task = rn.normalize_observation(statistics=PER_TASK)
    shared = rn.normalize_observation()
    x = jnp.ones((2, 3))
    with pytest.raises(ValueError, match=r"num_tasks=3\) and needs each observation's task id"):
        per_task.step(per_task.init(jnp.zeros(3)), x)
    with pytest.raises(ValueError, match="keeps no per-task statistics"):
        shared.step(shared.init(jnp.zeros(3)), x, task=jnp.array([0, 1]))
    with pytest.raises(ValueError, match=r"task has shape \(3,\); expected \(2,\)"):
        per_task.apply(per_task.init(jnp.zeros(3)), x, task=jnp.array([0, 1, 2]))
    with pytest.raises(ValueError, match=r"task ids should be in \[0, 3\)"):
        per_task.update(per_task.init(jnp.zeros(3)), x, task=np.array([0, 3]))
    for bad in (rn.Statistics(components=1), rn.Statistics(decay=0.9)):
        with pytest.raises(ValueError, match=r"statistics=Statistics\(.* is not supported"):
            rn.normalize_observation(statistics=bad)
    with pytest.raises(TypeError, match=r"statistics should be a rewardnorm_jax\.Statistics"):
        rn.normalize_observation(statistics="per_env")  # type: ignore[arg-type]
    per_env = rn.normalize_observation(statistics=PER_ENV)
    with pytest.raises(ValueError, match=r"batch_shape=None: .*batch_shape=\(num_envs,\)"):
        per_env.init(jnp.zeros(3))
    state = per_env.init(jnp.zeros(3), batch_shape=(2,))
    with pytest.raises(ValueError, match=r"does not end with \(2, 3\)"):
        per_env.step(state, jnp.ones((3, 3)))
    with pytest.raises(ValueError, match="state holds statistics per environment"):
        shared.apply(state, x)
    with pytest.raises(ValueError, match=r"whose shapes start with \(3,\)"):
        per_task.apply(shared.init(jnp.zeros(2)), jnp.ones(2), task=jnp.array(0))


PLACEMENT_WORDS = {
    "shared": r"one set shared by the batch \(Statistics\(\)\)",
    "per_env": r"one set per environment \(Statistics\(per_env=True\)\)",
    "per_task": r"one set per task \(Statistics\(num_tasks=3\)\)",
}


def placed(name):
    """``(normalizer, state, observations)`` of one placement; every state's statistics (3, 2).

    Shared (3, 2) features, 3 tasks of (2,) features, and one environment (no environment
    axis) of (3, 2) features: each state's shapes fit every other placement.
    """
    statistics = {"shared": rn.Statistics(), "per_env": PER_ENV, "per_task": PER_TASK}[name]
    norm = rn.normalize_observation(statistics=statistics)
    one = jnp.zeros(2) if name == "per_task" else jnp.zeros((3, 2))
    state = norm.init(one, batch_shape=() if name == "per_env" else None)
    assert state.stats.mean.shape == (3, 2)
    return norm, state, jnp.ones((4, *one.shape))


@pytest.mark.parametrize("mine", sorted(PLACEMENT_WORDS))
@pytest.mark.parametrize("theirs", sorted(PLACEMENT_WORDS))
def test_a_state_of_another_placement_is_refused_naming_both(mine, theirs):
    """Refused in step, update, apply and denormalize, with and without jit.

    Shapes that fit (a per-task (3, 2) state read as one (3, 2) observation) let no state of
    another placement through.
    """
    norm, own, obs = placed(mine)
    _, state, _ = placed(theirs)
    task = {"task": jnp.zeros((4,), jnp.int32)} if mine == "per_task" else {}
    calls = {
        "step": lambda s: norm.step(s, obs, **task),
        "update": lambda s: norm.update(s, obs, **task),
        "apply": lambda s: norm.apply(s, obs, **task),
        "denormalize": lambda s: norm.denormalize(s, obs, **task),
    }
    for call in calls.values():
        if mine == theirs:
            call(own)
            continue
        message = f"state holds {PLACEMENT_WORDS[theirs]}, but this normalizer keeps "
        with pytest.raises(ValueError, match=message + PLACEMENT_WORDS[mine]):
            call(state)
        with pytest.raises(ValueError, match=message + PLACEMENT_WORDS[mine]):
            jax.jit(call)(state)


def test_checkpoints_round_trip_and_refuse_another_layout():
    per_env = rn.normalize_observation(statistics=PER_ENV)
    per_task = rn.normalize_observation(statistics=PER_TASK)
    shared = rn.normalize_observation()
    x = jnp.arange(6.0).reshape(3, 2)
    env_state = per_env.update(per_env.init(jnp.zeros(2), batch_shape=(3,)), x)
    task_state = per_task.update(per_task.init(jnp.zeros(2)), x, task=jnp.array([2, 0, 2]))
    for norm, state, template in (
        (per_env, env_state, per_env.init(jnp.zeros(2), batch_shape=(3,))),
        (per_task, task_state, per_task.init(jnp.zeros(2))),
    ):
        loaded = rn.load_state(template, rn.save_state(state, norm.config), norm.config)
        jax.tree.map(np.testing.assert_array_equal, loaded, state)
        assert loaded.env_shape == state.env_shape
    # Per-environment statistics of (3,) environments of one feature have a shared state's shape.
    one_feature = per_env.init(jnp.zeros(()), batch_shape=(3,))
    data = rn.save_state(one_feature, per_env.config)
    with pytest.raises(ValueError, match=r"static field 'env_shape'(.|\n)*statistics/per_env"):
        rn.load_state(shared.init(jnp.zeros(3)), data, shared.config)
    two_tasks = rn.normalize_observation(statistics=rn.Statistics(num_tasks=2))
    with pytest.raises(ValueError, match="statistics/num_tasks"):
        rn.load_state(
            two_tasks.init(jnp.zeros(2)),
            rn.save_state(task_state, per_task.config),
            two_tasks.config,
        )


def without_static(data: bytes, names) -> bytes:
    """The checkpoint ``data`` as written before its state recorded the static ``names``."""
    record = serialization.msgpack_restore(serialization.msgpack_restore(data)["body"])
    record["static"] = {k: v for k, v in record["static"].items() if k not in names}
    record["layout"] = {k: v for k, v in record["layout"].items() if k not in names}
    body = serialization.msgpack_serialize(record)
    return serialization.msgpack_serialize(
        {"format": "rewardnorm_jax.state", "crc32": zlib.crc32(body), "body": body}
    )


def test_checkpoints_saved_before_the_placement_was_recorded_load_into_their_placement():
    per_env = rn.normalize_observation(statistics=PER_ENV)
    per_task = rn.normalize_observation(statistics=PER_TASK)
    x = jnp.arange(6.0).reshape(3, 2)
    for norm, state, template in (
        (
            per_env,
            per_env.update(per_env.init(jnp.zeros(2), batch_shape=(3,)), x),
            per_env.init(jnp.zeros(2), batch_shape=(3,)),
        ),
        (
            per_task,
            per_task.update(per_task.init(jnp.zeros(2)), x, task=jnp.array([2, 0, 2])),
            per_task.init(jnp.zeros(2)),
        ),
    ):
        older = without_static(rn.save_state(state, norm.config), ("per_env", "num_tasks"))
        loaded = rn.load_state(template, older, norm.config)
        jax.tree.map(np.testing.assert_array_equal, loaded, state)
        assert (loaded.per_env, loaded.num_tasks) == (state.per_env, state.num_tasks)
        norm.apply(loaded, x, **({"task": jnp.zeros(3, jnp.int32)} if norm.num_tasks else {}))


STEPS = 3


def gymnax_suite():
    """``(gymnax, rewardnorm_jax.gymnax)``; the test is skipped without the gymnax extra."""
    gymnax = pytest.importorskip("gymnax", reason="the gymnax extra is not installed")
    import rewardnorm_jax.gymnax as rngym

    return gymnax, rngym


def gymnax_rollout(env, params, seed):
    """The observations of a reset and ``STEPS`` steps of ``env``."""
    keys = jax.random.split(jax.random.key(seed), (STEPS + 1, N))
    actions = jax.random.uniform(jax.random.key(seed + 1), (STEPS, N, 1), minval=-2, maxval=2)

    def run(env):
        obs, state = env.reset(keys[0], params)

        def body(state, inputs):
            key, action = inputs
            result = env.step(key, state, action, params)
            return result[1], result[0]

        return jnp.concatenate([obs[None], jax.lax.scan(body, state, (keys[1:], actions))[1]])

    return jax.jit(lambda: run(env))()


def test_gymnax_wrapper_keeps_statistics_per_environment_and_per_task():
    gymnax, rngym = gymnax_suite()
    base, params = gymnax.make("Pendulum-v1")
    ids = jnp.arange(N, dtype=jnp.int32) % K
    raw = gymnax_rollout(rngym.VecEnv(base), params, seed=5)
    for statistics, task_of, per_step in (
        (PER_ENV, None, {}),
        (PER_TASK, lambda env_state: ids, {"task": jnp.broadcast_to(ids, (STEPS + 1, N))}),
    ):
        env = rngym.NormalizeObservation(rngym.VecEnv(base), statistics=statistics, task_of=task_of)
        got = gymnax_rollout(env, params, seed=5)
        norm = env.normalizer
        _, want = rollout(norm, norm.init(jnp.zeros(3), batch_shape=(N,)), raw, **per_step)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # One wrapper per environment under an unnamed vmap, each with its own statistics.
    single = rngym.VecEnv(rngym.NormalizeObservation(base, statistics=PER_ENV))
    _obs, state = single.reset(jax.random.split(jax.random.key(0), N), params)
    assert state.obs_state.stats.mean.shape == (N, 3)
    assert (rn.count_as_int(state.obs_state.stats) == 1).all()


def test_gymnax_wrapper_refuses_a_task_of_that_does_not_match_the_statistics():
    gymnax, rngym = gymnax_suite()
    base, params = gymnax.make("Pendulum-v1")
    with pytest.raises(ValueError, match="num_tasks and task_of go together"):
        rngym.NormalizeObservation(rngym.VecEnv(base), statistics=PER_TASK)
    with pytest.raises(ValueError, match="num_tasks and task_of go together"):
        rngym.NormalizeObservation(rngym.VecEnv(base), task_of=lambda s: 0)
    env = rngym.NormalizeObservation(rngym.VecEnv(base), per_env=True)
    with pytest.raises(ValueError, match=r"pass statistics=rn.Statistics\(per_env=True\)"):
        env.reset(jax.random.split(jax.random.key(0), N), params)


def test_brax_conversion_refuses_statistics_per_environment_or_per_task():
    pytest.importorskip("brax", reason="the brax extra is not installed")
    import rewardnorm_jax.brax as rnb

    for statistics in (PER_ENV, PER_TASK):
        norm = rn.normalize_observation("brax", statistics=statistics)
        with pytest.raises(ValueError, match=r"statistics=Statistics\(.*Brax's single set"):
            rnb.to_running_statistics(norm.config, norm.init(jnp.zeros(2), batch_shape=(3,)))


def reset_with_stats_of_another_placement(suite):
    """``(reset of per-environment statistics, a shared state that fits it)`` for ``suite``.

    Each pair is one environment (no environment axis): the per-environment statistics have a
    shared state's shapes.
    """
    key = jax.random.key(0)
    if suite == "gymnax":
        gymnax, rngym = gymnax_suite()
        base, params = gymnax.make("Pendulum-v1")
        per_env = rngym.NormalizeObservation(base, statistics=PER_ENV)
        _, shared = rngym.NormalizeObservation(base, per_env=True).reset(key, params)
        return functools.partial(per_env.reset, key, params), rngym.get_observation_state(shared)
    if suite == "jumanji":
        jumanji = pytest.importorskip("jumanji", reason="the jumanji extra is not installed")
        import rewardnorm_jax.jumanji as rnj

        base = jumanji.make("Snake-v1")
        per_env = rnj.NormalizeObservation(base, statistics=PER_ENV)
        shared, _ = rnj.NormalizeObservation(base, per_env=True).reset(key)
        return functools.partial(per_env.reset, key), rnj.get_observation_state(shared)
    jaxmarl = pytest.importorskip("jaxmarl", reason="the jaxmarl extra is not installed")
    import rewardnorm_jax.jaxmarl as rnm

    base = jaxmarl.make("MPE_simple_spread_v3")
    per_env = rnm.NormalizeObservation(base, statistics=PER_ENV)
    _, shared = rnm.NormalizeObservation(base, per_env=True).reset(key)
    return functools.partial(per_env.reset, key), rnm.get_observation_state(shared)


@pytest.mark.parametrize("suite", ["gymnax", "jumanji", "jaxmarl"])
def test_wrappers_refuse_stats_from_of_another_placement_naming_stats_from(suite):
    reset, shared = reset_with_stats_of_another_placement(suite)
    fresh = reset()
    mine = fresh[0] if suite == "jumanji" else fresh[1]  # jumanji's reset: (state, timestep)
    assert jax.tree.map(jnp.shape, mine.obs_state.stats) == jax.tree.map(jnp.shape, shared.stats)
    with pytest.raises(
        ValueError,
        match=r"stats_from holds one set shared by the batch \(Statistics\(\)\), but this "
        r"normalizer keeps one set per environment \(Statistics\(per_env=True\)\)",
    ):
        reset(stats_from=shared)
    reset(stats_from=mine.obs_state)  # its own placement continues
