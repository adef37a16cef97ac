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
"""

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export

import rewardnorm_jax as rn
from rewardnorm_jax._src.llm.conventions import CONVENTIONS
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

    @property
    def stateful(self) -> bool:
        return self.build(None)[1] is not None


def _rewards(rng, batch, functions=0):
    shape = (batch, functions) if functions else (batch,)
    return rng.normal(1.0, 2.0, shape).astype(np.float32)


LEVELS = {"mean": "batch", "std": "group", "leave_one_out": True}  # "normalized" unless given


def group(estimator, convention="exact", ragged=False, **levels):
    if estimator == "normalized":
        levels = levels or LEVELS

    def build(axis_name):
        layout: dict[str, Any] = {"num_groups": 4} if ragged else {"group_size": 4}
        if ragged and axis_name is not None:
            layout["groups_span_devices"] = True
        est = rn.group_advantages(
            estimator, convention=convention, axis_name=axis_name, **layout, **levels
        )
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

    return Entry(build, inputs, "llm", unit=1 if ragged else 4)


def _token_inputs(rng, batch):
    logp = -rng.exponential(1.0, (batch, TOKENS)).astype(np.float32)
    ref = -rng.exponential(1.0, (batch, TOKENS)).astype(np.float32)
    mask = rng.random((batch, TOKENS)) < 0.8
    return logp, ref, mask


def whiten(convention):
    def build(axis_name):
        def run(state, values, mask):
            return rn.masked_whiten(values, mask, convention=convention, axis_name=axis_name), state

        return run, None

    def inputs(rng, batch):
        logp, _, mask = _token_inputs(rng, batch)
        return logp, mask

    return Entry(build, inputs, "llm")


def kl(estimator, convention="exact", penalized=False):
    def build(axis_name):
        def run(state, logp, ref, mask):
            named = {"estimator": estimator, "convention": convention}
            if penalized:  # the rewards are the first input: the gradient is in them
                return rn.kl_penalized_rewards(logp, logp, ref, mask, beta=0.1, **named), state
            return rn.kl_estimate(logp, ref, mask, **named), state

        return run, None

    return Entry(build, _token_inputs, "llm", differentiable=True, axis=False, overflows=True)


def aggregation(mode, convention="exact"):
    def build(axis_name):
        def run(state, losses, mask):
            named = {"convention": convention, "axis_name": axis_name}
            return rn.aggregate_loss(losses, mask, mode, **named), state

        return run, None

    def inputs(rng, batch):
        losses, _, mask = _token_inputs(rng, batch)
        return losses, mask

    return Entry(build, inputs, "llm", differentiable=True)


def overlong(convention):
    def build(axis_name):
        def run(state, lengths):
            out = rn.overlong_penalty(
                lengths, max_length=10, buffer_length=4, convention=convention
            )
            return out, state

        return run, None

    def inputs(rng, batch):
        return (rng.integers(0, 14, batch).astype(np.float32),)

    return Entry(build, inputs, "llm", axis=False)


def observations(preset, tree=False, **options):
    def example(batch=None):
        lead = () if batch is None else (batch,)
        leaf = np.zeros((*lead, 3), np.float32)
        return {"pos": leaf, "speed": np.zeros(lead, np.float32)} if tree else leaf

    def build(axis_name):
        norm = rn.normalize_observation(preset, axis_name=axis_name, **options)
        return norm.step, norm.init(example())

    def inputs(rng, batch):
        leaf = rng.normal(100.0, 3.0, (batch, 3)).astype(np.float32)
        if tree:
            return ({"pos": leaf, "speed": rng.normal(0, 1, batch).astype(np.float32)},)
        return (leaf,)

    finite_inputs = options.get("finite_observations", False)
    return Entry(build, inputs, "observation", differentiable=True, finite_inputs=finite_inputs)


def popart_entry():
    def build(axis_name):
        art = rn.popart(None, axis_name=axis_name)

        def run(state, targets):
            state = art.update(state, targets)
            return art.normalize(state, targets), state

        return run, art.init()

    return Entry(build, lambda rng, batch: (_rewards(rng, batch),), "value", differentiable=True)


SUPPORT = rn.uniform_support(-5.0, 5.0, ATOMS)


def encoder(name):
    def build(axis_name):
        encode = {"two_hot": rn.two_hot, "hl_gauss": rn.hl_gauss}[name]
        return (lambda state, targets: (encode(targets, SUPPORT), state)), None

    return Entry(build, lambda rng, batch: (_rewards(rng, batch),), "value", axis=False)


def _logits(rng, batch):
    return rng.normal(0, 2, (batch, ATOMS)).astype(np.float32)


def decoder():
    def build(axis_name):
        return (lambda state, logits: (rn.decode_logits(logits, SUPPORT), state)), None

    return Entry(
        build, lambda rng, batch: (_logits(rng, batch),), "value", differentiable=True, axis=False
    )


def cross_entropy():
    def build(axis_name):
        def run(state, logits, targets):
            return rn.categorical_cross_entropy(logits, targets, reduction="none"), state

        return run, None

    def inputs(rng, batch):
        return _logits(rng, batch), np.asarray(jax.nn.softmax(_logits(rng, batch)))

    return Entry(build, inputs, "value", differentiable=True, axis=False)


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
    def build(axis_name):
        def run(state, probs, rewards, discounts):
            out = rn.categorical_projection(probs, SUPPORT, rewards=rewards, discounts=discounts)
            return out, state

        return run, None

    def inputs(rng, batch):
        probs = np.asarray(jax.nn.softmax(_logits(rng, batch)))
        return probs, _rewards(rng, batch), rng.choice([0.0, 0.99], batch).astype(np.float32)

    return Entry(build, inputs, "value", axis=False)


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

    def build(axis_name):
        statistics = rn.Statistics() if shared else rn.Statistics(num_tasks=num_tasks)
        g_max = 10.0 if statistic == "ret_abs_max" else None
        rewards = rn.normalize_reward(
            SCALED_GAMMA, g_max=g_max, statistics=statistics, axis_name=axis_name
        )
        support = rn.scaled_support(ATOMS, statistic=statistic, multiple=SCALED_MULTIPLE, **options)

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

    return Entry(build, inputs, "value", differentiable=True)


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
