"""The contract every family keeps, by one registry of its public functions.

``ENTRIES`` lists the group estimators (every estimator, and every convention),
the token functions, the observation normalizers (every preset, pytree
observations), PopArt, the categorical value targets and the scaled supports
(over a reward normalizer's state, shared and per task). Each entry runs
through the same tests: jit against vmap, scan where it has state, a finite
gradient where it is differentiable, ``jax.export`` with a symbolic batch, the
library's message for an unbound ``axis_name``, empty batches, NaN, inf and
magnitudes near the dtype's limits, checkpoints; the dtypes are crossed with
one entry per family. Adding an entry is all a new function needs to be
covered. (Reward transforms have their registry in ``test_transform_contract``.)

An entry also declares what it takes, and gets the axes that vary it: ``weights``
(totals past 2**32 and past float32's range against a float64 reference of the
weighted statistic; traced NaN and negative weights), ``placements`` (a state of
another placement refused by every function, naming the state),
``hyperparameters`` and ``near_limits`` (every numeric option near the dtype's
limits: float64's numbers or the library's error naming it; every one traced:
it works or is refused by name) and ``flags`` (a non-bool is a TypeError naming
the flag).
"""

import dataclasses
import functools
import itertools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export

import rewardnorm_jax as rn
from rewardnorm_jax._src.llm.conventions import CONVENTIONS
from tests import token_reference
from tests.axes import HUGE, TINY, as_float32, assert_float64, outcome, refused_by_name
from tests.reference import RunningMeanStd

TOKENS = 5  # tokens per sequence
ATOMS = 11  # atoms of the categorical support


@dataclasses.dataclass(frozen=True)
class Entry:
    """One public function as the contract calls it.

    ``build(axis_name)`` gives ``(run, state)``: ``run(state, *inputs) ->
    (outputs, state)`` (``state`` is None for a function without one), and
    ``inputs(rng, batch)`` the arrays, each with the batch as its leading axis.
    """

    build: Callable
    inputs: Callable
    family: str
    unit: int = 1  # the batch is a multiple of it (contiguous groups)
    differentiable: bool = False  # a finite gradient in the first input
    axis: bool = True  # takes an axis_name
    # Its answer may be beyond the dtype's range for inputs near the limits (KL's square
    # and exponential of a log ratio of 1e38): inf there is the answer, not an overflow.
    overflows: bool = False
    # Promised finite inputs (finite_observations=True): NaN and inf are outside its contract.
    finite_inputs: bool = False
    # The axes an entry declares (``build(axis_name, **options)`` takes every option named):
    # how it takes weights; ``placed(placement) -> (state, calls)`` for each of ``placements``;
    # its numeric hyperparameters (name: a valid value) and option sets near the dtype's
    # limits; its boolean flags.
    weights: "Weighted | None" = None
    placements: tuple[str, ...] = ()
    placed: Callable | None = None
    hyperparameters: dict[str, Any] = dataclasses.field(default_factory=dict)
    near_limits: tuple["Near", ...] = ()
    flags: tuple[str, ...] = ()

    @property
    def stateful(self) -> bool:
        return self.build(None)[1] is not None


@dataclasses.dataclass(frozen=True)
class Weighted:
    """How an entry takes weights (or a mask of weights), and the float64 statistic they weigh.

    ``run(state, weights, *inputs)`` gives the outputs to check; ``reference(state,
    weights, *inputs)`` the same in float64 NumPy; ``base(*inputs)`` weights of 1 (and 0
    where the entry's own mask leaves a position out), scaled by every case. A traced
    weight that is NaN or negative makes the outputs NaN. With ``statistics``, ``run``
    gives ``(outputs, statistics)``: the outputs are NaN in that weight's entry (their
    leading axis) and the reference's for a weight of 0 elsewhere, and the statistics
    leave the entry out as a weight of 0 would (NaN never enters a state).
    """

    run: Callable
    reference: Callable
    base: Callable
    statistics: bool = False


@dataclasses.dataclass(frozen=True)
class Near:
    """Options near the dtype's limits; ``magnitude``: the first input's, to go with them."""

    options: dict[str, Any]
    magnitude: float | None = None

    def __str__(self):
        named = ",".join(f"{key}={value!r}" for key, value in self.options.items())
        return named if self.magnitude is None else f"{named};inputs={self.magnitude:g}"


def exact_whiten(values, weights):
    """Frequency weights: the weighted mean, the variance with ddof 1 of the total weight."""
    values, total = np.asarray(values, np.float64), weights.sum()
    mean = (weights * values).sum() / total
    var = (weights * (values - mean) ** 2).sum() / (total - 1)
    return (values - mean) / np.sqrt(var)


WHITEN_REFERENCES = {
    "exact": exact_whiten,
    "verl": token_reference.verl_masked_whiten,
    "tunix": token_reference.tunix_masked_whiten,
    "openrlhf": token_reference.openrlhf_whiten,
}


def kl_reference(estimator, convention, log_ratio):
    """Float64: the estimate of a log ratio already weighted (``+``: the value of its base)."""
    name = estimator.rstrip("+")
    if convention == "verl":
        return token_reference.verl_kl(log_ratio, np.zeros_like(log_ratio), name)
    if convention == "openrlhf":
        return token_reference.openrlhf_kl(log_ratio, np.zeros_like(log_ratio), name)
    estimates = {"k1": log_ratio, "abs": np.abs(log_ratio), "k2": log_ratio**2 / 2}
    if name == "k3":
        with np.errstate(over="ignore"):
            return np.expm1(-log_ratio) + log_ratio
    return estimates[name]


def _is_stats(node):
    return isinstance(node, rn.RunningStats)


def _observation_weights(observations):
    """Weights 1, 2, 1, ... of the observations' batch."""
    batch = jax.tree.leaves(observations)[0].shape[0]
    return np.where(np.arange(batch) % 2, 2.0, 1.0).astype(np.float32)


def observation_reference(config, leaf, weights):
    """Float64: a weighted batch joining the initial statistics, and the step's output.

    The batch's weighted mean and variance join the prior (``prior_count`` samples of
    mean 0 and variance 1) as ``round(W)`` samples (Chan's merge); the output is
    ``clip((x - mean) / clip(sqrt(var + epsilon), std_min, std_max), -clip, clip)``
    (``sqrt(var) + epsilon`` with ``epsilon_on="std"``) with the statistics before the
    update (``normalize_first``) or after.
    """
    x, w = np.asarray(leaf, np.float64), np.asarray(weights, np.float64)
    w = w.reshape(w.shape + (1,) * (x.ndim - 1))
    total = w.sum()
    batch_mean = (w * x).sum(0) / total
    batch_var = (w * (x - batch_mean) ** 2).sum(0) / total
    prior, count = config.prior_count, np.round(total)
    mean = batch_mean * count / (prior + count)
    var = (prior + batch_var * count + batch_mean**2 * prior * count / (prior + count)) / (
        prior + count
    )
    used_mean, used_var = (0.0, 1.0) if config.normalize_first else (mean, var)
    if config.epsilon_on == "std":
        std = np.sqrt(used_var) + config.epsilon
    else:
        std = np.sqrt(used_var + config.epsilon)
    std = np.clip(std, config.std_min or 0.0, config.std_max or np.inf)
    out = (x - used_mean) / std
    if config.clip is not None:
        out = np.clip(out, -config.clip, config.clip)
    return out, (mean, var)


def _rewards(rng, batch, functions=0):
    shape = (batch, functions) if functions else (batch,)
    return rng.normal(1.0, 2.0, shape).astype(np.float32)


LEVELS = {"mean": "batch", "std": "group", "leave_one_out": True}  # "normalized" unless given


def group(estimator, convention="exact", ragged=False, **levels):
    if estimator == "normalized":
        levels = levels or LEVELS

    def build(axis_name, **options):
        layout: dict[str, Any] = {"num_groups": 4} if ragged else {"group_size": 4}
        if ragged and axis_name is not None:
            layout["groups_span_devices"] = True
        named = {**layout, **levels, **options}
        est = rn.group_advantages(estimator, convention=convention, axis_name=axis_name, **named)
        step, init = est.step, est.init

        def run(state, rewards, ids, lengths):
            named = {"group_ids": ids} if ragged else {}
            if estimator == "opo":
                named["lengths"] = lengths
            if step is not None:  # running statistics per domain: the ids modulo 2 as domains
                domains = ids % 2 if levels.get("num_domains") else None
                return step(state, rewards, domains=domains, **named)
            return est.apply(rewards, **named), state

        return run, None if init is None else init()

    def inputs(rng, batch):
        rewards = _rewards(rng, batch, functions=2 if estimator == "gdpo" else 0)
        ids = (np.arange(batch) % 4).astype(np.int32)
        return rewards, ids, rng.uniform(1, 10, batch).astype(np.float32)

    size = "num_groups" if ragged else "group_size"
    hyperparameters: dict[str, Any] = {size: 4}
    near: list[Near] = [] if ragged else [Near({size: 2**31 - 1})]  # num_groups sizes arrays
    if estimator == "gdpo":
        hyperparameters["reward_weights"] = (1.0, 0.5)
        near.append(Near({"reward_weights": (HUGE, HUGE)}))
    if estimator == "gpg":
        hyperparameters["f_norm"] = 1.0
        near += [Near({"f_norm": HUGE}), Near({"f_norm": TINY})]
    flags: tuple[str, ...] = ("standardize_batch",)
    if ragged:
        flags += ("groups_span_devices",)
    # The estimators built on the normalization levels, and the conventions that only set
    # their arithmetic: their epsilon, rloo_std's floor, the levels' leave_one_out.
    if estimator in ("normalized", "maxrl", "rloo_std") or convention == "roll":
        sized: dict[str, Any] = {size: 4}
        config = rn.group_advantages(estimator, convention=convention, **sized, **levels)
        hyperparameters["epsilon"] = config.config.epsilon
        hyperparameters["ddof"] = config.config.ddof
        near += [Near({"epsilon": TINY}), Near({"epsilon": HUGE})]
    if estimator == "rloo_std":
        hyperparameters["std_floor"] = 1e-3
        near += [Near({"std_floor": TINY}), Near({"std_floor": HUGE})]
    if estimator == "normalized":
        flags += ("leave_one_out",)
    return Entry(
        build,
        inputs,
        "llm",
        unit=1 if ragged else 4,
        hyperparameters=hyperparameters,
        near_limits=tuple(near),
        flags=flags,
    )


def _token_inputs(rng, batch):
    logp = -rng.exponential(1.0, (batch, TOKENS)).astype(np.float32)
    ref = -rng.exponential(1.0, (batch, TOKENS)).astype(np.float32)
    mask = rng.random((batch, TOKENS)) < 0.8
    return logp, ref, mask


def whiten(convention):
    def build(axis_name, **options):
        def run(state, values, mask):
            out = rn.masked_whiten(
                values, mask, convention=convention, axis_name=axis_name, **options
            )
            return out, state

        return run, None

    def inputs(rng, batch):
        logp, _, mask = _token_inputs(rng, batch)
        return logp, mask

    def weighted(state, weights, values, mask):
        return rn.masked_whiten(values, weights, convention=convention)

    def reference(state, weights, values, mask):
        out = WHITEN_REFERENCES[convention](values, weights)
        return np.where(weights > 0, out, 0.0)

    weights = Weighted(weighted, reference, lambda values, mask: mask.astype(np.float32))
    return Entry(build, inputs, "llm", weights=weights, flags=("shift_mean",))


def kl(estimator, convention="exact", penalized=False):
    def build(axis_name, **options):
        def run(state, logp, ref, mask):
            named = {"estimator": estimator, "convention": convention, **options}
            if penalized:  # the rewards are the first input: the gradient is in them
                named.setdefault("beta", 0.1)
                return rn.kl_penalized_rewards(logp, logp, ref, mask, **named), state
            return rn.kl_estimate(logp, ref, mask, **named), state

        return run, None

    def weighted(state, weights, logp, ref, mask):
        return build(None)[0](state, logp, ref, weights)[0]

    def reference(state, weights, logp, ref, mask):
        log_ratio = logp - ref.astype(np.float64)
        if convention == "openrlhf":  # the weight multiplies the log ratio, the others' estimate
            estimate = kl_reference(estimator, convention, weights * log_ratio)
        else:
            with np.errstate(over="ignore", invalid="ignore"):
                estimate = np.where(
                    weights > 0, weights * kl_reference(estimator, convention, log_ratio), 0.0
                )
        return logp - 0.1 * estimate if penalized else estimate

    hyperparameters = {"clip": 5.0, **({"beta": 0.1} if penalized else {})}
    near = [Near({name: value}) for name in hyperparameters for value in (HUGE, TINY)]
    return Entry(
        build,
        _token_inputs,
        "llm",
        differentiable=True,
        axis=False,
        overflows=True,
        weights=Weighted(weighted, reference, lambda logp, ref, mask: mask.astype(np.float32)),
        hyperparameters=hyperparameters,
        near_limits=tuple(near),
    )


def aggregation(mode, convention="exact"):
    def build(axis_name, **options):
        def run(state, losses, mask):
            named = {"convention": convention, "axis_name": axis_name, **options}
            return rn.aggregate_loss(losses, mask, mode, **named), state

        return run, None

    def inputs(rng, batch):
        losses, _, mask = _token_inputs(rng, batch)
        return losses, mask

    def weighted(state, weights, losses, mask):
        return rn.aggregate_loss(losses, weights, mode, convention=convention)

    def reference(state, weights, losses, mask):
        """Float64: each row's weighted sum over its weight (mean) or the length (dr_grpo)."""
        sums = (weights * np.asarray(losses, np.float64)).sum(-1)
        if mode == "dr_grpo":  # D = B L, L the mask's last dimension
            return sums.sum() / (weights.shape[0] * weights.shape[1])
        counts = weights.sum(-1)
        rows = counts > 0  # seq-mean-token-mean: D = S, the rows holding a weight
        return (sums[rows] / counts[rows]).sum() / max(rows.sum(), 1)

    hyperparameters: dict[str, Any] = {}
    near: list[Near] = []
    if mode == "dr_grpo":
        hyperparameters["length"] = 2.0 * TOKENS
        near.append(Near({"length": HUGE}))
    return Entry(
        build,
        inputs,
        "llm",
        differentiable=True,
        weights=Weighted(weighted, reference, lambda losses, mask: mask.astype(np.float32)),
        hyperparameters=hyperparameters,
        near_limits=tuple(near),
    )


def overlong(convention):
    def build(axis_name, **options):
        def run(state, lengths):
            named = {"max_length": 10, "buffer_length": 4, **options}
            return rn.overlong_penalty(lengths, convention=convention, **named), state

        return run, None

    def inputs(rng, batch):
        return (rng.integers(0, 14, batch).astype(np.float32),)

    hyperparameters = {"max_length": 10.0, "buffer_length": 4.0, "penalty_factor": 1.0}
    near = (
        Near({"max_length": HUGE}, magnitude=HUGE),
        Near({"max_length": HUGE, "buffer_length": HUGE}, magnitude=HUGE),
        Near({"buffer_length": TINY}),
        Near({"penalty_factor": HUGE}),
        Near({"penalty_factor": TINY}),
    )
    return Entry(
        build, inputs, "llm", axis=False, hyperparameters=hyperparameters, near_limits=near
    )


PLACEMENTS = {  # where a stateful entry keeps its statistics, for 4 environments of 3 tasks
    "shared": rn.Statistics(),
    "per_env": rn.Statistics(per_env=True),
    "tasks": rn.Statistics(num_tasks=3),
}
PLACED_TASKS = np.array([0, 1, 2, 0], np.int32)


def observations(preset, tree=False, **options):
    def example(batch=None):
        lead = () if batch is None else (batch,)
        leaf = np.zeros((*lead, 3), np.float32)
        return {"pos": leaf, "speed": np.zeros(lead, np.float32)} if tree else leaf

    def build(axis_name, **extra):
        norm = rn.normalize_observation(preset, axis_name=axis_name, **options, **extra)
        return norm.step, norm.init(example())

    def inputs(rng, batch):
        leaf = rng.normal(100.0, 3.0, (batch, 3)).astype(np.float32)
        if tree:
            return ({"pos": leaf, "speed": rng.normal(0, 1, batch).astype(np.float32)},)
        return (leaf,)

    def placed(placement):
        norm = rn.normalize_observation(preset, statistics=PLACEMENTS[placement], **options)
        task = {"task": PLACED_TASKS} if placement == "tasks" else {}
        batch = example(4)
        calls = {
            "step": lambda state: norm.step(state, batch, **task),
            "update": lambda state: norm.update(state, batch, **task),
            "apply": lambda state: norm.apply(state, batch, **task),
        }
        return norm.init(example(), (4,)), calls

    def weighted(state, weights, observations):
        norm = rn.normalize_observation(preset, **options)
        out, state = norm.step(state, observations, weights=weights)
        return out, jax.tree.map(
            lambda s: (s.mean + s.mean_low, s.var), state.stats, is_leaf=_is_stats
        )

    def reference(state, weights, observations):
        config = rn.normalize_observation(preset, **options).config
        pairs = [
            observation_reference(config, leaf, weights) for leaf in jax.tree.leaves(observations)
        ]
        outs, stats = zip(*pairs, strict=True)
        return jax.tree.unflatten(jax.tree.structure(observations), outs), jax.tree.unflatten(
            jax.tree.structure(observations), stats
        )

    config = rn.normalize_observation(preset).config
    hyperparameters: dict[str, Any] = {"epsilon": config.epsilon, "prior_count": config.prior_count}
    near = [Near({"epsilon": TINY}), Near({"epsilon": HUGE}), Near({"prior_count": HUGE})]
    hyperparameters["clip"] = 10.0 if config.clip is None else config.clip
    near += [Near({"clip": TINY}), Near({"clip": HUGE})]
    if config.std_min is not None:
        hyperparameters.update(std_min=config.std_min, std_max=config.std_max)
        near += [Near({"std_min": TINY}), Near({"std_max": HUGE})]
    finite_inputs = options.get("finite_observations", False)
    return Entry(
        build,
        inputs,
        "observation",
        differentiable=True,
        finite_inputs=finite_inputs,
        weights=Weighted(weighted, reference, _observation_weights, statistics=True),
        placements=tuple(PLACEMENTS),
        placed=placed,
        hyperparameters=hyperparameters,
        near_limits=tuple(near),
        flags=("finite_observations",),
    )


def popart_entry():
    def build(axis_name, step_size=None, **options):
        art = rn.popart(step_size, axis_name=axis_name, **options)

        def run(state, targets):
            state = art.update(state, targets)
            return art.normalize(state, targets), state

        return run, art.init()

    def placed(placement):
        art = rn.popart(None, num_tasks=PLACEMENTS[placement].num_tasks)
        targets, task = np.ones(4, np.float32), PLACED_TASKS if placement == "tasks" else None
        calls = {
            "update": lambda state: art.update(state, targets, task),
            "normalize": lambda state: art.normalize(state, targets, task),
        }
        return art.init(), calls

    hyperparameters = {"step_size": 0.01, "scale_lb": 1e-5, "scale_ub": 1e5}
    near = (
        Near({"step_size": TINY}),
        Near({"step_size": 1.0}),
        Near({"scale_lb": TINY}),
        Near({"scale_ub": HUGE}),
        Near({"scale_lb": HUGE, "scale_ub": HUGE}),
    )
    return Entry(
        build,
        lambda rng, batch: (_rewards(rng, batch),),
        "value",
        differentiable=True,
        placements=("shared", "tasks"),
        placed=placed,
        hyperparameters=hyperparameters,
        near_limits=near,
    )


SUPPORT = rn.uniform_support(-5.0, 5.0, ATOMS)
SUPPORT_BOUNDS = {"lower": -5.0, "upper": 5.0}
WIDE = (  # supports whose bounds are near the dtype's limits, and targets of their magnitude
    Near({"lower": -HUGE, "upper": HUGE}, magnitude=HUGE),
    Near({"lower": -HUGE, "upper": HUGE}, magnitude=HUGE / 2),
    Near({"lower": -HUGE}, magnitude=HUGE),
    Near({"upper": HUGE}, magnitude=HUGE),
    Near({"lower": -TINY, "upper": TINY}, magnitude=TINY),
)


# The decoders' and the projection's inputs are probabilities (or logits): kept as they are.
SUPPORTS_NEAR = tuple({str(Near(near.options)): Near(near.options) for near in WIDE}.values())


def support_of(options):
    """The support of the options' bounds (``SUPPORT`` when they name none)."""
    if not options.keys() & SUPPORT_BOUNDS.keys():
        return SUPPORT, options
    bounds = {key: options.pop(key, value) for key, value in SUPPORT_BOUNDS.items()}
    return rn.uniform_support(bounds["lower"], bounds["upper"], ATOMS), options


def encoder(name):
    def build(axis_name, **options):
        support, options = support_of(dict(options))
        encode = {"two_hot": rn.two_hot, "hl_gauss": rn.hl_gauss}[name]
        return (lambda state, targets: (encode(targets, support, **options), state)), None

    hyperparameters, near = dict(SUPPORT_BOUNDS), list(WIDE)
    if name == "hl_gauss":
        hyperparameters["sigma_ratio"] = 0.75
        near += [Near({name: value}) for name in ("sigma", "sigma_ratio") for value in (TINY, HUGE)]
        near += [Near({"sigma": 0.75})]
    return Entry(
        build,
        lambda rng, batch: (_rewards(rng, batch),),
        "value",
        axis=False,
        hyperparameters=hyperparameters,
        near_limits=tuple(near),
    )


def _logits(rng, batch):
    return rng.normal(0, 2, (batch, ATOMS)).astype(np.float32)


def decoder():
    def build(axis_name, **options):
        support, _ = support_of(dict(options))
        return (lambda state, logits: (rn.decode_logits(logits, support), state)), None

    return Entry(
        build,
        lambda rng, batch: (_logits(rng, batch),),
        "value",
        differentiable=True,
        axis=False,
        hyperparameters=dict(SUPPORT_BOUNDS),
        near_limits=SUPPORTS_NEAR,
    )


def cross_entropy():
    def build(axis_name):
        def run(state, logits, targets):
            return rn.categorical_cross_entropy(logits, targets, reduction="none"), state

        return run, None

    def inputs(rng, batch):
        return _logits(rng, batch), np.asarray(jax.nn.softmax(_logits(rng, batch)))

    def weighted(state, weights, logits, targets):
        return rn.categorical_cross_entropy(logits, targets, weights=weights)  # the mean

    def reference(state, weights, logits, targets):
        logits = np.asarray(logits, np.float64)
        shifted = logits - logits.max(-1, keepdims=True)
        log_softmax = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
        losses = -(targets * log_softmax).sum(-1)
        return (weights * losses).sum() / weights.sum()

    weights = Weighted(
        weighted, reference, lambda logits, targets: np.ones(len(logits), np.float32)
    )
    return Entry(build, inputs, "value", differentiable=True, axis=False, weights=weights)


def weighted_cross_entropy():
    """The loss's weighted mean over the batch: the reduction that divides by the weights' sum."""

    def build(axis_name):
        def run(state, logits, targets, weights):
            return rn.categorical_cross_entropy(logits, targets, weights=weights), state

        return run, None

    def inputs(rng, batch):
        targets = np.asarray(jax.nn.softmax(_logits(rng, batch)))
        return _logits(rng, batch), targets, rng.uniform(0, 2, batch).astype(np.float32)

    return Entry(build, inputs, "value", differentiable=True, axis=False)


def projection():
    def build(axis_name, **options):
        support, _ = support_of(dict(options))

        def run(state, probs, rewards, discounts):
            out = rn.categorical_projection(probs, support, rewards=rewards, discounts=discounts)
            return out, state

        return run, None

    def inputs(rng, batch):
        probs = np.asarray(jax.nn.softmax(_logits(rng, batch)))
        return probs, _rewards(rng, batch), rng.choice([0.0, 0.99], batch).astype(np.float32)

    return Entry(
        build,
        inputs,
        "value",
        axis=False,
        hyperparameters=dict(SUPPORT_BOUNDS),
        near_limits=SUPPORTS_NEAR,
    )


SCALED_GAMMA, SCALED_MULTIPLE, SCALED_WARMUP = 0.9, 1.5, 4  # warm-up: the shared support's


def scaled(statistic, num_tasks=None):
    """scaled_support over normalize_reward's statistics, the batch one environment's rewards.

    The state is ``(reward state, support state)``; ``run`` steps the reward
    normalizer through the rewards in order (a trajectory, so the tracked return
    is one number and no state has the batch's shape) and updates the bound after
    each, and gives the normalized rewards and each reward two-hot on the support
    of its step (with ``num_tasks``, of its task).
    """
    shared = num_tasks is None
    options: dict[str, Any] = (
        {"space": "symlog", "warmup": SCALED_WARMUP} if shared else {"num_tasks": num_tasks}
    )

    def build(axis_name, **extra):
        statistics = rn.Statistics() if shared else rn.Statistics(num_tasks=num_tasks)
        g_max = 10.0 if statistic == "ret_abs_max" else None
        rewards = rn.normalize_reward(
            SCALED_GAMMA, g_max=g_max, statistics=statistics, axis_name=axis_name
        )
        named = {"multiple": SCALED_MULTIPLE, **options, **extra}
        support = rn.scaled_support(ATOMS, statistic=statistic, **named)

        def step(state, inputs):
            reward_state, support_state = state
            reward, *task = inputs
            task = task[0] if task else None
            out, reward_state = rewards.step(reward_state, reward, False, False, task=task)
            support_state = support.update(support_state, reward_state)
            target = rn.two_hot(reward, support.support(support_state, task))
            return (reward_state, support_state), (out, target)

        def run(state, *inputs):
            state, outs = jax.lax.scan(step, state, inputs)
            return outs, state

        return run, (rewards.init(), support.init())

    def inputs(rng, batch):
        rewards = _rewards(rng, batch) * 10
        return (rewards,) if shared else (rewards, (np.arange(batch) % num_tasks).astype(np.int32))

    def placed(placement):
        """The support of this entry's placement, over reward states of any placement."""
        support = rn.scaled_support(
            ATOMS, statistic="std", num_tasks=PLACEMENTS[placement].num_tasks
        )
        task = PLACED_TASKS[:1] if placement == "tasks" else None
        reward_state = rn.normalize_reward(statistics=PLACEMENTS[placement]).init((4,))
        calls = {
            "update": lambda state: support.update(state[0], reward_state),
            "update(reward_state)": lambda state: support.update(support.init(), state[1]),
            "support": lambda state: support.support(state[0], task),
        }
        other = rn.normalize_reward(statistics=PLACEMENTS[placement]).init((4,))
        return (support.init(), other), calls

    hyperparameters: dict[str, Any] = {"multiple": SCALED_MULTIPLE, "minimum": 1.0}
    # A multiple of 3e38 raises the bound to the float32 cap (half the largest number, so
    # that the support's width fits), which float64 does not have: 1e37 stays below it.
    near = [Near({"multiple": TINY}), Near({"multiple": 1e37})]
    near += [Near({"minimum": TINY}), Near({"minimum": HUGE})]
    if shared:
        hyperparameters["warmup"] = SCALED_WARMUP
        near.append(Near({"warmup": 2**31 - 1}))
    return Entry(
        build,
        inputs,
        "value",
        differentiable=True,
        placements=("shared", "tasks"),
        placed=placed,
        hyperparameters=hyperparameters,
        near_limits=tuple(near),
    )


ENTRIES = {
    **{f"group:{e}": group(e) for e in CONVENTIONS["exact"].estimators},
    **{f"group:grpo:{c}": group("grpo", c) for c in ("trl", "verl", "tunix", "openrlhf", "roll")},
    "group:normalized:areal": group("normalized", "areal", mean="group", std="batch", ddof=0),
    "group:normalized:roll:running": group(
        "normalized", "roll", mean="group", std="running", num_domains=2
    ),
    "group:normalized:running:shared": group("normalized", mean="running", std="running"),
    "group:maxrl:skyrl": group("maxrl", "skyrl", ragged=True),
    "group:rloo:ragged": group("rloo", ragged=True),
    "group:gdpo:verl:ragged": group("gdpo", "verl", ragged=True),
    **{f"masked_whiten:{c}": whiten(c) for c in ("exact", "verl", "tunix", "openrlhf")},
    **{f"kl_estimate:{e}": kl(e) for e in ("k1", "k2", "k3", "k3+")},
    "kl_estimate:k3:verl": kl("k3", "verl"),
    "kl_penalized_rewards:k1:openrlhf": kl("k1", "openrlhf", penalized=True),
    **{f"overlong_penalty:{c}": overlong(c) for c in ("exact", "verl")},
    "aggregate_loss:seq-mean-token-mean": aggregation("seq-mean-token-mean"),
    "aggregate_loss:dr_grpo:trl": aggregation("dr_grpo", "trl"),
    **{f"normalize_observation:{p}": observations(p) for p in ("gymnasium", "sb3", "brax")},
    "normalize_observation:tree": observations("gymnasium", tree=True),
    "normalize_observation:finite": observations("brax", finite_observations=True),
    "normalize_observation:rsl_rl:until": observations("rsl_rl", until_count=64),
    "popart": popart_entry(),
    "two_hot": encoder("two_hot"),
    "hl_gauss": encoder("hl_gauss"),
    "decode_logits": decoder(),
    "categorical_cross_entropy": cross_entropy(),
    "categorical_cross_entropy:weighted_mean": weighted_cross_entropy(),
    "categorical_projection": projection(),
    "scaled_support:std": scaled("std"),
    "scaled_support:ret_abs_max:tasks": scaled("ret_abs_max", num_tasks=3),
}
REGISTRY = ENTRIES
# One entry per family crosses the input dtypes, and stands for the family at the oldest
# supported versions (conftest.py).
REPRESENTATIVES = (
    "group:grpo",
    "masked_whiten:exact",
    "normalize_observation:brax",
    "two_hot",
    "scaled_support:std",
)
STATEFUL = [name for name, entry in ENTRIES.items() if entry.stateful]
DIFFERENTIABLE = [name for name, entry in ENTRIES.items() if entry.differentiable]
WITH_AXIS = [name for name, entry in ENTRIES.items() if entry.axis]


@functools.cache
def compiled(name):
    """The entry's ``run`` and state, and ``run`` jitted once for every test."""
    run, state = ENTRIES[name].build(None)
    return run, state, jax.jit(run)


def batch_of(name, batch, seed=0):
    entry = ENTRIES[name]
    return entry.inputs(np.random.default_rng(seed), batch * entry.unit)


def assert_close(actual, desired, rtol=1e-6):
    for got, want in zip(jax.tree.leaves(actual), jax.tree.leaves(desired), strict=True):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=rtol, atol=1e-6)


def floating(tree):
    return [x for x in jax.tree.leaves(tree) if jnp.issubdtype(jnp.result_type(x), jnp.floating)]


@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_vmap_over_batches_is_jit_of_each(name):
    _, state, jitted = compiled(name)
    first, second = batch_of(name, 2, seed=0), batch_of(name, 2, seed=1)
    stacked = jax.tree.map(lambda a, b: np.stack([a, b]), first, second)
    axes = (None,) + (0,) * len(first)
    mapped = jax.vmap(jitted, in_axes=axes)(state, *stacked)
    for index, inputs in enumerate((first, second)):
        assert_close(jax.tree.map(lambda x, i=index: x[i], mapped), jitted(state, *inputs))


@pytest.mark.parametrize("name", STATEFUL)
def test_scan_over_steps_is_the_loop_of_steps(name):
    _, state, jitted = compiled(name)
    steps = [batch_of(name, 2, seed=seed) for seed in range(3)]
    stacked = jax.tree.map(lambda *xs: np.stack(xs), *steps)

    def body(carry, inputs):
        out, carry = jitted(carry, *inputs)
        return carry, out

    final, outs = jax.lax.scan(body, state, stacked)
    for index, inputs in enumerate(steps):
        out, state = jitted(state, *inputs)
        assert_close(jax.tree.map(lambda x, i=index: x[i], outs), out)
    assert_close(final, state)


@pytest.mark.parametrize("name", DIFFERENTIABLE)
def test_a_gradient_in_the_first_input_is_finite(name):
    run, state, _ = compiled(name)
    first, *rest = batch_of(name, 2)

    def total(x):
        out, _ = run(state, x, *rest)
        return sum(jnp.sum(leaf) for leaf in floating(out) if leaf.size) + 0.0

    grads = jax.jit(jax.grad(total))(jax.tree.map(jnp.asarray, first))
    for leaf in jax.tree.leaves(grads):
        assert np.isfinite(np.asarray(leaf)).all(), (name, leaf)


@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_export_with_a_symbolic_batch(name):
    _, state, jitted = compiled(name)
    inputs = batch_of(name, 2)
    (size,) = export.symbolic_shape(f"{ENTRIES[name].unit}*b")
    specs = jax.tree.map(lambda x: jax.ShapeDtypeStruct((size, *x.shape[1:]), x.dtype), inputs)
    exported = export.export(jitted)(state, *specs)
    for batch in (1, 3):
        inputs = batch_of(name, batch)
        assert_close(exported.call(state, *inputs), jitted(state, *inputs))


@pytest.mark.parametrize("name", WITH_AXIS)
def test_an_unbound_axis_name_gets_the_library_message(name):
    run, state = ENTRIES[name].build("contract")
    with pytest.raises(ValueError, match=r"axis_name='contract': no map binds the axis"):
        run(state, *batch_of(name, 1))


@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_an_empty_batch_leaves_the_state_as_it_is(name):
    _, state, jitted = compiled(name)
    out, new_state = jitted(state, *batch_of(name, 0))
    for leaf in jax.tree.leaves(out):
        assert np.shape(leaf)[:1] in ((0,), ()), (name, np.shape(leaf))
    if state is not None:
        for got, want in zip(jax.tree.leaves(new_state), jax.tree.leaves(state), strict=True):
            assert np.asarray(got).tobytes() == np.asarray(want).tobytes()


def hostile(inputs, value):
    """The first input with ``value`` at its first entries (an array of magnitude ``value``)."""
    first, *rest = inputs

    def spoil(x):
        x = np.array(x)
        if not (np.issubdtype(x.dtype, np.floating) and x.size):
            return x
        if np.isfinite(value):  # every entry, of magnitudes from value / 4 to value
            magnitudes = value * np.linspace(0.25, 1, x.size).reshape(x.shape)
            return (np.sign(x) * magnitudes).astype(x.dtype)
        x.reshape(x.shape[0], -1)[0] = value
        return x

    return (jax.tree.map(spoil, first), *rest)


@pytest.mark.parametrize("value", [np.nan, np.inf, 1e38], ids=["nan", "inf", "1e38"])
@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_nan_inf_and_the_dtype_limits_never_poison_a_state_nor_give_inf(name, value):
    """No error; the state stays finite; no output is inf where its inputs are finite."""
    if ENTRIES[name].finite_inputs and not np.isfinite(value):
        pytest.skip("promised finite inputs (its docstring states what non-finite ones do)")
    _, state, jitted = compiled(name)
    inputs = hostile(batch_of(name, 2), value)
    out, new_state = jitted(state, *inputs)
    if state is not None:
        for leaf in floating(new_state):
            assert not np.isnan(leaf).any(), (name, new_state)
    if np.isfinite(value) and not ENTRIES[name].overflows:
        for leaf in floating(out):
            assert not np.isinf(leaf).any(), (name, out)


DTYPES = (np.float64, jnp.bfloat16, np.float16, np.int32, np.bool_)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", REPRESENTATIVES)
def test_every_input_dtype_is_computed_as_float32_of_its_values(name, dtype):
    _, state, jitted = compiled(name)
    first, *rest = batch_of(name, 2)
    cast = jax.tree.map(lambda x: np.asarray(x).astype(dtype), first)
    as_float32 = jax.tree.map(lambda x: x.astype(np.float32), cast)
    out, _ = jitted(state, cast, *rest)
    want, _ = jitted(state, as_float32, *rest)
    if ENTRIES[name].family == "observation":  # in the observation's dtype; integers pass
        want = want.astype(dtype) if jnp.issubdtype(dtype, jnp.floating) else cast
    else:  # computed in float32 (float64 only under x64)
        assert all(leaf.dtype == np.float32 for leaf in floating(out)), (name, out)
    assert all(
        np.asarray(a).dtype == np.asarray(b).dtype
        for a, b in zip(jax.tree.leaves(out), jax.tree.leaves(want), strict=True)
    )
    assert_close(
        jax.tree.map(lambda x: np.asarray(x, np.float64), out),
        jax.tree.map(lambda x: np.asarray(x, np.float64), want),
        rtol=0,
    )


@pytest.mark.parametrize("name", STATEFUL)
def test_checkpoints_round_trip_and_refuse_another_entry_state(name):
    _, state, jitted = compiled(name)
    _, state = jitted(state, *batch_of(name, 2))
    data = rn.save_state(state)
    loaded = rn.load_state(state, data)
    for got, want in zip(jax.tree.leaves(loaded), jax.tree.leaves(state), strict=True):
        assert np.asarray(got).tobytes() == np.asarray(want).tobytes()
    for other in STATEFUL:
        template = compiled(other)[1]
        if type(template) is not type(state):  # another family's state, even of the same leaves
            with pytest.raises(ValueError, match="checkpoint does not match the template"):
                rn.load_state(template, data)


@pytest.mark.parametrize("name", REPRESENTATIVES)
def test_under_x64_float64_inputs_are_computed_in_float64(name):
    _, state32, jitted32 = compiled(name)
    inputs = batch_of(name, 2)
    want, _ = jitted32(state32, *inputs)
    with jax.enable_x64(True):
        run, state = ENTRIES[name].build(None)  # float64 statistics by default under x64
        wide = [
            np.asarray(x, np.float64) if np.asarray(x).dtype == np.float32 else x for x in inputs
        ]
        out, state = jax.jit(run)(state, *wide)
    # Categorical targets take the dtype of their support (float32 SUPPORT here; a scaled
    # support's is JAX's float, float64 under x64), the rest float64.
    fixed = ENTRIES[name].family == "value" and not name.startswith("scaled_support")
    dtype = SUPPORT.atoms.dtype if fixed else np.float64
    assert all(leaf.dtype == dtype for leaf in floating((out, state))), (name, out)
    assert_close(out, want, rtol=1e-5)


SCALED = [name for name in ENTRIES if name.startswith("scaled_support")]


def symlog(x):
    return np.sign(x) * np.log1p(np.abs(x))


def scaled_reference(rewards, tasks, statistic, num_tasks, warmup):
    """Float64 NumPy: the final bounds, the normalized rewards, the two-hot targets.

    One environment's return ``G = gamma G + r``; per task, Gymnasium's running
    moments of ``G`` and the running max of ``|G|``; every bound raised to
    ``multiple`` times its task's statistic until ``warmup`` updates were taken.
    """
    g, bound = 0.0, np.ones(num_tasks)
    moments, g_max = [RunningMeanStd() for _ in range(num_tasks)], np.zeros(num_tasks)
    normalized, targets = [], []
    for updates, (r, k) in enumerate(zip(np.asarray(rewards, np.float64), tasks, strict=True)):
        g = SCALED_GAMMA * g + r
        moments[k].update([g])
        g_max[k] = max(g_max[k], abs(g))
        var = np.array([m.var for m in moments])
        stat = g_max if statistic == "ret_abs_max" else np.sqrt(var)
        if warmup is None or updates < warmup:
            bound = np.maximum(bound, SCALED_MULTIPLE * stat)
        scale = np.sqrt(var[k] + 1e-8)
        if statistic == "ret_abs_max":  # normalize_reward(g_max=10): SimbaV2's floor
            scale = max(scale, g_max[k] / 10.0)
        normalized.append(r / scale)
        space = np.asarray if num_tasks > 1 else symlog  # the shared support is symlog
        atoms = np.linspace(-space(bound[k]), space(bound[k]), ATOMS)
        y = np.clip(space(r), atoms[0], atoms[-1])
        position = (y - atoms[0]) / (atoms[1] - atoms[0])
        below = min(int(np.floor(position)), ATOMS - 2)
        target = np.zeros(ATOMS)
        target[below], target[below + 1] = below + 1 - position, position - below
        targets.append(target)
    return bound, np.array(normalized), np.array(targets)


@pytest.mark.parametrize("name", SCALED)
def test_scaled_support_entries_follow_a_float64_reference(name):
    """The bounds (and the warm-up), normalized rewards and targets of 9 steps, to 1e-5."""
    _, state, jitted = compiled(name)
    shared = name == "scaled_support:std"
    steps = [batch_of(name, 3, seed=seed) for seed in range(3)]  # 9 rewards, 3 updates each
    outs = []
    for inputs in steps:
        (out, target), state = jitted(state, *inputs)
        outs.append((out, target))
    rewards = np.concatenate([inputs[0] for inputs in steps])
    tasks = np.zeros(9, int) if shared else np.concatenate([inputs[1] for inputs in steps])
    statistic = "std" if shared else "ret_abs_max"
    bound, normalized, targets = scaled_reference(
        rewards, tasks, statistic, 1 if shared else 3, SCALED_WARMUP if shared else None
    )
    support_state = state[1]
    assert int(support_state.updates) == 9
    np.testing.assert_allclose(np.reshape(support_state.bound, -1), bound, rtol=1e-5)
    np.testing.assert_allclose(np.concatenate([o for o, _ in outs]), normalized, rtol=1e-5)
    np.testing.assert_allclose(np.concatenate([t for _, t in outs]), targets, atol=1e-5)


# The axes: weights, placements, hyperparameters near the dtype's limits, traced
# hyperparameters, flags. Each entry declares what it has (``Entry``). The weights share
# one program per entry (``weighted_program``); the options near the limits are constants of
# one program per case, float32 and float64 (less to compile than operation by operation).
WEIGHTED = [name for name, entry in ENTRIES.items() if entry.weights]
TOTALS = (1.0, 3e9, 1e20, HUGE)  # a batch's largest weight: totals past 2**32, float32's max


@functools.cache
def weighted_program(name):
    return jax.jit(ENTRIES[name].weights.run)


@pytest.mark.parametrize("scale", TOTALS, ids=lambda scale: f"{scale:g}")
@pytest.mark.parametrize("name", WEIGHTED)
def test_weights_of_any_total_give_the_float64_weighted_statistic(name, scale):
    weighted, (_, state, _) = ENTRIES[name].weights, compiled(name)
    inputs = batch_of(name, 2)
    base = np.asarray(weighted.base(*inputs), np.float64)
    weights = (base * (scale / base.max())).astype(np.float32)  # the largest is ``scale``
    out = weighted_program(name)(state, weights, *inputs)
    assert_float64(out, weighted.reference(state, weights.astype(np.float64), *inputs))


@pytest.mark.parametrize("bad", [np.nan, -1.0], ids=["nan", "negative"])
@pytest.mark.parametrize("name", WEIGHTED)
def test_a_traced_nan_or_negative_weight_gives_nan(name, bad):
    """NaN where the weight enters; a statistics state leaves its entry out (as weight 0)."""
    weighted, (_, state, _) = ENTRIES[name].weights, compiled(name)
    inputs = batch_of(name, 2)
    weights = weighted.base(*inputs)
    first = np.flatnonzero(weights)[0]
    spoiled, zeroed = weights.copy(), weights.copy()
    spoiled.flat[first], zeroed.flat[first] = bad, 0.0
    out = weighted_program(name)(state, spoiled, *inputs)
    if weighted.statistics:
        (out, stats), (outputs, statistics) = (
            out,
            weighted.reference(state, zeroed.astype(np.float64), *inputs),
        )
        assert_float64(stats, statistics)
        for leaf in floating(out):
            assert np.isnan(leaf[first]).all(), (name, out)
        others = functools.partial(np.delete, obj=first, axis=0)
        assert_float64(jax.tree.map(others, out), jax.tree.map(others, outputs))
        return
    for leaf in floating(out):
        assert np.isnan(leaf).any(), (name, out)


PLACED = [
    (name, own, other, call)
    for name, entry in ENTRIES.items()
    for own, other in itertools.permutations(entry.placements, 2)
    for call in entry.placed(own)[1]
]


@pytest.mark.parametrize(("name", "own", "other", "call"), PLACED)
def test_a_state_of_another_placement_is_refused_naming_the_state(name, own, other, call):
    """Shared, per-environment and per-task states: each refused by the others' functions."""
    entry = ENTRIES[name]
    state = entry.placed(other)[0]
    # The option is named as ``statistics=...``, ``num_tasks=...`` or the placement's own
    # spelling, ``Statistics(per_env=True)``.
    option = r"(statistics=|num_tasks=|Statistics\(per_env=True\))"
    with pytest.raises(ValueError, match=r"(state|statistics)\b(.|\n)*" + option):
        entry.placed(own)[1][call](state)


HYPERPARAMETERS = [(name, key) for name in sorted(ENTRIES) for key in ENTRIES[name].hyperparameters]
NEAR_LIMITS = [(name, near) for name in sorted(ENTRIES) for near in ENTRIES[name].near_limits]
FLAGS = [(name, flag) for name in sorted(ENTRIES) for flag in ENTRIES[name].flags]


@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_every_real_hyperparameter_is_tried_near_the_limits(name):
    entry = ENTRIES[name]
    tried = {key for near in entry.near_limits for key in near.options}
    real = {key for key, value in entry.hyperparameters.items() if not isinstance(value, int)}
    assert real <= tried <= set(entry.hyperparameters) | {"sigma"}, (name, tried)


def run_jitted(name, inputs, **options):
    """The entry built with ``options``, run as one program (the options are its constants)."""
    run, state = ENTRIES[name].build(None, **options)
    return jax.jit(lambda state, *inputs: run(state, *inputs)[0])(state, *inputs)


@pytest.mark.parametrize(("name", "near"), NEAR_LIMITS, ids=str)
def test_options_near_the_dtype_limits_give_the_float64_numbers_or_an_error_naming_them(name, near):
    """Float32 against the same options in float64 (x64), where these magnitudes fit."""
    options = {**ENTRIES[name].hyperparameters, **as_float32(near.options)}
    inputs = batch_of(name, 2)
    if near.magnitude is not None:
        inputs = hostile(inputs, near.magnitude)
    out, error = outcome(run_jitted, name, inputs, **options)
    if error is not None:
        assert refused_by_name(error, near.options), error
        return
    with jax.enable_x64(True):
        wide = [
            np.asarray(x, np.float64) if np.asarray(x).dtype == np.float32 else x for x in inputs
        ]
        want = run_jitted(name, jax.tree.map(np.asarray, wide), **options)
    assert_float64(out, want, rtol=1e-4)


@pytest.mark.parametrize(("name", "hyperparameter"), HYPERPARAMETERS)
def test_a_traced_hyperparameter_works_or_is_refused_by_name(name, hyperparameter):
    entry = ENTRIES[name]
    valid, inputs = entry.hyperparameters[hyperparameter], batch_of(name, 2)

    def run(value, *inputs):
        run, state = entry.build(None, **{hyperparameter: value})
        return run(state, *inputs)

    got, error = outcome(jax.jit(run), jax.tree.map(jnp.asarray, valid), *inputs)
    if error is not None:
        assert refused_by_name(error, [hyperparameter]), error
        return
    assert_close(got, run(valid, *inputs))


def build_and_run(name, **options):
    run, state = ENTRIES[name].build(None, **options)
    return run(state, *batch_of(name, 1))


@pytest.mark.parametrize("value", ["no", 1], ids=["str", "int"])
@pytest.mark.parametrize(("name", "flag"), FLAGS)
def test_a_flag_that_is_not_a_bool_is_a_type_error_naming_it(name, flag, value):
    with pytest.raises(TypeError, match=rf"\b{flag}\b"):
        build_and_run(name, **{flag: value})
