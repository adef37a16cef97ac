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
from tunix.rl import algo_core, common, function_registry  # noqa: E402
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
    with pytest.raises(ValueError, match="needs token masks"):
        rnt.tunix_estimator("reinforce_pp_baseline")
    with pytest.raises(ValueError, match="convention='tunix' has no estimator 'batch_std'"):
        rnt.tunix_estimator("batch_std", convention="tunix")


def test_num_generations_may_be_any_integer_and_is_checked_by_name():
    grpo = rnt.tunix_estimator("grpo", convention="tunix")
    rewards = [1.0, 0.0, 0.5, 0.5]  # a list, as a reward function may return
    want = grpo(rewards=np.array(rewards), num_generations=2)
    for size in (np.int64(2), jnp.int32(2)):
        np.testing.assert_array_equal(grpo(rewards=rewards, num_generations=size), want)
    with pytest.raises(ValueError, match="num_generations should be an integer >= 2"):
        grpo(rewards=rewards, num_generations=1)
    with pytest.raises(TypeError, match=r"num_generations should be an integer, got .*2\.0"):
        grpo(rewards=rewards, num_generations=2.0)


def test_the_token_level_terms_equal_tunix_own_functions():
    # Tunix's masked_whiten, compute_kl_divergence and DAPO reward shaping, on the same inputs.
    from tunix.rl.grpo import dapo_learner

    rng = np.random.default_rng(2)
    values = rng.standard_normal((4, 16)).astype(np.float32)
    mask = np.arange(16) < rng.integers(2, 17, (4, 1))
    theirs = np.asarray(algo_core.masked_whiten(jnp.asarray(values), jnp.asarray(mask)))
    ours = rn.masked_whiten(values, mask, convention="tunix")
    np.testing.assert_allclose(ours, np.where(mask, theirs, 0), rtol=2e-6, atol=2e-6)
    logp = -rng.exponential(1.0, (4, 16)).astype(np.float32)
    ref = (logp + rng.normal(0, 0.5, (4, 16))).astype(np.float32)
    for estimator, method in (("k1", "kl"), ("k2", "mse_kl"), ("k3", "low_var_kl")):
        theirs = common.compute_kl_divergence(jnp.asarray(logp), jnp.asarray(ref), method=method)
        ours = rn.kl_estimate(logp, ref, estimator=estimator, convention="tunix")
        np.testing.assert_allclose(ours, theirs, rtol=2e-6, atol=2e-7)
    buffer = {
        "overlong_buffer_length": 4,
        "overlong_buffer_penalty": 0.5,
        "max_response_length": 10,
    }
    completions = ["x" * n for n in range(16)]
    theirs = dapo_learner.reward_shaping([], completions, None, overlong_buffer=buffer)
    ours = rn.overlong_penalty(
        [len(c) for c in completions],
        max_length=10,
        buffer_length=4,
        penalty_factor=0.5,
        convention="tunix",
    )
    np.testing.assert_allclose(ours, theirs, rtol=1e-6)


TUNIX_MODES = (
    "token-mean",
    "sequence-mean-token-mean",
    "sequence-mean-token-scale",
    "seq-mean-token-sum",
    "sequence-mean-token-sum-norm",
)


def installed_mode(mode, norm=None):
    """The library's Tunix mode that gives the installed Tunix's number for ``mode``."""
    # Without a norm, Tunix 0.1.7's sequence-mean-token-sum-norm divides by the non-empty
    # rows, as seq-mean-token-sum does; its newest code (the library's) by the rows.
    renamed = mode == "sequence-mean-token-sum-norm" and norm is None
    return "seq-mean-token-sum" if renamed else mode


def test_every_aggregation_mode_equals_tunix_own_aggregate_loss():
    rng = np.random.default_rng(3)
    losses = (rng.standard_normal((6, 12)) * 2 + 1).astype(np.float32)
    mask = (np.arange(12) < rng.integers(1, 13, (6, 1))).astype(np.int32)
    mask[2] = 0  # an empty response
    aggregate = rnt.tunix_aggregator()
    for batch_mask in (mask, np.zeros_like(mask)):  # and no tokens at all: 0 in every mode
        for mode in TUNIX_MODES:
            for norm in ({}, {"norm": 20.0}):
                theirs, scale = (
                    common.aggregate_loss(jnp.asarray(x), jnp.asarray(batch_mask), mode, **norm)
                    for x in (losses, np.abs(losses))
                )
                ours = aggregate(losses, batch_mask, installed_mode(mode, **norm), **norm)
                # Both in float32: within 2e-6 of the aggregation of |x|.
                assert abs(ours - theirs) <= 2e-6 * scale, (mode, norm, ours, theirs)
    with pytest.raises(ValueError, match="packed sequences"):
        aggregate(losses, mask, "token-mean", segment_ids=mask)
    with pytest.raises(ValueError, match="convention should be one of 'exact', 'verl'"):
        rnt.tunix_aggregator("openrlhf")


class Prompts(grain.RandomAccessDataSource):
    def __getitem__(self, index):
        return PROMPTS[index % len(PROMPTS)]

    def __len__(self):
        return 8


@pytest.mark.slow
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
    seen, called = [], []

    def record(rewards, advantages, **_):
        seen.append((np.asarray(rewards), np.asarray(advantages)))
        return {}

    # The registered entry, wrapped to count the learner's calls (restored below).
    registered = function_registry.get_advantage_estimator("rewardnorm_grpo")

    def spy(**kwargs):
        called.append(kwargs["num_generations"])
        return registered(**kwargs)

    function_registry.register_advantage_estimator("rewardnorm_grpo")(spy)

    # The library's loss aggregation in place of Tunix's, for the learner's loss_agg_mode;
    # the learner's own per-token losses recorded, for every mode against Tunix's own function.
    tunix_aggregate, ours = common.aggregate_loss, rnt.tunix_aggregator()
    modes, recorded = [], []

    def aggregate(per_token_loss, completion_mask, loss_agg_mode, **kwargs):
        modes.append(loss_agg_mode)
        loss = ours(per_token_loss, completion_mask, loss_agg_mode, **kwargs)
        keep = lambda *arrays: recorded.append([np.asarray(a) for a in arrays])  # noqa: E731
        jax.debug.callback(keep, per_token_loss, completion_mask, loss, ordered=True)
        return loss

    common.aggregate_loss = aggregate

    learner = grpo_learner.GRPOLearner(
        rl_cluster=cluster,
        reward_fns=lambda completions, **_: [float(len(c) % 3) for c in completions],
        algo_config=grpo_learner.GRPOConfig(
            num_generations=4, advantage_estimator="rewardnorm_grpo"
        ),
        metric_fns=[record],
    )
    dataset = grain.MapDataset.source(Prompts()).batch(2).map(lambda x: {"prompts": x})
    try:
        learner.train(dataset, None)
    finally:
        function_registry.register_advantage_estimator("rewardnorm_grpo")(registered)
        common.aggregate_loss = tunix_aggregate

    assert called == [4, 4]  # the library's estimator, once per step
    assert set(modes) == {"sequence-mean-token-mean"}  # GRPOConfig's, through the library
    assert recorded  # the learner's per-token losses (policy, KL, entropy) and their loss

    @jax.jit
    def every_mode(losses, mask):  # the library's, Tunix's, and Tunix's of |x|
        return jnp.array(
            [
                (
                    ours(losses, mask, installed_mode(mode)),
                    tunix_aggregate(losses, mask, mode),
                    tunix_aggregate(jnp.abs(losses), mask, mode),
                )
                for mode in TUNIX_MODES
            ]
        )

    for losses, mask, loss in recorded:
        values = np.asarray(every_mode(losses, mask))
        assert np.all(np.abs(values[:, 0] - values[:, 1]) <= 2e-6 * values[:, 2]), values
        learner = values[TUNIX_MODES.index("sequence-mean-token-mean")]
        assert abs(loss - learner[0]) <= 1e-6 * learner[2]  # the learner's loss, the library's
    assert len(seen) == 2  # two steps, each with its batch of 2 prompts x 4 answers
    for rewards, advantages in seen:
        assert rewards.shape == advantages.shape == (8,)
        np.testing.assert_allclose(advantages, exact_grpo(rewards, 4), rtol=1e-6, atol=1e-6)
    assert any(np.any(advantages != 0) for _, advantages in seen)
    trained = nnx.state(cluster.actor_trainer.model, nnx.Param)
    changed = jax.tree.map(lambda a, b: bool(jnp.any(a != b)), before, trained)
    assert any(jax.tree.leaves(changed))
