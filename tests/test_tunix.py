"""rewardnorm_jax.tunix on the real Tunix: its registry, and a GRPO learner on its toy model.

The learner runs Tunix's own test transformer and vocabulary, shipped in its
wheel (``tunix.tests.test_common``), on CPU with no download.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

tunix = pytest.importorskip("tunix", reason="the tunix extra is not installed")

import optax  # noqa: E402
from flax import nnx  # noqa: E402
from grain import python as grain  # noqa: E402
from tunix.rl import algo_core, function_registry  # noqa: E402
from tunix.rl import rl_cluster as rl_cluster_lib  # noqa: E402
from tunix.rl.grpo import grpo_learner  # noqa: E402
from tunix.rl.rollout import base_rollout  # noqa: E402
from tunix.tests import test_common  # noqa: E402

import rewardnorm_jax as rn  # noqa: E402  (after the skip)
from rewardnorm_jax import tunix as rnt  # noqa: E402

PROMPTS = ["input string", "hello world", "My name", "hello there"]


def exact_grpo(rewards, group_size):
    """(r - mean) / std (ddof 1) per contiguous group, 0 for a constant group."""
    groups = np.asarray(rewards, np.float64).reshape(-1, group_size)
    out = np.zeros_like(groups)
    for k, r in enumerate(groups):
        if not np.all(r == r[0]):
            out[k] = (r - r.mean()) / r.std(ddof=1)
    return out.reshape(-1)


def test_every_documented_name_is_registered_and_computes_the_library_estimator():
    rng = np.random.default_rng(0)
    rewards = rng.integers(0, 3, 32).astype(np.float64)  # Tunix passes float64 NumPy rewards
    for name, (estimator, convention) in rnt.ESTIMATOR_NAMES.items():
        registered = function_registry.get_advantage_estimator(name)
        got = registered(rewards=rewards, num_generations=8)
        want = rn.group_advantages(estimator, convention=convention, group_size=8).apply(rewards)
        np.testing.assert_array_equal(got, want.advantages)
    got = function_registry.get_advantage_estimator("rewardnorm_grpo")(
        rewards=rewards, num_generations=4
    )
    np.testing.assert_allclose(got, exact_grpo(rewards, 4), rtol=1e-6, atol=1e-6)


def test_the_tunix_convention_equals_tunix_own_estimators_and_gives_zero_for_constant_groups():
    rng = np.random.default_rng(1)
    rewards = rng.random(24)
    for name, theirs in (
        ("rewardnorm_grpo_tunix", algo_core.compute_advantages),
        ("rewardnorm_dr_grpo_tunix", algo_core.compute_drgrpo_advantages),
        ("rewardnorm_rloo_tunix", algo_core.compute_rloo_advantages),
    ):
        ours = function_registry.get_advantage_estimator(name)
        np.testing.assert_allclose(
            ours(rewards=rewards, num_generations=6),
            np.asarray(theirs(rewards=rewards, num_generations=6)),
            rtol=2e-5,
            atol=2e-6,
        )
    constant = np.full(6, np.float32(1000 / 7), np.float64)
    ours = function_registry.get_advantage_estimator("rewardnorm_grpo_tunix")
    np.testing.assert_array_equal(ours(rewards=constant, num_generations=6), 0.0)


def test_estimators_tunix_cannot_feed_are_refused():
    with pytest.raises(ValueError, match="needs lengths, which Tunix's learner does not pass"):
        rnt.tunix_estimator("opo")
    with pytest.raises(ValueError, match="convention='tunix' has no estimator 'batch_std'"):
        rnt.tunix_estimator("batch_std", convention="tunix")


class Prompts(grain.RandomAccessDataSource):
    def __getitem__(self, index):
        return PROMPTS[index % len(PROMPTS)]

    def __len__(self):
        return 8


def test_a_grpo_learner_trains_with_the_library_estimator():
    vocab = test_common.MockVocab()
    config = test_common.ModelConfig(vocab_size=vocab.GetPieceSize())
    actor = test_common.ToyTransformer(config=config, rngs=nnx.Rngs(0))
    reference = test_common.ToyTransformer(config=config, rngs=nnx.Rngs(0))
    before = jax.tree.map(jnp.copy, nnx.state(actor, nnx.Param))
    auto = (jax.sharding.AxisType.Auto,) * 2
    mesh = jax.make_mesh((1, 1), ("fsdp", "tp"), axis_types=auto)
    roles = (rl_cluster_lib.Role.ACTOR, rl_cluster_lib.Role.REFERENCE, rl_cluster_lib.Role.ROLLOUT)
    cluster = rl_cluster_lib.RLCluster(
        actor=actor,
        reference=reference,
        tokenizer=vocab,
        cluster_config=rl_cluster_lib.ClusterConfig(
            role_to_mesh=dict.fromkeys(roles, mesh),
            rollout_engine="vanilla",
            offload_to_cpu=False,
            training_config=rl_cluster_lib.RLTrainingConfig(
                actor_optimizer=optax.sgd(1e-2), eval_every_n_steps=10, max_steps=2
            ),
            rollout_config=base_rollout.RolloutConfig(
                max_tokens_to_generate=6, max_prompt_length=16, kv_cache_size=64
            ),
        ),
    )
    seen = []

    def record(rewards, advantages, **_):
        seen.append((np.asarray(rewards), np.asarray(advantages)))
        return {}

    learner = grpo_learner.GRPOLearner(
        rl_cluster=cluster,
        reward_fns=lambda completions, **_: [float(len(c) % 3) for c in completions],
        algo_config=grpo_learner.GRPOConfig(
            num_generations=4, advantage_estimator="rewardnorm_grpo"
        ),
        metric_fns=[record],
    )
    dataset = grain.MapDataset.source(Prompts()).batch(2).map(lambda x: {"prompts": x})
    learner.train(dataset, None)

    assert len(seen) == 2  # two steps, each with its batch of 2 prompts x 4 answers
    for rewards, advantages in seen:
        assert rewards.shape == advantages.shape == (8,)
        np.testing.assert_allclose(advantages, exact_grpo(rewards, 4), rtol=1e-6, atol=1e-6)
    assert any(np.any(advantages != 0) for _, advantages in seen)
    trained = nnx.state(cluster.actor_trainer.model, nnx.Param)
    changed = jax.tree.map(lambda a, b: bool(jnp.any(a != b)), before, trained)
    assert any(jax.tree.leaves(changed))
