"""normalize_observation: each preset against a float64 NumPy transcription of its code.

Also pytrees, freezing, masks, non-finite entries, devices (vmap axis), checkpoints, errors.

Brax itself, and the conversion to and from its state: tests/observation/test_brax_observation.py.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rewardnorm_jax as rn
from tests.observation_reference import (
    BraxReference,
    GymnasiumReference,
    PureJaxRLReference,
    RslRlReference,
)

NUM_ENVS, DIM, STEPS = 16, 5, 30


def observations(seed=0, steps=STEPS, scale=(0.5, 3.0, 100.0, 1e-3, 1.0), offset=(0, 5, -50, 1, 0)):
    """Float32 observations of features with different scales and offsets."""
    rng = np.random.default_rng(seed)
    raw = rng.standard_normal((steps, NUM_ENVS, DIM)) * np.array(scale) + np.array(offset)
    return raw.astype(np.float32)


def run(norm, batches, **step_options):
    state = norm.init(jnp.zeros(DIM))
    step = jax.jit(norm.step)
    outputs = []
    for batch in batches:
        out, state = step(state, batch, **step_options)
        outputs.append(np.asarray(out))
    return np.stack(outputs), state


@pytest.mark.parametrize(("preset", "clip"), [("gymnasium", None), ("sb3", 10.0)])
def test_gymnasium_and_sb3_match_their_running_mean_std(preset, clip):
    batches = observations()
    batches[-1, 2] = 4000.0  # an outlier late in the run: SB3's clip at 10 acts
    outputs, state = run(rn.normalize_observation(preset), batches)
    reference = GymnasiumReference(DIM, clip=clip)
    expected = np.stack([reference.step(batch) for batch in batches])
    np.testing.assert_allclose(outputs, expected, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(state.stats.mean, reference.mean, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(state.stats.var, reference.var, rtol=1e-5)
    assert (rn.count_as_int(state.stats) == STEPS * NUM_ENVS).all()
    if clip is not None:
        assert np.abs(outputs).max() == clip


def test_gymnasium_preset_equals_gymnasiums_own_running_mean_std():
    running_mean_std = pytest.importorskip("gymnasium.wrappers.utils").RunningMeanStd
    batches = observations(seed=1)
    outputs, _ = run(rn.normalize_observation("gymnasium"), batches)
    rms = running_mean_std(shape=(DIM,), dtype=np.float64)
    for batch, out in zip(batches, outputs, strict=True):
        rms.update(batch.astype(np.float64))
        expected = (batch - rms.mean) / np.sqrt(rms.var + 1e-8)
        np.testing.assert_allclose(out, expected, rtol=2e-5, atol=2e-5)


def test_purejaxrl_preset_matches_normalize_vec_observation():
    batches = observations(seed=2)
    outputs, _ = run(rn.normalize_observation("purejaxrl"), batches)
    reference = PureJaxRLReference()
    expected = [reference.reset(batches[0])] + [reference.step(batch) for batch in batches[1:]]
    np.testing.assert_allclose(outputs, np.stack(expected), rtol=2e-5, atol=2e-5)
    # Its per-environment copies are all the same statistics.
    np.testing.assert_array_equal(
        reference.mean, np.broadcast_to(reference.mean[0], reference.mean.shape)
    )


def test_brax_preset_matches_running_statistics_in_its_ppo_order():
    """Brax's PPO acts on a rollout with the statistics from before it, then updates on it."""
    batches = observations(seed=3)
    norm = rn.normalize_observation("brax")
    state = norm.init(jnp.zeros(DIM))
    reference = BraxReference(DIM)
    for batch in batches[:5]:  # step: normalize with the statistics before the update
        out, state = jax.jit(norm.step)(state, batch)
        np.testing.assert_allclose(out, reference.normalize(batch), rtol=2e-5, atol=2e-5)
        reference.update(batch)
    rollout = batches[5:]  # a rollout: acted on frozen, then one update on all of it
    acted = norm.apply(state, rollout)
    np.testing.assert_allclose(acted, reference.normalize(rollout), rtol=2e-5, atol=2e-5)
    state = norm.update(state, rollout)
    reference.update(rollout)
    np.testing.assert_allclose(
        norm.apply(state, rollout), reference.normalize(rollout), rtol=2e-5, atol=2e-5
    )
    assert int(rn.count_as_int(state.stats)[0]) == reference.count == STEPS * NUM_ENVS
    np.testing.assert_allclose(
        state.stats.m2 + state.stats.m2_low, reference.summed_variance, rtol=1e-5
    )


def test_brax_preset_first_batch_and_constant_feature():
    """No prior: the first batch is the statistics; a constant feature divides by std_min."""
    norm = rn.normalize_observation("brax")
    state = norm.init(jnp.zeros(2))
    np.testing.assert_array_equal(norm.apply(state, jnp.array([3.0, -2.0])), [3.0, -2.0])  # std 1
    batch = jnp.array([[1.0, 7.0], [3.0, 7.0]])
    state = norm.update(state, batch)
    np.testing.assert_allclose(state.stats.mean, [2.0, 7.0])
    np.testing.assert_allclose(state.stats.var, [1.0, 0.0])
    np.testing.assert_allclose(
        norm.apply(state, jnp.array([4.0, 7.5])), [2.0, 0.5 / 1e-6], rtol=1e-6
    )
    # An update with nothing selected keeps a fresh state fresh (no 0 / 0).
    fresh = norm.update(norm.init(jnp.zeros(2)), batch, active=jnp.array([False, False]))
    assert np.isnan(fresh.stats.var).all()
    assert (rn.count_as_int(fresh.stats) == 0).all()
    np.testing.assert_array_equal(norm.apply(fresh, jnp.array([3.0, -2.0])), [3.0, -2.0])


@pytest.mark.parametrize("until", [None, 100])
def test_rsl_rl_preset_matches_empirical_normalization(until):
    """Epsilon on the std, no prior, update then normalize; ``until`` freezes after the crossing.

    Batches of 16: with ``until=100`` the batch taking the count from 96 to
    112 is merged whole, and the 23 after it are left out.
    """
    batches = observations(seed=5)
    batches[-1, 3] = 900.0  # after the freeze: no effect with until
    norm = rn.normalize_observation("rsl_rl", until_count=until)
    reference = RslRlReference(DIM, eps=1e-2, until=until)
    first = batches[0]
    np.testing.assert_allclose(
        norm.apply(norm.init(jnp.zeros(DIM)), first), reference.normalize(first), rtol=1e-6
    )  # before any sample: x / (1 + eps)
    np.testing.assert_allclose(reference.normalize(first), first / 1.01)
    outputs, state = run(norm, batches)
    expected = np.stack([reference.step(batch) for batch in batches])
    np.testing.assert_allclose(outputs, expected, rtol=2e-5, atol=2e-5)
    count = int(rn.count_as_int(state.stats)[0])
    assert count == reference.count == (112 if until else STEPS * NUM_ENVS)
    np.testing.assert_allclose(state.stats.mean + state.stats.mean_low, reference.mean, rtol=1e-6)
    np.testing.assert_allclose(state.stats.var, reference.var, rtol=1e-5)
    restored = norm.denormalize(state, jnp.asarray(expected[-1], jnp.float32))
    np.testing.assert_allclose(restored, reference.inverse(expected[-1]), rtol=1e-5, atol=1e-5)


def test_until_count_reads_the_counts_two_words():
    """A count of 2**32 + 4 is below 2**32 + 5 and not below 2**32 + 4 (one float32 value)."""
    base = rn.normalize_observation("rsl_rl").init(jnp.zeros(()))
    stats = rn.RunningStats.from_parts(
        mean=jnp.float32(1.0),
        mean_low=jnp.float32(0.0),
        m2=jnp.float32(2.0**32 + 4),
        m2_low=jnp.float32(0.0),
        count_hi=1,
        count_lo=4,
        prior_count=0.0,
    )
    state = base.replace(stats=stats)
    batch = jnp.full((2**10,), 2.0**10)
    for until, learns in ((2**32 + 5, True), (2**32 + 4, False), (2**33, True)):
        norm = rn.normalize_observation("rsl_rl", until_count=until)
        after = norm.update(state, batch)
        assert int(rn.count_as_int(after.stats)) == 2**32 + 4 + (2**10 if learns else 0)
        assert (float(after.stats.mean) > 1.0) == learns


def test_until_count_per_task_and_per_environment():
    """Each set stops on its own count: task 0 after its first batch of 3, task 1 at 4."""
    norm = rn.normalize_observation("rsl_rl", until_count=3, statistics=rn.Statistics(num_tasks=2))
    state = norm.init(jnp.zeros(()))
    task = jnp.array([0, 0, 0, 1, 1])
    state = norm.update(state, jnp.array([1.0, 2.0, 3.0, 10.0, 20.0]), task=task)
    state = norm.update(state, jnp.array([7.0, 7.0, 7.0, 30.0, 40.0]), task=task)
    assert rn.count_as_int(state.stats).tolist() == [3, 4]
    np.testing.assert_allclose(state.stats.mean, [2.0, 25.0])
    per_env = rn.normalize_observation(
        "rsl_rl", until_count=2, statistics=rn.Statistics(per_env=True)
    )
    state = per_env.init(jnp.zeros(()), batch_shape=(2,))
    for batch in ([1.0, 5.0], [3.0, 9.0], [100.0, 100.0]):
        state = per_env.update(state, jnp.array(batch), active=jnp.array([True, batch[0] > 2]))
    assert rn.count_as_int(state.stats).tolist() == [2, 2]
    np.testing.assert_allclose(state.stats.mean, [2.0, 54.5])


def test_pytree_leaves_have_their_own_statistics_and_integers_pass():
    norm = rn.normalize_observation()
    example = {"pos": jnp.zeros(3), "grid": jnp.zeros((2, 2)), "id": jnp.zeros((), jnp.int32)}
    state = norm.init(example)
    rng = np.random.default_rng(4)
    batch = {
        "pos": jnp.asarray(rng.normal(10, 2, (8, 3)), jnp.float32),
        "grid": jnp.asarray(rng.normal(-1, 0.1, (8, 2, 2)), jnp.float32),
        "id": jnp.arange(8, dtype=jnp.int32),
    }
    out, state = jax.jit(norm.step)(state, batch)
    assert out["id"].dtype == jnp.int32
    np.testing.assert_array_equal(out["id"], batch["id"])
    for name in ("pos", "grid"):
        reference = GymnasiumReference(example[name].shape)
        np.testing.assert_allclose(out[name], reference.step(batch[name]), rtol=2e-5, atol=2e-5)
        assert out[name].dtype == jnp.float32
    assert state.stats["grid"].mean.shape == (2, 2)
    np.testing.assert_allclose(state.stats["id"].mean, 3.5 * 8 / (8 + 1e-4), rtol=1e-6)


def test_one_observation_without_batch_axes():
    norm = rn.normalize_observation()
    state = norm.init(jnp.zeros(2))
    reference = GymnasiumReference(2)
    for obs in observations(seed=5)[:6, 0, :2]:
        out, state = norm.step(state, obs)
        np.testing.assert_allclose(out, reference.step(obs[None])[0], rtol=2e-5, atol=2e-5)


def test_frozen_and_masked_updates():
    batches = observations(seed=6)[:4]
    norm = rn.normalize_observation()
    state = norm.init(jnp.zeros(DIM))
    _, learned = norm.step(state, batches[0])
    out, frozen = jax.jit(norm.step)(learned, batches[1], jnp.bool_(False))  # traced flag
    jax.tree.map(np.testing.assert_array_equal, frozen, learned)
    np.testing.assert_allclose(out, norm.apply(learned, batches[1]), rtol=1e-6)  # jit vs eager
    _, python_frozen = norm.step(learned, batches[1], False)
    assert python_frozen is learned
    active = np.arange(NUM_ENVS) % 3 != 0
    masked = norm.update(learned, batches[2], active=jnp.asarray(active))
    selected = norm.update(learned, batches[2][active])
    np.testing.assert_allclose(masked.stats.mean, selected.stats.mean, rtol=1e-6)
    np.testing.assert_allclose(masked.stats.var, selected.stats.var, rtol=1e-5)
    assert (rn.count_as_int(masked.stats) == NUM_ENVS + active.sum()).all()


def test_non_finite_entries_are_left_out_per_feature():
    norm = rn.normalize_observation()
    batch = observations(seed=7)[0]
    poisoned = batch.copy()
    poisoned[2, 1], poisoned[5, 3], poisoned[6, 3] = np.nan, np.inf, -np.inf
    out, state = norm.step(norm.init(jnp.zeros(DIM)), poisoned)
    counts = rn.count_as_int(state.stats)
    np.testing.assert_array_equal(counts, [16, 15, 16, 14, 16])
    for feature in range(DIM):
        keep = np.isfinite(poisoned[:, feature])
        reference = GymnasiumReference(())
        reference.update(poisoned[keep, feature])
        np.testing.assert_allclose(state.stats.mean[feature], reference.mean, rtol=1e-6)
        np.testing.assert_allclose(state.stats.var[feature], reference.var, rtol=1e-5)
    assert np.isnan(out[2, 1])
    assert np.isposinf(out[5, 3])
    assert np.isneginf(out[6, 3])
    assert np.isfinite(np.delete(out.reshape(-1), [2 * DIM + 1, 5 * DIM + 3, 6 * DIM + 3])).all()


def test_vmap_axis_merges_like_one_batch():
    batches = observations(seed=8)[:5]
    norm = rn.normalize_observation(axis_name="envs")
    single = rn.normalize_observation()
    state = norm.init(jnp.zeros(DIM))
    states = jax.tree.map(lambda x: jnp.broadcast_to(x, (4, *x.shape)), state)
    step = jax.jit(jax.vmap(norm.step, in_axes=(0, 0), axis_name="envs"))
    one_state = single.init(jnp.zeros(DIM))
    for batch in batches:
        split = batch.reshape(4, NUM_ENVS // 4, DIM)
        out, states = step(states, split)
        expected, one_state = single.step(one_state, batch)
        np.testing.assert_allclose(out.reshape(NUM_ENVS, DIM), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(states.stats.mean[3], one_state.stats.mean, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(
        rn.count_as_int(states.stats)[0], rn.count_as_int(one_state.stats)
    )


def test_scan_and_checkpoint_round_trip():
    norm = rn.normalize_observation("sb3")
    state = norm.init({"x": jnp.zeros(DIM)})

    def body(state, batch):
        out, state = norm.step(state, {"x": batch})
        return state, out["x"]

    state, _ = jax.jit(lambda s, b: jax.lax.scan(body, s, b))(
        state, jnp.asarray(observations(seed=9))
    )
    data = rn.save_state(state, norm.config)
    restored = rn.load_state(norm.init({"x": jnp.zeros(DIM)}), data, norm.config)
    jax.tree.map(np.testing.assert_array_equal, restored, state)
    with pytest.raises(ValueError, match="metadata 'clip'"):
        rn.load_state(state, data, rn.normalize_observation("gymnasium").config)
    brax = rn.normalize_observation("brax")
    with pytest.raises(ValueError, match="prior_count"):
        rn.load_state(brax.init({"x": jnp.zeros(DIM)}), data)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"preset": "rllib"}, "preset"),
        ({"epsilon": -1.0}, "epsilon"),
        ({"clip": 0.0}, "clip"),
        ({"std_min": 2.0, "std_max": 1.0}, "std_min"),
        ({"prior_count": -1.0}, "prior_count"),
        ({"preset": "brax", "std_min": None}, "std_min"),
        ({"dtype": jnp.float16}, "dtype"),
        ({"epsilon_on": "sqrt"}, "epsilon_on"),
        ({"until_count": 0}, "until_count"),
        ({"until_count": 2**64}, "until_count"),
        ({"preset": "rsl_rl", "epsilon": 0.0}, "epsilon=0"),
    ],
)
def test_bad_options_name_themselves(options, message):
    with pytest.raises(ValueError, match=message):
        rn.normalize_observation(**options)


@pytest.mark.parametrize("until", [1.5, True, "10", 1e3])
def test_until_count_should_be_an_integer(until):
    with pytest.raises(
        TypeError, match=f"until_count should be an integer, got until_count={until!r}"
    ):
        rn.normalize_observation("rsl_rl", until_count=until)


def test_bad_inputs_name_themselves():
    norm = rn.normalize_observation()
    state = norm.init({"a": jnp.zeros(3), "b": jnp.zeros(2)})
    with pytest.raises(ValueError, match="structure"):
        norm.apply(state, {"a": jnp.zeros(3)})
    with pytest.raises(ValueError, match=r"feature shape \(3,\)"):
        norm.apply(state, {"a": jnp.zeros((4, 2)), "b": jnp.zeros((4, 2))})
    with pytest.raises(ValueError, match="same leading axes"):
        norm.update(state, {"a": jnp.zeros((4, 3)), "b": jnp.zeros((5, 2))})
    with pytest.raises(ValueError, match="active has shape"):
        norm.update(
            state, {"a": jnp.zeros((4, 3)), "b": jnp.zeros((4, 2))}, active=jnp.ones(5, bool)
        )
    with pytest.raises(TypeError, match="real numbers"):
        norm.update(state, {"a": jnp.zeros((4, 3), jnp.complex64), "b": jnp.zeros((4, 2))})
    with pytest.raises(TypeError, match="ObservationNormState"):
        norm.apply({"a": 1}, {"a": jnp.zeros(3)})
    with pytest.raises(ValueError, match="no arrays"):
        norm.init({})


def test_policy_exported_with_its_normalizer_gives_the_same_actions():
    """jax.export of policy and frozen statistics as one function of the raw observation."""
    norm = rn.normalize_observation("brax")
    state = norm.init(jnp.zeros(DIM))
    for batch in observations(seed=11)[:10]:
        state = norm.update(state, batch)
    rng = np.random.default_rng(12)
    weights = jnp.asarray(rng.standard_normal((DIM, 2)), jnp.float32)

    def act(obs):  # the learned statistics are constants of the exported function
        return jnp.tanh(norm.apply(state, obs) @ weights)

    probe = jnp.asarray(observations(seed=13)[0])
    exported = jax.export.export(jax.jit(act))(jax.ShapeDtypeStruct(probe.shape, probe.dtype))
    restored = jax.export.deserialize(exported.serialize())
    np.testing.assert_array_equal(restored.call(probe), jax.jit(act)(probe))
    # The statistics are in the function: raw observations in, the policy's actions out.
    np.testing.assert_allclose(
        restored.call(probe),
        np.tanh(np.asarray(norm.apply(state, probe)) @ np.asarray(weights)),
        rtol=1e-5,
        atol=1e-6,
    )


@pytest.mark.parametrize("preset", ["brax", "gymnasium"])
def test_first_batch_far_from_zero_with_its_first_entry_left_out(preset):
    """The shift of the first merge comes from a selected entry, not the prior's mean 0."""
    rng = np.random.default_rng(14)
    batch = (1000.0 + 0.1 * rng.standard_normal((64, 3))).astype(np.float32)
    batch[0, 0] = np.nan  # feature 0: its first entry is non-finite
    active = np.ones(64, bool)
    active[1] = False
    norm = rn.normalize_observation(preset)
    state = jax.jit(norm.update)(norm.init(jnp.zeros(3)), batch, active=jnp.asarray(active))
    for feature in range(3):
        kept = batch[active & np.isfinite(batch[:, feature]), feature].astype(np.float64)
        if preset == "brax":
            expected = kept.var()
        else:
            reference = GymnasiumReference(())
            reference.update(kept)
            expected = reference.var
        np.testing.assert_allclose(state.stats.var[feature], expected, rtol=1e-3)
    # Masked out at the first entry of every feature: the search covers the whole batch.
    masked = norm.update(norm.init(jnp.zeros(3)), batch[1:], active=jnp.arange(63) > 0)
    expected = batch[2:].astype(np.float64)
    if preset == "brax":
        np.testing.assert_allclose(masked.stats.var[1:], expected[:, 1:].var(0), rtol=1e-3)


def test_inactive_first_entry_far_from_the_data_and_gradients():
    """An inactive environment's observation (0, far from 1e3) is no shift; grads flow."""
    rng = np.random.default_rng(15)
    batch = (1000.0 + 0.1 * rng.standard_normal((64, 3))).astype(np.float32)
    batch[0] = 0.0
    active = np.arange(64) > 0
    norm = rn.normalize_observation("brax")
    state = norm.update(norm.init(jnp.zeros(3)), batch, active=jnp.asarray(active))
    np.testing.assert_allclose(state.stats.var, batch[1:].astype(np.float64).var(0), rtol=1e-3)
    # The statistics are constants of the normalization: d/dx of sum((x - mean) / std).
    grad = jax.grad(lambda x: norm.apply(state, x).sum())(jnp.asarray(batch))
    np.testing.assert_allclose(
        grad, np.broadcast_to(1 / np.sqrt(state.stats.var), (64, 3)), rtol=1e-5
    )
    stepped = jax.grad(lambda x: norm.step(state, x)[0].sum())(jnp.asarray(batch))
    assert np.isfinite(stepped).all()


@pytest.mark.parametrize("preset", ["brax", "gymnasium"])
def test_an_empty_batch_leaves_the_statistics_unchanged(preset):
    norm = rn.normalize_observation(preset)
    fresh = norm.init(jnp.zeros(3))
    learned = norm.update(fresh, jnp.arange(12.0).reshape(4, 3))
    for state in (fresh, learned):
        same = jax.jit(norm.update)(state, jnp.zeros((0, 3)))
        for kept, found in zip(jax.tree.leaves(state), jax.tree.leaves(same), strict=True):
            np.testing.assert_array_equal(found, kept)


def test_a_state_of_another_prior_is_refused():
    brax_state = rn.normalize_observation("brax").init(jnp.zeros(2))
    with pytest.raises(ValueError, match=r"prior_count=0\.0, but this normalizer"):
        rn.normalize_observation().apply(brax_state, jnp.zeros(2))


def test_checkpoint_of_statistics_without_samples_must_be_empty():
    norm = rn.normalize_observation("brax")
    state = norm.init(jnp.zeros(2))
    tampered = state.replace(
        stats=state.stats.replace(moments=state.stats.moments.at[0, 0].set(5.0))
    )
    data = rn.save_state(tampered, norm.config)
    with pytest.raises(ValueError, match="0 before any sample"):
        rn.load_state(state, data, norm.config)
