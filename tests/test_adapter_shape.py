"""Every environment adapter has one shape: the same constructor, attributes and helpers."""

import importlib

import pytest

import rewardnorm_jax as rn
from rewardnorm_jax._src import adapter

ADAPTERS = [
    pytest.param(name, marks=pytest.mark.requires(name), id=name)
    for name in ("gymnax", "brax", "jumanji")
]
HELPERS = ("get_transform_state", "set_transform_state", "set_update_stats", "with_stats_from")


@pytest.mark.parametrize("name", ADAPTERS)
def test_adapter_exports_the_shared_wrappers_and_helpers(name):
    module = importlib.import_module(f"rewardnorm_jax.{name}")
    for helper in HELPERS:
        assert getattr(module, helper) is getattr(adapter, helper)
    assert issubclass(module.RewardTransformWrapper, adapter.TransformWrapper)
    assert issubclass(module.NormalizeReward, adapter.NormalizeRewardWrapper)
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
    }[name]()
    wrapped = module.NormalizeReward(env, 0.9, 1e-6, semantics="sb3", per_env=True)
    assert (wrapped.gamma, wrapped.epsilon) == (0.9, 1e-6)
    assert wrapped.transform.config == rn.normalize_reward(0.9, 1e-6, semantics="sb3").config
    shared_off = module.NormalizeReward(env, shared=False)  # per environment, said otherwise
    assert shared_off.transform.config["shared"] is False
    clipped = module.RewardTransformWrapper(env, rn.clip_reward())
    assert clipped.transform.config["transform"] == "clip_reward"
