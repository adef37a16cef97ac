"""The sums tuned for XLA:CPU give the plain sums' totals, and the step the same numbers."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rewardnorm_jax as rn
from rewardnorm_jax._src.stats import summation
from tests import reference
from tests.streams import scan_steps

# (batch shape, statistics axes): each of the tuned forms, and both sides of its thresholds.
SHAPES = [
    ((1,), 0),
    ((64,), 0),
    ((1535,), 0),  # unmasked: one product
    ((1536,), 0),  # unmasked: a variadic reduction; masked: two products
    ((4096,), 0),  # masked: the most entries summed by products
    ((4097,), 0),
    ((20000,), 0),
    ((8, 16), 0),  # two batch axes
    ((256, 3), 1),  # one statistic per column
    ((256, 8), 1),  # narrow: one sum per term
    ((256, 9), 1),  # the fewest statistics summed by a variadic reduction
    ((256, 31), 1),  # the most
    ((2500, 9), 1),  # blocks and a rest
    ((1024, 17), 1),  # one block
    ((256, 32), 1),  # wide: one sum per term
    ((4, 5, 6), 2),
    # the plain sums' rows of several statistics: k = 128 // s entries side by side
    ((0, 3), 1),
    ((41, 3), 1),  # fewer entries than a row
    ((42, 3), 1),  # one row
    ((1000, 3), 1),  # rows and a rest
    ((7, 4, 8), 2),  # s = 32: k = 4
    ((10, 200), 1),  # s >= 128: one sum over the entries
]


def totals(parts):
    return np.sum([np.asarray(part) for part in parts], axis=0)


@pytest.mark.parametrize(("shape", "stats_axes"), SHAPES)
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
def test_tuned_and_plain_sums_agree(shape, stats_axes, masked, weighted):
    rng = np.random.default_rng(sum(shape))
    deviation = rng.normal(0.5, 3.0, shape)
    selection = rng.random(shape) < 0.7  # the mask, when masked
    if masked and not weighted:  # unselected entries may then hold NaN and inf
        deviation[~selection & (rng.random(shape) < 0.5)] = np.nan
        deviation[~selection & (rng.random(shape) < 0.2)] = np.inf
    num_batch_axes = len(shape) - stats_axes
    with jax.enable_x64(True):
        d = jnp.asarray(deviation)
        m = jnp.asarray(selection) if masked else None
        plain = np.asarray(summation.plain_sums(d, m, num_batch_axes))
        tuned = totals(summation.cpu_sums(d, m, num_batch_axes, weighted))
    selected = np.where(selection, deviation, 0.0) if masked else deviation
    axes = tuple(range(num_batch_axes))
    count = (
        np.sum(selection, axes)
        if masked
        else np.full(shape[num_batch_axes:], np.prod(shape[:num_batch_axes]))
    )
    expected = np.stack([selected.sum(axes), (selected * selected).sum(axes), count])
    np.testing.assert_allclose(plain, expected, rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(tuned, expected, rtol=1e-12, atol=1e-9)


@pytest.mark.parametrize(
    ("num_envs", "masked"),
    [(num_envs, masked) for num_envs in (1, 64, 3000, 4097, 20000) for masked in (False, True)],
)
def test_the_step_with_tuned_or_plain_sums_matches_the_reference(num_envs, masked):
    steps = 10
    rng = np.random.default_rng(num_envs)
    rewards = rng.normal(rng.uniform(-3, 3), 2.0, (steps, num_envs))
    terminated = rng.random((steps, num_envs)) < 0.1
    active = rng.random(terminated.shape) < 0.8 if masked else np.ones_like(terminated)
    expected, _, rms = reference.normalize_stream(
        rewards, terminated, np.zeros_like(terminated), update=np.ones(steps, bool), active=active
    )
    with jax.enable_x64(True):
        norm = rn.normalize_reward(finite_rewards=not masked)

        def run(rewards, terminated, active):
            return scan_steps(norm, rewards, terminated, False, True, active if masked else None)

        inputs = (jnp.asarray(rewards), jnp.asarray(terminated), jnp.asarray(active))
        tuned_state, tuned = jax.jit(run)(*inputs)
        with summation.everywhere("plain"):  # traced anew: a cached trace keeps its sums
            plain_state, plain = jax.jit(lambda *args: run(*args))(*inputs)
        for state, outputs in ((tuned_state, tuned), (plain_state, plain)):
            np.testing.assert_allclose(outputs, expected, rtol=1e-10, atol=1e-12)
            np.testing.assert_allclose(float(state.stats.mean), rms.mean, rtol=1e-10)
            np.testing.assert_allclose(float(state.stats.var), rms.var, rtol=1e-10)
            assert int(rn.count_as_int(state.stats)) == round(rms.count)


def test_everywhere_traces_one_form_of_the_sums():
    norm = rn.normalize_reward()
    args = (norm.init((64,)), jnp.ones(64))

    def step():  # a new function each time: JAX caches a function's trace
        return lambda state, reward: norm.step(state, reward, False, False)

    both = str(jax.make_jaxpr(step())(*args))  # both forms, chosen by backend
    assert "platform_index" in both
    assert "while" in both
    with summation.everywhere("plain"):
        plain = str(jax.make_jaxpr(step())(*args))
    with summation.everywhere("tuned"):  # the merge in one kernel is a one-trip while loop
        tuned = str(jax.make_jaxpr(step())(*args))
    assert "platform_index" not in plain
    assert "while" not in plain
    assert "platform_index" not in tuned
    assert "while" in tuned


def test_everywhere_names_the_valid_forms():
    with (
        pytest.raises(
            ValueError, match=r"form should be one of \('plain', 'tuned'\), got form='cpu'"
        ),
        summation.everywhere("cpu"),
    ):
        pass
