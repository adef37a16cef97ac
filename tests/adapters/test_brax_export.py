"""rewardnorm_jax.brax.policy_function and with_normalizer against Brax's own inference functions.

Brax's PPO and SAC networks at random initialization (hidden sizes (8, 8), 5
features, 2 actions: quick to compile), Brax's statistics from three batches
through its own ``running_statistics.update``.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

running_statistics = pytest.importorskip(
    "brax.training.acme.running_statistics", reason="the brax extra is not installed"
)

from brax.training.agents.ppo import networks as ppo_networks  # noqa: E402  (after the skip)
from brax.training.agents.sac import networks as sac_networks  # noqa: E402

import rewardnorm_jax as rn  # noqa: E402
from rewardnorm_jax import brax as rnb  # noqa: E402

OBS, ACTIONS, HIDDEN = 5, 2, (8, 8)
KEY = jax.random.PRNGKey(7)
RTOL, ATOL = 1e-5, 1e-6  # float32 rounding: the library recomputes Brax's std from M and n


def observations(seed, batch=16):
    """Features far from mean 0 and std 1, so that a policy without its normalizer is far off."""
    rng = np.random.default_rng(seed)
    scale, offset = np.array([0.5, 2.0, 30.0, 1e-2, 5.0]), np.array([1.0, -4.0, 10.0, 0.5, 3.0])
    return jnp.asarray(rng.standard_normal((batch, OBS)) * scale + offset, jnp.float32)


def ppo_agent(key):
    nets = ppo_networks.make_ppo_networks(
        OBS,
        ACTIONS,
        preprocess_observations_fn=running_statistics.normalize,
        policy_hidden_layer_sizes=HIDDEN,
        value_hidden_layer_sizes=HIDDEN,
    )
    params = (nets.policy_network.init(key), nets.value_network.init(key))
    return ppo_networks.make_inference_fn(nets), params


def sac_agent(key):
    nets = sac_networks.make_sac_networks(
        OBS,
        ACTIONS,
        preprocess_observations_fn=running_statistics.normalize,
        hidden_layer_sizes=HIDDEN,
    )
    return sac_networks.make_inference_fn(nets), (nets.policy_network.init(key),)


@functools.cache
def agent(kind):
    """``(make_policy, params)`` as Brax's trainer returns them: statistics first."""
    make_policy, weights = {"ppo": ppo_agent, "sac": sac_agent}[kind](jax.random.PRNGKey(0))
    return make_policy, (brax_statistics(), *weights)


@functools.cache
def brax_statistics():
    update = jax.jit(running_statistics.update)
    stats = running_statistics.init_state(jnp.zeros(OBS))
    for seed in range(3):
        stats = update(stats, observations(seed))
    return stats


@functools.cache
def compiled(kind, deterministic):
    """Ours and Brax's policies, each compiled once: ``(act, brax_act)``, both of (obs, key)."""
    make_policy, params = agent(kind)
    act = rnb.policy_function(make_policy, params, deterministic=deterministic)
    ours = jax.jit(lambda obs, key: act(obs) if deterministic else act(obs, key))
    brax_policy = make_policy(params, deterministic=deterministic)
    return ours, jax.jit(lambda obs, key: brax_policy(obs, key)[0])


@pytest.mark.parametrize("deterministic", [True, False], ids=["mode", "sampled"])
@pytest.mark.parametrize("kind", ["ppo", "sac"])
def test_actions_equal_brax_inference(kind, deterministic):
    ours, theirs = compiled(kind, deterministic)
    obs = observations(10)
    got, want = ours(obs, KEY), theirs(obs, KEY)
    assert got.shape == (16, ACTIONS)
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    if not deterministic:  # another key, other actions
        assert np.abs(np.asarray(ours(obs, jax.random.PRNGKey(8))) - np.asarray(got)).min() > 0


def test_the_normalizer_is_inside():
    """Without it (Brax's statistics at mean 0, std 1) the actions are far off."""
    make_policy, params = agent("ppo")
    ours, _ = compiled("ppo", True)
    obs = observations(10)
    identity = running_statistics.init_state(jnp.zeros(OBS))
    bare = make_policy((identity, *params[1:]), deterministic=True)(obs, KEY)[0]
    assert np.abs(np.asarray(bare) - np.asarray(ours(obs, KEY))).max() > 0.1


def test_export_round_trip_with_a_symbolic_batch():
    """PPO's policy, both ways (SAC's goes through the same code)."""
    make_policy, params = agent("ppo")
    batch = jax.export.symbolic_shape("b")
    obs_spec = jax.ShapeDtypeStruct((*batch, OBS), jnp.float32)
    key_spec = jax.ShapeDtypeStruct(KEY.shape, KEY.dtype)
    mode = rnb.policy_function(make_policy, params)
    sample = rnb.policy_function(make_policy, params, deterministic=False)
    exported_mode = jax.export.export(jax.jit(mode))(obs_spec)
    exported_sample = jax.export.export(jax.jit(sample))(obs_spec, key_spec)
    assert str(exported_sample.in_avals[0]) == "float32[b,5]"
    restored_mode = jax.export.deserialize(exported_mode.serialize())
    restored_sample = jax.export.deserialize(exported_sample.serialize())
    for batch_size in (16, 3):  # one exported function, any batch
        obs = observations(11, batch_size)
        for restored, deterministic in ((restored_mode, True), (restored_sample, False)):
            ours, theirs = compiled("ppo", deterministic)
            args = (obs,) if deterministic else (obs, KEY)
            got = restored.call(*args)
            assert got.shape == (batch_size, ACTIONS)
            np.testing.assert_allclose(got, ours(obs, KEY), rtol=1e-6, atol=1e-7)
            np.testing.assert_allclose(got, theirs(obs, KEY), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize(("kind", "deterministic"), [("ppo", True), ("sac", False)])
def test_a_library_normalizer_inside_brax_inference(kind, deterministic):
    make_policy, params = agent(kind)
    norm = rn.normalize_observation("brax")
    update, state = jax.jit(norm.update), norm.init(jnp.zeros(OBS))
    for seed in range(3):
        state = update(state, observations(seed))
    brax_params = rnb.with_normalizer(params, norm.config, state)
    assert int(brax_params[0].count) == 48
    assert all(a is b for a, b in zip(brax_params[1:], params[1:], strict=True))
    obs = observations(12)
    identity = running_statistics.init_state(jnp.zeros(OBS))  # mean 0, std 1
    got = make_policy(brax_params, deterministic)(obs, KEY)[0]
    # The library's normalization, then the network.
    want = make_policy((identity, *params[1:]), deterministic)(norm.apply(state, obs), KEY)[0]
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    # The statistics Brax learned from the same batches, to its float32 Welford
    # update's rounding (3e-5 of the std of the feature of spread 1e-2 about 0.5).
    np.testing.assert_allclose(brax_params[0].mean, params[0].mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(brax_params[0].std, params[0].std, rtol=1e-4)


def test_mismatched_shapes_are_refused_naming_the_parameter():
    make_policy, params = agent("ppo")
    ours, _ = compiled("ppo", True)
    with pytest.raises(ValueError, match=r"observations has a leaf of shape \(3, 4\)"):
        ours(jnp.zeros((3, 4)), KEY)
    four = running_statistics.init_state(jnp.zeros(4))
    with pytest.raises(ValueError, match=r"params\[0\] holds observations of shape \(4,\)"):
        rnb.policy_function(make_policy, (four, *params[1:]))
    norm = rn.normalize_observation("brax")
    with pytest.raises(ValueError, match=r"state holds observations of shape \(4,\), params\[0\]"):
        rnb.with_normalizer(params, norm.config, norm.init(jnp.zeros(4)))
    with pytest.raises(TypeError, match=r"params\[0\] should be Brax's observation statistics"):
        rnb.policy_function(make_policy, params[1:])
    with pytest.raises(TypeError, match="params should be Brax's parameters"):
        rnb.with_normalizer(params[0], norm.config, norm.init(jnp.zeros(OBS)))


@pytest.mark.parametrize("flag", ["no", 0, 1, None, jnp.array([True])])
def test_deterministic_should_be_a_bool(flag):
    make_policy, params = agent("ppo")
    with pytest.raises(TypeError, match=r"deterministic should be a bool, got deterministic="):
        rnb.policy_function(make_policy, params, deterministic=flag)


def test_statistics_updated_with_other_std_bounds():
    """Brax's std clamped at std_max_value=1e3 (features of scale 3e4): given it, Brax's policy."""
    make_policy, params = agent("ppo")
    wide = running_statistics.update(
        running_statistics.init_state(jnp.zeros(OBS)), observations(13) * 1e3, std_max_value=1e3
    )
    assert float(jnp.max(wide.std)) == 1e3
    with pytest.raises(ValueError, match="as std_min and std_max"):
        rnb.policy_function(make_policy, (wide, *params[1:]))
    act = rnb.policy_function(make_policy, (wide, *params[1:]), std_max=1e3)
    obs = observations(14) * 1e3
    want = make_policy((wide, *params[1:]), deterministic=True)(obs, KEY)[0]
    np.testing.assert_allclose(act(obs), want, rtol=RTOL, atol=ATOL)


def test_with_normalizer_keeps_the_mode_of_brax_statistics():
    make_policy, params = agent("sac")
    ema = running_statistics.init_state(jnp.zeros(OBS), mode="ema")
    norm = rn.normalize_observation("brax_ema")
    state = norm.update(norm.init(jnp.zeros(OBS)), observations(15))
    given = rnb.with_normalizer((ema, *params[1:]), norm.config, state)
    assert given[0].mode == running_statistics.NormalizationMode.EMA
    obs = observations(16)
    identity = running_statistics.init_state(jnp.zeros(OBS))
    got = make_policy(given, True)(obs, KEY)[0]
    want = make_policy((identity, *params[1:]), True)(norm.apply(state, obs), KEY)[0]
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    welford = rn.normalize_observation("brax")
    with pytest.raises(ValueError, match=r"mode='welford', params\[0\] is in mode='ema'"):
        rnb.with_normalizer((ema, *params[1:]), welford.config, state)
