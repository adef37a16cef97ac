"""Every environment adapter has one shape: the same constructor, attributes and helpers."""

import importlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rewardnorm_jax as rn
from rewardnorm_jax._src.core import adapter
from rewardnorm_jax._src.reward import normalize_wrapper

ADAPTERS = [
    pytest.param(name, marks=pytest.mark.requires(f"rewardnorm_jax.{name}"), id=name)
    for name in ("gymnax", "brax", "jumanji", "jaxmarl")
]
HELPERS = ("get_transform_state", "set_transform_state", "set_update_stats", "with_stats_from")


@pytest.mark.parametrize("name", ADAPTERS)
def test_adapter_exports_the_shared_wrappers_and_helpers(name):
    module = importlib.import_module(f"rewardnorm_jax.{name}")
    for helper in HELPERS:
        assert getattr(module, helper) is getattr(adapter, helper)
    assert issubclass(module.RewardTransformWrapper, adapter.TransformWrapper)
    assert issubclass(module.NormalizeReward, normalize_wrapper.NormalizeRewardWrapper)
    assert issubclass(module.NormalizeReward, module.RewardTransformWrapper)
    for cls in (module.RewardTransformWrapper, module.NormalizeReward):
        assert "__init__" not in vars(cls)  # the constructors are the shared ones


@pytest.mark.parametrize("name", ADAPTERS)
def test_normalize_reward_keeps_its_hyperparameters_and_transform(name):
    module = importlib.import_module(f"rewardnorm_jax.{name}")
    env = {
        "gymnax": lambda: importlib.import_module("gymnax").make("CartPole-v1")[0],
        "brax": lambda: importlib.import_module("brax.envs").get_environment(
            "inverted_pendulum", backend="positional"
        ),
        "jumanji": lambda: importlib.import_module("jumanji").make("Snake-v1"),
        "jaxmarl": lambda: importlib.import_module("jaxmarl").make("MPE_simple_spread_v3"),
    }[name]()
    wrapped = module.NormalizeReward(env, 0.9, 1e-6, semantics="sb3", per_env=True)
    assert (wrapped.gamma, wrapped.epsilon) == (0.9, 1e-6)
    assert wrapped.transform.config == rn.normalize_reward(0.9, 1e-6, semantics="sb3").config
    per_env = module.NormalizeReward(env, statistics=rn.Statistics(per_env=True))
    assert per_env.transform.per_env
    assert per_env.transform.config.statistics.per_env
    clipped = module.RewardTransformWrapper(env, rn.clip_reward())
    assert clipped.transform.config.name == "clip_reward"


def make_env(name):
    """A real environment of the suite (Brax's positional backend compiles quickly)."""
    if name == "gymnax":
        return importlib.import_module("gymnax").make("CartPole-v1")[0]
    if name == "brax":
        envs = importlib.import_module("brax.envs")
        return envs.get_environment("inverted_pendulum", backend="positional")
    if name == "jaxmarl":
        return importlib.import_module("jaxmarl").make("MPE_simple_spread_v3")
    return importlib.import_module("jumanji").make("Snake-v1")


@pytest.mark.parametrize("name", ADAPTERS)
def test_adapter_wrappers_do_not_stack(name):
    """One wrapper per stack: a freeze or a checkpoint would miss the inner statistics."""
    module = importlib.import_module(f"rewardnorm_jax.{name}")
    inner = module.NormalizeReward(make_env(name), per_env=True)
    with pytest.raises(ValueError, match=r"already holds NormalizeReward.*rn\.chain"):
        module.RewardTransformWrapper(inner, rn.clip_reward(-10.0, 10.0))


@pytest.mark.parametrize("name", ADAPTERS)
def test_per_env_says_one_thing(name):
    module = importlib.import_module(f"rewardnorm_jax.{name}")
    with pytest.raises(ValueError, match=r"per_env=True.*axis_name='envs'.*pass one of them"):
        module.NormalizeReward(make_env(name), per_env=True, axis_name="envs")


@pytest.mark.requires("gymnax")
def test_per_env_around_a_batch_is_refused_for_shared_false():
    gymnax = importlib.import_module("gymnax")
    rgx = importlib.import_module("rewardnorm_jax.gymnax")
    env, params = gymnax.make("CartPole-v1")
    keys = jax.random.split(jax.random.key(0), 3)
    with pytest.raises(ValueError, match=r"per_env=True but serves a batch of shape \(3,\)"):
        rgx.NormalizeReward(rgx.VecEnv(env), per_env=True).reset(keys, params)
    _, state = rgx.NormalizeReward(rgx.VecEnv(env), statistics=rn.Statistics(per_env=True)).reset(
        keys, params
    )
    assert state.transform_state.stats.mean.shape == (3,)  # one set per environment


@pytest.mark.requires("gymnax")
def test_crafted_transform_states_are_refused_by_the_state_helpers():
    gymnax = importlib.import_module("gymnax")
    rgx = importlib.import_module("rewardnorm_jax.gymnax")
    env, params = gymnax.make("CartPole-v1")
    wrapped = rgx.NormalizeReward(rgx.VecEnv(env))
    keys = jax.random.split(jax.random.key(0), 3)
    _, state = wrapped.reset(keys, params)
    learned = rgx.get_transform_state(state)
    crafted = learned.replace(stats=learned.stats.replace(moments=learned.stats.moments * jnp.nan))
    with pytest.raises(ValueError, match=r"transform_state: .*mean holds nan"):
        rgx.set_transform_state(state, crafted)
    with pytest.raises(ValueError, match=r"stats_from: .*mean holds nan"):
        rgx.with_stats_from(state, crafted)
    with pytest.raises(ValueError, match=r"stats_from: .*mean holds nan"):
        wrapped.reset(keys, params, crafted)
    with pytest.raises(ValueError, match="holds shapes, not arrays"):
        rgx.set_transform_state(state, jax.eval_shape(lambda: learned))
    assert rgx.get_transform_state(rgx.set_transform_state(state, learned)) is learned


@pytest.mark.requires("gymnax")
def test_a_list_axis_name_is_a_tuple_of_names():
    gymnax = importlib.import_module("gymnax")
    rgx = importlib.import_module("rewardnorm_jax.gymnax")
    env, params = gymnax.make("CartPole-v1")
    wrapped = rgx.VecEnv(rgx.NormalizeReward(env, axis_name=["envs"]), axis_name="envs")
    _, state = wrapped.reset(jax.random.split(jax.random.key(0), 3), params)
    assert state.transform_state.ret.shape == (3,)


def batched_state(name):
    """The state (shapes only) of ``NormalizeReward`` around 4 environments of the suite."""
    module = importlib.import_module(f"rewardnorm_jax.{name}")
    if name == "gymnax":
        wrapped = module.NormalizeReward(module.VecEnv(make_env(name)))
        keys = jax.random.split(jax.random.key(0), 4)
        return jax.eval_shape(wrapped.reset, keys, None)[1]
    keys = jax.random.split(jax.random.PRNGKey(0), 4)
    if name == "brax":
        training = importlib.import_module("brax.envs").training
        return jax.eval_shape(module.NormalizeReward(training.wrap(make_env(name), 10)).reset, keys)
    if name == "jaxmarl":  # IPPO's stack: the wrapper under a named jax.vmap
        wrapped = module.NormalizeReward(make_env(name), axis_name="envs")
        return jax.eval_shape(jax.vmap(wrapped.reset, axis_name="envs"), keys)[1]
    batch = importlib.import_module("jumanji.wrappers").VmapAutoResetWrapper(make_env(name))
    return jax.eval_shape(module.NormalizeReward(batch).reset, keys)[0]


@pytest.mark.parametrize("name", ADAPTERS)
def test_flags_of_another_shape_or_type_are_refused_by_name(name):
    module = importlib.import_module(f"rewardnorm_jax.{name}")
    state = batched_state(name)
    # under a named jax.vmap (JaxMARL) the state also takes one flag per environment, (4,)
    with pytest.raises(ValueError, match=r"update_stats has shape \(5,\); it must be a scalar"):
        module.set_update_stats(state, jnp.ones(5, bool))
    with pytest.raises(TypeError, match=r"update_stats should be a boolean flag.*'False'"):
        module.set_update_stats(state, "False")
    frozen = module.set_update_stats(state, np.bool_(False))  # a NumPy bool is a flag
    assert jax.tree.structure(frozen) == jax.tree.structure(state)  # type: ignore[operator, unused-ignore]  # jax's PyTreeDef is opaque to mypy
    with pytest.raises(TypeError, match="per_env should be a bool, got per_env='no'"):
        module.NormalizeReward(make_env(name), per_env="no")
