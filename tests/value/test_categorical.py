"""Categorical value targets against rlax, DreamerV3's bins and float64 references.

rlax's ``transform_to_2hot`` and ``categorical_l2_project`` run on the same
inputs; HL-Gauss is checked against the formula in float64 (``math.erf``
differences); two-hot's decoding and the projection's mass over
hypothesis-generated targets and supports.
"""

import math

import hypothesis
import hypothesis.extra.numpy as hnp
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import rlax
import scipy.special

import rewardnorm_jax as rn
from benchmarks.categorical import dreamer_two_hot

SUPPORTS = {
    "uniform": lambda: rn.uniform_support(-10.0, 10.0, 51),
    "symlog": lambda: rn.symlog_support(255),
    "custom": lambda: rn.support([-100.0, -10.0, -1.0, -0.1, 0.0, 0.3, 3.0, 30.0, 300.0]),
}


def spacing(support):
    """Float32 rounding of the atoms' magnitude: what an exact decoding is allowed."""
    return 8 * np.finfo(np.float32).eps * np.abs(np.asarray(support.atoms)).max()


@pytest.mark.parametrize("kind", sorted(SUPPORTS))
def test_two_hot_decodes_exactly_at_every_atom_both_ends_and_between(kind):
    support = SUPPORTS[kind]()
    atoms = np.asarray(support.atoms)
    between = (atoms[1:] + atoms[:-1]) / 2
    encoded = np.concatenate([atoms, between, atoms[:-1] + 0.1 * np.diff(atoms)])
    targets = np.asarray(support.decode(jnp.asarray(encoded)))
    probs = np.asarray(rn.two_hot(targets, support))
    assert probs.dtype == np.float32
    assert (probs >= 0).all()
    np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-6)
    # the expected atom is the target's encoding, and decodes back to the target
    np.testing.assert_allclose(probs @ atoms, encoded, rtol=0, atol=spacing(support))
    decoded = np.asarray(rn.decode_probs(probs, support))
    np.testing.assert_allclose(decoded, targets, rtol=4e-6 if kind == "symlog" else 0, atol=1e-6)
    if support.space == "value":  # a target on an atom: all its mass there
        np.testing.assert_array_equal(probs[: len(atoms)], np.eye(len(atoms)))
    # beyond the ends: clipped, all the mass on the end atom
    outside = np.asarray(
        rn.two_hot(support.decode(jnp.asarray([atoms[0] - 5, atoms[-1] + 5])), support)
    )
    np.testing.assert_array_equal(outside[:, [0, -1]], [[1, 0], [0, 1]])


@hypothesis.settings(max_examples=40, deadline=None)
@hypothesis.given(
    atoms=hnp.arrays(
        np.float64, st.integers(2, 12), elements=st.floats(-1e4, 1e4), unique=True
    ).map(np.sort),
    targets=hnp.arrays(np.float64, 16, elements=st.floats(-2e4, 2e4)),
)
def test_two_hot_mass_and_decoding_over_any_support(atoms, targets):
    atoms = atoms.astype(np.float32)
    hypothesis.assume(np.all(np.diff(atoms) > 0))
    support = rn.support(atoms)
    probs = np.asarray(_two_hot(targets.astype(np.float32), support))
    np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-6)
    clipped = np.clip(targets.astype(np.float32), atoms[0], atoms[-1])
    np.testing.assert_allclose(probs @ atoms, clipped, rtol=0, atol=spacing(support) + 1e-6)


_two_hot = jax.jit(rn.two_hot)


def test_rlax_two_hot_is_biased_where_ours_decodes_exactly():
    # rlax divides by (upper - lower + 1e-5): a relative 1e-5 / bin width of bias.
    lower, upper, bins = 0.0, 0.1, 101  # bins of width 1e-3: rlax is off by about 1%
    targets = jnp.linspace(0.0, 0.1, 997)[1:-1]
    theirs = rlax.transform_from_2hot(
        rlax.transform_to_2hot(targets, lower, upper, bins), lower, upper, bins
    )
    support = rn.uniform_support(lower, upper, bins)
    ours = rn.decode_probs(rn.two_hot(targets, support), support)
    assert np.abs(np.asarray(theirs - targets)).max() > 3e-6  # 0.3% of a bin, or more
    np.testing.assert_allclose(ours, targets, rtol=0, atol=1e-7)
    # rlax's non-linear two-hot (no epsilon) agrees with ours on a custom support
    custom = rn.support([-3.0, -1.0, 0.0, 0.5, 4.0])
    values = jnp.array([-2.5, -0.2, 0.25, 1.0, 3.9])
    np.testing.assert_allclose(
        rn.two_hot(values, custom),
        rlax._src.transforms.transform_to_2hot_nonlinear(values, custom.atoms),
        atol=1e-6,
    )


def transform_to_probs(target, support, sigma):
    """Farebrother et al. (2024), "Stop Regressing", Appendix A: HL-Gauss's listing, in float64.

    ``support`` there is the ``K + 1`` bin edges (``linspace(min, max, K + 1)``);
    the Gaussian sits at the target itself, the target unclipped.
    """
    cdf_evals = np.array([math.erf((e - target) / (math.sqrt(2) * sigma)) for e in support])
    z = cdf_evals[-1] - cdf_evals[0]
    bin_probs = cdf_evals[1:] - cdf_evals[:-1]
    return bin_probs / z


def tails_reference(target, edges, sigma):
    """The listing's numbers from the Gaussian's tails, in float64.

    The same masses renormalised, as differences of the tails beyond each edge on
    the target's far side, from their logarithms (SciPy's scaled ``erfcx``:
    ``log erfc(x) = log erfcx(x) - x**2``): these do not cancel where the
    listing's erf values round to 1, nor underflow however far the target is.
    """
    edges = np.asarray(edges, np.float64)
    below = target <= (edges[0] + edges[-1]) / 2
    x = (edges - target if below else (target - edges)[::-1]) / (math.sqrt(2) * sigma)
    with np.errstate(divide="ignore"):  # log erfc(x) of the large x is not the one taken
        log_tail = np.where(
            x >= 0, np.log(scipy.special.erfcx(np.abs(x))) - x * x, np.log(scipy.special.erfc(x))
        )
    ratio = np.exp(log_tail - log_tail[0])  # tail k over tail 0, decreasing
    masses = (ratio[:-1] - ratio[1:]) / (1 - ratio[-1])
    return masses if below else masses[::-1]


def default_edges(atoms):
    """The library's bins: edges midway between atoms, half a bin beyond the end atoms."""
    atoms = np.asarray(atoms, np.float64)
    first, last = atoms[0] - (atoms[1] - atoms[0]) / 2, atoms[-1] + (atoms[-1] - atoms[-2]) / 2
    return np.concatenate([[first], (atoms[1:] + atoms[:-1]) / 2, [last]])


def hl_gauss_reference(targets, edges, sigma):
    return np.array([tails_reference(y, edges, sigma) for y in np.asarray(targets, np.float64)])


def test_the_tails_reference_is_the_listing_where_the_listing_is_well_conditioned():
    edges = default_edges(np.linspace(-10.0, 10.0, 51))
    for target in np.linspace(-11.5, 11.5, 47):
        listing = transform_to_probs(target, edges, 0.3)
        # z >= 1e-4 here: the listing's float64 rounding is below 1e-11
        np.testing.assert_allclose(tails_reference(target, edges, 0.3), listing, atol=1e-11)


def test_hl_gauss_beyond_the_support_follows_the_published_listing():
    # -11 on 51 atoms over [-10, 10], sigma 0.3: the Gaussian at -11 itself, renormalised.
    support = rn.uniform_support(-10.0, 10.0, 51)
    edges = default_edges(np.linspace(-10.0, 10.0, 51))
    listing = transform_to_probs(-11.0, edges, 0.3)
    np.testing.assert_allclose(listing[:3], [0.99173157, 0.00825585, 1.25836e-05], rtol=1e-6)
    got = np.asarray(rn.hl_gauss(-11.0, support, sigma=0.3))
    np.testing.assert_allclose(got, listing, rtol=0, atol=2e-7)
    mirrored = np.asarray(rn.hl_gauss(11.0, support, sigma=0.3))
    np.testing.assert_allclose(mirrored, listing[::-1], rtol=0, atol=2e-7)
    # it decodes nearer the end atom than the Gaussian of the clipped target did
    assert float(rn.decode_probs(got, support)) < -9.99


@pytest.mark.parametrize("x64", [False, True], ids=["float32", "float64"])
def test_hl_gauss_far_beyond_the_support_is_the_listing_from_its_tails(x64):
    """Targets up to 100 sigmas beyond, where the listing's erf values round to 1 (0 / 0)."""
    inside = np.linspace(-9.9, 9.9, 23)
    near = np.concatenate([-10.0 - np.geomspace(1e-3, 30.0, 40), 10.0 + np.geomspace(1e-3, 30, 40)])
    with jax.enable_x64(x64):
        dtype = jnp.float64 if x64 else jnp.float32
        support = rn.uniform_support(-10.0, 10.0, 51, dtype=dtype)
        edges = default_edges(support.atoms)  # of the atoms as the dtype rounds them
        targets = np.concatenate([inside, near]).astype(dtype)
        got = np.asarray(rn.hl_gauss(targets, support, sigma=0.3))
        assert got.dtype == dtype
        want = hl_gauss_reference(targets, edges, 0.3)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12 if x64 else 1e-6)
        np.testing.assert_allclose(got.sum(-1), 1.0, atol=1e-12 if x64 else 1e-6)
        # a sigma of 10 bins, targets up to 300 sigmas beyond: erfc underflows, the masses do not.
        # Each erfc ratio is as exact as the edges' distances x (in sqrt(2) sigmas) rounded to
        # the dtype: a relative 2 x ulp(x), below 1e-5 in float32 for these.
        wide = np.concatenate(
            [-10.0 - np.geomspace(1.0, 1200.0, 30), 10 + np.geomspace(1, 1200, 30)]
        )
        got = np.asarray(rn.hl_gauss(wide.astype(dtype), support, sigma=4.0))
        want = hl_gauss_reference(wide.astype(dtype), edges, 4.0)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12 if x64 else 1e-5)
        # where erfc(x_0) is below float32's range, the second bin still holds mass
        beyond_erfc = (edges[0] - wide[:30]) / (4.0 * math.sqrt(2)) > 10
        assert (want[:30][beyond_erfc, 1] > 0.05).any()
        # so far beyond that the tails' ratios underflow: all the mass on the end atom
        far = np.array([-1e4, -1e30, -np.inf, 1e4, 3e38, np.inf], dtype)
        got = np.asarray(rn.hl_gauss(far, support, sigma=0.3))
        np.testing.assert_array_equal(got[:3], np.eye(51)[[0, 0, 0]])
        np.testing.assert_array_equal(got[3:], np.eye(51)[[-1, -1, -1]])
        # the value's gradient in the target: finite everywhere, 0 where the limit is reached
        value = jax.jit(jax.grad(lambda y: rn.decode_probs(rn.hl_gauss(y, support), support)))
        slopes = np.array([value(dtype(y)) for y in (-1e4, -11.0, 0.3, 10.5, 3e38, np.inf)])
        assert np.isfinite(slopes).all()
        np.testing.assert_array_equal(slopes[[0, 4, 5]], 0.0)
        assert (slopes[1:4] > 0).all()


@pytest.mark.parametrize("kind", ["uniform", "custom"])
def test_hl_gauss_matches_the_float64_listing_within_1e_6(kind):
    support = SUPPORTS[kind]()
    atoms = np.asarray(support.atoms)
    rng = np.random.default_rng(0)
    targets = np.concatenate([rng.uniform(atoms[0] * 1.2, atoms[-1] * 1.2, 200), atoms])
    targets = targets.astype(np.float32)  # the float32 inputs, in float64 for the reference
    edges = default_edges(atoms)
    width = (edges[-1] - edges[0]) / len(atoms)  # the mean bin width
    for sigma, options in ((0.75 * width, {}), (0.3 * width, {"sigma": 0.3 * width})):
        got = np.asarray(rn.hl_gauss(targets, support, **options))
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, hl_gauss_reference(targets, edges, sigma), atol=1e-6)
        np.testing.assert_allclose(got.sum(-1), 1.0, atol=1e-6)
        within = (targets >= atoms[0]) & (targets <= atoms[-1])
        listing = np.array([transform_to_probs(y, edges, sigma) for y in targets[within]])
        np.testing.assert_allclose(got[within], listing, atol=1e-6)


def test_hl_gauss_with_given_edges_matches_the_listing():
    support = rn.support([-1.0, 0.0, 2.0, 5.0])
    edges = np.array([-3.0, -0.4, 1.0, 3.0, 9.0])
    targets = np.array([-2.0, 0.3, 4.4, 12.0, -4.0], np.float32)
    got = np.asarray(rn.hl_gauss(targets, support, edges=edges, sigma=0.8))
    want = np.array([transform_to_probs(y, edges, 0.8) for y in targets.astype(np.float64)])
    np.testing.assert_allclose(got, want, atol=1e-6)
    with pytest.raises(ValueError, match=r"edges holds 1\.0; expected finite, strictly increasing"):
        rn.hl_gauss(0.0, support, edges=[-3.0, -0.4, 1.0, 1.0, 9.0])
    with pytest.raises(ValueError, match=r"edges has shape \(3,\); expected \(5,\)"):
        rn.hl_gauss(0.0, support, edges=[-3.0, 1.0, 9.0])
    # an infinite edge is refused at either end alike
    for bad in ([-np.inf, -0.4, 1.0, 3.0, 9.0], [-3.0, -0.4, 1.0, 3.0, np.inf]):
        with pytest.raises(ValueError, match=r"edges holds -?inf; expected finite edges"):
            rn.hl_gauss(0.0, support, edges=bad)
    with pytest.raises(ValueError, match=r"edges\[0\]=-2e\+38 and edges\[-1\]=2e\+38 are 4e\+38"):
        rn.hl_gauss(0.0, support, edges=[-2e38, -0.4, 1.0, 3.0, 2e38])


def test_dreamer_v3_bins_and_symlog_two_hot():
    # DreamerV3: 255 bins uniform in symlog space on [-20, 20]; symlog two-hot, symexp decode.
    support = rn.symlog_support()
    np.testing.assert_array_equal(support.atoms, jnp.linspace(-20.0, 20.0, 255))
    targets = jnp.array([-1e6, -3.0, 0.0, 0.7, 12345.0])
    probs = rn.two_hot(targets, support)
    dreamer = dreamer_two_hot(rn.symlog(targets), jnp.linspace(-20.0, 20.0, 255))
    np.testing.assert_allclose(probs, dreamer, atol=1e-5)
    np.testing.assert_allclose(probs @ support.atoms, rn.symlog(targets), atol=1e-5)
    # float32 rounding of the atoms (up to 20), through symexp: a relative 2e-5 at most
    np.testing.assert_allclose(rn.decode_probs(probs, support), targets, rtol=2e-5)


def test_decoding_large_logits_is_stable_and_float32_for_narrow_dtypes():
    support = rn.uniform_support(-1.0, 1.0, 5)
    logits = jnp.array([[0.0, 0.0, 1e4, 0.0, 0.0], [-1e30, 0.0, 0.0, 0.0, 3e4]])
    np.testing.assert_allclose(rn.decode_logits(logits, support), [0.0, 1.0])
    logits = jax.random.normal(jax.random.key(2), (3, 5)).astype(jnp.bfloat16)
    narrow = rn.decode_logits(logits, support)
    assert narrow.dtype == jnp.float32
    np.testing.assert_allclose(narrow, rn.decode_logits(logits.astype(jnp.float32), support))


@pytest.fixture(scope="module")
def projection_case():
    rng = np.random.default_rng(3)
    batch, atoms = 64, 51
    z = np.sort(rng.uniform(-20, 20, atoms)).astype(np.float32)
    z[atoms // 2] = 0.0
    probs = rng.dirichlet(np.ones(atoms) * 0.3, batch).astype(np.float32)
    rewards = rng.choice([0.0, 1.0, -2.5, 30.0], batch).astype(np.float32)
    terminated = rng.random(batch) < 0.2
    discounts = (0.97 * ~terminated).astype(np.float32)
    return z, probs, rewards, discounts


def test_projection_equals_rlax_l2_project(projection_case):
    z, probs, rewards, discounts = projection_case
    support = rn.support(z)
    ours = rn.categorical_projection(probs, support, rewards=rewards, discounts=discounts)
    theirs = jax.vmap(lambda p, r, d: rlax.categorical_l2_project(r + d * z, p, z))(
        probs, rewards, discounts
    )
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=2e-6)
    np.testing.assert_allclose(np.asarray(ours).sum(-1), 1.0, atol=1e-6)  # mass conserved


@hypothesis.settings(max_examples=30, deadline=None)
@hypothesis.given(
    start=st.floats(-100, 100),
    gaps=hnp.arrays(np.float64, 8, elements=st.floats(0.01, 30)),
    weights=hnp.arrays(np.float64, (4, 9), elements=st.floats(0.01, 1)),
    rewards=hnp.arrays(np.float64, 4, elements=st.floats(-300, 300)),
    discounts=hnp.arrays(np.float64, 4, elements=st.floats(0, 1)),
)
def test_projection_conserves_mass_over_any_support(start, gaps, weights, rewards, discounts):
    atoms = (start + np.concatenate([[0.0], np.cumsum(gaps)])).astype(np.float32)
    probs = (weights / weights.sum(-1, keepdims=True)).astype(np.float32)
    support = rn.support(atoms)
    got = np.asarray(
        _project(probs, support, rewards.astype(np.float32), discounts.astype(np.float32))
    )
    assert (got >= 0).all()
    np.testing.assert_allclose(got.sum(-1), 1.0, atol=1e-5)
    # the expected value moves as r + gamma * mean, where no moved atom is clipped
    moved = rewards[:, None] + discounts[:, None] * atoms
    inside = ((moved >= atoms[0]) & (moved <= atoms[-1])).all(-1)
    want = rewards + discounts * (probs @ atoms)
    scale = np.abs(atoms).max() + np.abs(rewards) + 1
    np.testing.assert_allclose((got @ atoms)[inside], want[inside], atol=1e-5 * scale.max())


_project = jax.jit(
    lambda p, support, r, d: rn.categorical_projection(p, support, rewards=r, discounts=d)
)


@hypothesis.settings(max_examples=60, deadline=None)
@hypothesis.given(
    num_atoms=st.sampled_from([2, 5, 101]),  # a few sizes: each is one compilation
    lower=st.floats(-1e4, 1e4),
    width=st.floats(1e-2, 1e4),
    offsets=hnp.arrays(np.float64, 24, elements=st.floats(-0.2, 1.2)),
    discount=st.floats(0, 1),
)
def test_uniform_supports_find_the_atoms_a_search_finds(num_atoms, lower, width, offsets, discount):
    # A uniform support places a value between its atoms by arithmetic; the same atoms as
    # rn.support(...) are searched. Both give the same bits, at and beside every atom too.
    hypothesis.assume(width / num_atoms > 3e-7 * (abs(lower) + width))  # atoms 3 ulp apart
    uniform = rn.uniform_support(lower, lower + width, num_atoms)
    searched = rn.support(uniform.atoms)
    atoms = np.asarray(uniform.atoms)
    beside = np.concatenate([atoms, np.nextafter(atoms, -np.inf), np.nextafter(atoms, np.inf)])
    targets = np.concatenate([beside, lower + width * offsets, [np.nan]]).astype(np.float32)
    np.testing.assert_array_equal(_two_hot(targets, uniform), _two_hot(targets, searched))
    probs = np.full((3, num_atoms), 1 / num_atoms, np.float32)
    rewards = np.asarray(targets[-4:-1] - atoms[num_atoms // 2], np.float32)
    discounts = np.full(3, discount, np.float32)
    np.testing.assert_array_equal(
        _project(probs, uniform, rewards, discounts), _project(probs, searched, rewards, discounts)
    )


def test_projection_is_exact_where_a_moved_atom_lands_on_an_atom():
    # b = (r + gamma z - v_min) / dz lands exactly on atoms: no mass lost (the l == u case).
    support = rn.uniform_support(-10.0, 10.0, 21)
    probs = np.random.default_rng(1).dirichlet(np.ones(21), 8).astype(np.float32)
    rewards = np.arange(8, dtype=np.float32) - 4.0  # whole numbers: every moved atom on an atom
    got = np.asarray(rn.categorical_projection(probs, support, rewards=rewards, discounts=1.0))
    np.testing.assert_allclose(got.sum(-1), 1.0, atol=1e-6)
    want = np.zeros_like(probs)
    for row, shift in enumerate(rewards.astype(int)):  # atoms moved by whole steps, clipped
        np.add.at(want[row], np.clip(np.arange(21) + shift, 0, 20), probs[row])
    np.testing.assert_allclose(got, want, atol=1e-6)


def test_projection_keeps_the_expected_value_where_nothing_is_clipped():
    support = rn.uniform_support(-50.0, 50.0, 101)
    rng = np.random.default_rng(2)
    probs = np.zeros((16, 101), np.float32)
    probs[:, 40:61] = rng.dirichlet(np.ones(21), 16)  # mass on [-10, 10]
    rewards = rng.uniform(-5, 5, 16).astype(np.float32)
    got = rn.categorical_projection(probs, support, rewards=rewards, discounts=0.99)
    want = rewards + 0.99 * rn.decode_probs(probs, support)
    np.testing.assert_allclose(rn.decode_probs(got, support), want, atol=2e-5)


def test_fast_td3_style_projection_loop_agrees(projection_case):
    # The hand-rolled C51 projection (FastTD3's, with the l == u patch), written in JAX.
    _, probs, rewards, discounts = projection_case
    support = rn.uniform_support(-20.0, 20.0, 51)
    got = rn.categorical_projection(probs, support, rewards=rewards, discounts=discounts)
    np.testing.assert_allclose(
        got, hand_rolled_c51(probs, rewards, discounts, -20.0, 20.0, 51), atol=2e-6
    )


def hand_rolled_c51(probs, rewards, discounts, v_min, v_max, num_atoms):
    z = jnp.linspace(v_min, v_max, num_atoms)
    dz = (v_max - v_min) / (num_atoms - 1)
    tz = jnp.clip(rewards[:, None] + discounts[:, None] * z, v_min, v_max)
    b = (tz - v_min) / dz
    lower, upper = jnp.floor(b).astype(jnp.int32), jnp.ceil(b).astype(jnp.int32)
    lower = jnp.where((upper > 0) & (lower == upper), lower - 1, lower)
    upper = jnp.where((lower < num_atoms - 1) & (lower == upper), upper + 1, upper)
    rows = jnp.arange(probs.shape[0])[:, None]
    out = jnp.zeros_like(probs)
    out = out.at[rows, lower].add(probs * (upper - b))
    return out.at[rows, upper].add(probs * (b - lower))


def test_loss_under_jit_grad_and_optax_with_targets_as_constants():
    support = rn.uniform_support(-5.0, 5.0, 11)
    targets = rn.hl_gauss(jnp.array([1.3, -2.0, 4.9]), support)
    logits = jnp.zeros((3, 11))

    def loss(logits, targets):
        return rn.categorical_cross_entropy(logits, targets)

    value, (grad_logits, grad_targets) = jax.jit(jax.value_and_grad(loss, (0, 1)))(logits, targets)
    np.testing.assert_allclose(value, math.log(11), rtol=1e-6)
    np.testing.assert_allclose(grad_logits, (jax.nn.softmax(logits) - targets) / 3, atol=1e-7)
    np.testing.assert_array_equal(grad_targets, 0.0)  # stop-gradient on the targets
    optimizer = optax.adam(0.1)

    def train(carry, _):
        params, state = carry
        updates, state = optimizer.update(jax.grad(loss)(params, targets), state)
        return (optax.apply_updates(params, updates), state), None

    (params, _), _ = jax.lax.scan(train, (logits, optimizer.init(logits)), length=1000)
    np.testing.assert_allclose(
        rn.decode_logits(params, support), rn.decode_probs(targets, support), atol=2e-2
    )
    per_row = rn.categorical_cross_entropy(logits, targets, reduction="none")
    assert per_row.shape == (3,)
    masked = rn.categorical_cross_entropy(logits, targets, weights=jnp.array([True, False, True]))
    np.testing.assert_allclose(masked, per_row[0], rtol=1e-6)
    weighted = rn.categorical_cross_entropy(logits, targets, weights=jnp.array([0.5, 0.5, 0.0]))
    np.testing.assert_allclose(weighted, (per_row[0] + per_row[1]) / 2, rtol=1e-6)
    huge = rn.categorical_cross_entropy(logits, targets, weights=jnp.array([3e38, 3e38, 0.0]))
    np.testing.assert_allclose(huge, (per_row[0] + per_row[1]) / 2, rtol=1e-6)  # total past max
    narrow = rn.categorical_cross_entropy(logits.astype(jnp.bfloat16), targets, reduction="sum")
    assert narrow.dtype == jnp.float32
    np.testing.assert_allclose(narrow, 3 * math.log(11), rtol=1e-6)


def test_vmap_over_per_sample_supports_equals_one_call_each():
    bounds = jnp.array([1.0, 10.0, 100.0])
    support = rn.uniform_support(-bounds, bounds, 21)  # one support per target
    targets = jnp.array([0.37, -7.0, 250.0])
    probs = rn.two_hot(targets, support)
    for row in range(3):
        one = rn.uniform_support(-bounds[row], bounds[row], 21)
        np.testing.assert_allclose(probs[row], rn.two_hot(targets[row], one), atol=1e-7)
    mapped = jax.vmap(lambda t, b: rn.two_hot(t, rn.uniform_support(-b, b, 21)))(targets, bounds)
    np.testing.assert_allclose(mapped, probs, atol=1e-7)


def test_per_target_supports_pair_with_the_leading_axes():
    # atoms (B, K) against targets (B, T): each row's support serves its T targets.
    bounds = jnp.array([1.0, 20.0])
    support = rn.uniform_support(-bounds, bounds, 5)
    targets = jnp.array([[0.5, 0.25, -0.9], [15.0, 12.5, -3.0]])
    for encode in (rn.two_hot, rn.hl_gauss):
        got = encode(targets, support)
        for row in range(2):
            one = rn.uniform_support(-bounds[row], bounds[row], 5)
            np.testing.assert_allclose(got[row], encode(targets[row], one), atol=1e-6)
    probs = rn.two_hot(targets, support)
    np.testing.assert_allclose(rn.decode_probs(probs, support), targets, atol=1e-5)
    source = rn.uniform_support(-1.0, 1.0, 5)
    moved = rn.categorical_projection(
        probs, support, rewards=jnp.ones((2, 3)), source_support=support
    )
    for row in range(2):
        one = rn.uniform_support(-bounds[row], bounds[row], 5)
        want = rn.categorical_projection(probs[row], one, rewards=jnp.ones(3))
        np.testing.assert_allclose(moved[row], want, atol=1e-6)
    with pytest.raises(ValueError, match=r"probs' leading axes should be \(2,\)"):
        rn.categorical_projection(jnp.ones((3, 5)) / 5, support, source_support=source)


def test_a_target_on_an_atom_has_the_gradient_of_one_beside_it():
    support = rn.uniform_support(-2.0, 2.0, 5)
    at = jax.jacobian(lambda t: rn.two_hot(t, support))(0.0)
    beside = jax.jacobian(lambda t: rn.two_hot(t, support))(0.001)
    np.testing.assert_allclose(at, beside, atol=1e-6)
    value = jax.grad(lambda t: rn.decode_probs(rn.two_hot(t, support), support))
    np.testing.assert_allclose([value(0.0), value(2.0), value(-2.0)], 1.0)


def test_a_nan_target_gives_a_nan_row():
    support = rn.uniform_support(-1.0, 1.0, 5)
    for encode in (rn.two_hot, rn.hl_gauss, jax.jit(rn.two_hot), jax.jit(rn.hl_gauss)):
        rows = np.asarray(encode(jnp.array([np.nan, 0.5]), support))
        assert np.isnan(rows[0]).all()
        assert np.isfinite(rows[1]).all()
    probs = jnp.full((2, 5), 0.2)
    rows = np.asarray(rn.categorical_projection(probs, support, rewards=jnp.array([np.nan, 0.5])))
    assert np.isnan(rows[0]).all()
    assert np.isfinite(rows[1]).all()
    project = jax.jit(lambda d: rn.categorical_projection(probs, support, discounts=d))
    rows = np.asarray(project(jnp.array([np.nan, 0.5])))  # a traced NaN discount
    assert np.isnan(rows[0]).all()
    assert np.isfinite(rows[1]).all()


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: rn.uniform_support(1.0, 1.0, 5), "lower should be < upper"),
        (lambda: rn.uniform_support(0.0, np.inf, 5), "upper holds inf; expected finite"),
        (lambda: rn.uniform_support(0.0, 1.0, 1), "num_atoms should be an integer >= 2"),
        (lambda: rn.uniform_support(0.0, 1.0, 5, space="log"), "space should be one of"),
        (lambda: rn.support([0.0, 2.0, 1.0]), "atoms holds 1.0; expected strictly increasing"),
        (lambda: rn.support([0.0]), "expected at least 2 atoms"),
        (lambda: rn.symlog_support(5, limit=-1.0), "limit should be a finite number > 0"),
        (lambda: rn.symlog_support(5, limit=100.0), "limit=100.0 is beyond symlog"),
        (lambda: rn.uniform_support(1.0, 1.0 + 1e-8, 3), "too close for num_atoms=3 in float32"),
        (
            lambda: rn.categorical_projection(
                jnp.ones((2, 5)) / 5, rn.uniform_support(0.0, 1.0, 5), discounts=np.inf
            ),
            "discounts holds inf; expected finite discounts >= 0",
        ),
        (
            lambda: rn.categorical_cross_entropy(jnp.zeros(()), jnp.zeros(())),
            "logits is a scalar",
        ),
        (
            lambda: rn.categorical_cross_entropy(
                jnp.zeros((2, 5)), jnp.zeros((2, 5)), weights=jnp.array([1.0, -1.0])
            ),
            "weights holds -1.0",
        ),
        (lambda: rn.two_hot(0.0, [0.0, 1.0]), "support should be a Support"),  # type: ignore[arg-type]
        (lambda: rn.hl_gauss(0.0, rn.uniform_support(0.0, 1.0, 5), sigma=0.0), "sigma should"),
        (lambda: rn.decode_probs(jnp.ones(4), rn.uniform_support(0.0, 1.0, 5)), "probs has shape"),
        (
            lambda: rn.categorical_cross_entropy(jnp.zeros((2, 5)), jnp.zeros((2, 4))),
            "targets has shape",
        ),
        (
            lambda: rn.categorical_cross_entropy(jnp.zeros(5), jnp.zeros(5), reduction="max"),
            "reduction should be one of",
        ),
        (
            lambda: rn.categorical_projection(
                jnp.ones((2, 5)) / 5, rn.uniform_support(0.0, 1.0, 5), discounts=-0.5
            ),
            "discounts holds -0.5; expected finite discounts >= 0",
        ),
        (
            lambda: rn.categorical_projection(
                jnp.ones((2, 5)) / 5, rn.uniform_support(0.0, 1.0, 5), rewards=jnp.ones(3)
            ),
            r"rewards has shape \(3,\)",
        ),
    ],
)
def test_bad_input_is_refused_by_name(call, message):
    with pytest.raises((ValueError, TypeError), match=message):
        call()


# Scale-aware supports -------------------------------------------------------------------


def reward_state_after(returns_per_task, num_tasks=None):
    """A normalize_reward(g_max=...) state that saw rewards whose |G| reach each task's value."""
    statistics = rn.Statistics() if num_tasks is None else rn.Statistics(num_tasks=num_tasks)
    norm = rn.normalize_reward(0.0, g_max=10.0, statistics=statistics)  # gamma 0: G = r
    rewards = np.asarray(returns_per_task, np.float32)
    state = norm.init(rewards.shape)
    task = None if num_tasks is None else np.arange(rewards.size)
    _, state = norm.step(state, rewards, False, False, task=task)
    return state


def test_scaled_support_follows_the_running_max_shared_and_per_task():
    shared = rn.scaled_support(11, multiple=2.0)
    state = shared.update(shared.init(), reward_state_after([3.0, -40.0]))
    np.testing.assert_allclose(shared.support(state).atoms, np.linspace(-80, 80, 11), rtol=1e-6)
    per_task = rn.scaled_support(11, num_tasks=3, minimum=5.0)
    state = per_task.update(per_task.init(), reward_state_after([3.0, -40.0, 700.0], 3))
    np.testing.assert_allclose(state.bound, [5.0, 40.0, 700.0])  # at least the minimum
    task = jnp.array([2, 0, 1, 1])
    atoms = per_task.support(state, task).atoms
    assert atoms.shape == (4, 11)
    np.testing.assert_allclose(atoms[:, -1], [700.0, 5.0, 40.0, 40.0])
    # under vmap, one target and one task id at a time
    targets = jnp.array([350.0, -1.0, 39.0, -100.0])
    mapped = jax.vmap(lambda y, t: rn.two_hot(y, per_task.support(state, t)))(targets, task)
    np.testing.assert_allclose(mapped, rn.two_hot(targets, per_task.support(state, task)))
    decoded = rn.decode_probs(mapped, per_task.support(state, task))
    np.testing.assert_allclose(decoded, [350.0, -1.0, 39.0, -40.0], atol=1e-4)  # -100 clipped


def test_the_std_statistic_and_a_symlog_space():
    norm = rn.normalize_reward(0.0)
    state = norm.init((4,))
    _, state = norm.step(state, np.array([-30.0, 10.0, 20.0, 0.0], np.float32), False, False)
    scaled = rn.scaled_support(5, statistic="std", multiple=3.0, space="symlog")
    bound = scaled.update(scaled.init(), state).bound
    np.testing.assert_allclose(bound, 3 * np.sqrt(state.stats.var), rtol=1e-6)
    support = scaled.support(scaled.update(scaled.init(), state))
    assert support.space == "symlog"
    np.testing.assert_allclose(support.values[-1], bound, rtol=1e-5)


def test_frozen_bounds_keep_every_decoded_value_after_the_warm_up():
    scaled = rn.scaled_support(21, warmup=2)
    state = scaled.init()
    logits = jax.random.normal(jax.random.key(0), (8, 21))
    for returns in ([10.0], [30.0]):  # the warm-up: the bound follows the statistics
        state = scaled.update(state, reward_state_after(returns))
    assert float(state.bound) == 30.0
    before = rn.decode_logits(logits, scaled.support(state))
    state = scaled.update(state, reward_state_after([500.0]))  # after: frozen
    assert float(state.bound) == 30.0
    np.testing.assert_array_equal(rn.decode_logits(logits, scaled.support(state)), before)
    # a return beyond the frozen bound is clipped to it
    np.testing.assert_allclose(
        rn.decode_probs(rn.two_hot(500.0, scaled.support(state)), scaled.support(state)), 30.0
    )


def test_re_projecting_onto_a_grown_support_keeps_the_expected_value():
    old = rn.uniform_support(-10.0, 10.0, 51)
    new = rn.uniform_support(-25.0, 25.0, 51)
    probs = jax.nn.softmax(jax.random.normal(jax.random.key(1), (16, 51)) * 3)
    moved = rn.categorical_projection(probs, new, source_support=old)
    np.testing.assert_allclose(moved.sum(-1), 1.0, atol=1e-6)
    np.testing.assert_allclose(rn.decode_probs(moved, new), rn.decode_probs(probs, old), atol=1e-5)


def test_a_crafted_scaled_support_state_is_refused_by_load_state():
    scaled = rn.scaled_support(11, num_tasks=2)
    state = scaled.init()
    for bound, message in ((np.nan, "bound holds nan"), (-1.0, "bound holds -1.0")):
        crafted = state.replace(bound=jnp.array([1.0, bound], jnp.float32))
        with pytest.raises(ValueError, match=message):
            rn.load_state(state, rn.save_state(crafted, scaled.config), scaled.config)
    crafted = state.replace(updates=jnp.array(-3, jnp.int32))
    with pytest.raises(ValueError, match="updates holds -3"):
        rn.load_state(state, rn.save_state(crafted, scaled.config), scaled.config)
    with pytest.raises(TypeError, match="reward_state should be the state of a normalize_reward"):
        scaled.update(state, {"stats": None})


@pytest.mark.parametrize("space", ["value", "symlog"])
def test_a_bound_beyond_the_dtype_saturates_and_targets_stay_right(space):
    """|G| = 3e38 times 4 overflows float32: the bound is the widest finite support's."""
    scaled = rn.scaled_support(11, multiple=4.0, space=space)
    state = scaled.update(scaled.init(), reward_state_after([3e38]))
    half = np.finfo(np.float32).max / 2  # 2b stays finite: the atoms' spacing too
    np.testing.assert_array_equal(state.bound, np.float32(half))
    support = scaled.support(state)
    targets = jnp.array([1e38, -3e38, 5.0], jnp.float32)
    decoded = rn.decode_probs(rn.two_hot(targets, support), support)
    np.testing.assert_allclose(decoded, np.array([1e38, -half, 5.0]), rtol=1e-5)
    # an infinite statistic (an overflowed return) still leaves the bound as it is
    inf_state = reward_state_after([1.0]).replace(ret_abs_max=jnp.float32(np.inf))
    np.testing.assert_array_equal(scaled.update(state, inf_state).bound, state.bound)


def test_a_state_of_another_scaled_support_is_refused_by_name():
    scaled = rn.scaled_support(11)
    reward_state = reward_state_after([3.0])
    others: dict[str, object] = {
        r"bound: the state has float32\[3\], this transform expects float32\[\]": (
            rn.scaled_support(11, num_tasks=3).init()
        ),
        r"state: the state has PopArtState": rn.popart(None).init(),
    }
    for message, state in others.items():
        with pytest.raises(ValueError, match=message):
            scaled.update(state, reward_state)  # type: ignore[arg-type]  # deliberately wrong
        with pytest.raises(ValueError, match=message):
            scaled.support(state)
    with jax.enable_x64(True):
        wide = rn.scaled_support(11, dtype=jnp.float64).init()
    with pytest.raises(ValueError, match=r"bound: the state has float64\[\], this transform"):
        scaled.update(wide, reward_state)
    per_env = rn.normalize_reward(0.0, g_max=1.0, statistics=rn.Statistics(per_env=True))
    with pytest.raises(ValueError, match=r"per-environment statistics, Statistics\(per_env=True\)"):
        scaled.update(scaled.init(), per_env.step(per_env.init(2), jnp.ones(2))[1])


def test_scaled_support_state_checkpoints_and_refuses_another_layout():
    scaled = rn.scaled_support(11, num_tasks=3, warmup=5)
    state = scaled.update(scaled.init(), reward_state_after([3.0, -40.0, 700.0], 3))
    data = rn.save_state(state, scaled.config)
    restored = rn.load_state(scaled.init(), data, scaled.config)
    np.testing.assert_array_equal(restored.bound, state.bound)
    assert int(restored.updates) == 1
    other = rn.scaled_support(11, num_tasks=4, warmup=5)
    with pytest.raises(ValueError, match="num_tasks"):
        rn.load_state(other.init(), data, other.config)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: rn.scaled_support(1), "num_atoms should be an integer >= 2"),
        (lambda: rn.scaled_support(statistic="max"), "statistic should be one of"),
        (lambda: rn.scaled_support(multiple=0.0), "multiple"),
        (lambda: rn.scaled_support(warmup=0), "warmup should be an integer in"),
        (lambda: rn.scaled_support(warmup=2**31), "warmup should be an integer in"),
        (
            lambda: rn.scaled_support().update(
                rn.scaled_support().init(), rn.normalize_reward(0.9).init()
            ),
            "normalize_reward\\(..., g_max=G\\)",
        ),
        (
            lambda: rn.scaled_support(num_tasks=2).update(
                rn.scaled_support(num_tasks=2).init(), reward_state_after([1.0, 2.0, 3.0], 3)
            ),
            r"the reward statistics have shape \(3,\), the bound \(2,\)",
        ),
        (
            lambda: rn.scaled_support(num_tasks=2).support(rn.scaled_support(num_tasks=2).init()),
            "needs each task",
        ),
    ],
)
def test_scaled_support_options_are_checked(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# Widths and magnitudes at the dtype's limits ---------------------------------------------


def test_a_support_wider_than_the_dtype_is_refused_by_name():
    with pytest.raises(
        ValueError,
        match=r"lower=-3e\+38 and upper=3e\+38 are 6e\+38 apart, more than the largest float32 "
        r"number \(3\.403e\+38\).*b <= 1\.701e\+38\), or dtype=float64\.",
    ):
        rn.uniform_support(-3e38, 3e38, 5)
    with pytest.raises(ValueError, match=r"lower=-2e\+38 and upper=2e\+38 are 4e\+38 apart"):
        rn.uniform_support(jnp.array([0.0, -2e38]), jnp.array([1.0, 2e38]), 3)  # per task
    with pytest.raises(ValueError, match=r"atoms\[0\]=-3e\+38 and atoms\[-1\]=3e\+38 are 6e\+38"):
        rn.support([-3e38, 0.0, 3e38])


def test_the_widest_support_encodes_decodes_and_projects_right():
    """[-b, b] with b half the largest float32: every width finite, every number right."""
    half = float(np.finfo(np.float32).max) / 2
    support = rn.uniform_support(-half, half, 5)
    targets = jnp.array([3e38, 1.5e38, 2e38, -1e38, 0.0, 1234.5], jnp.float32)
    decoded = rn.decode_probs(rn.two_hot(targets, support), support)
    np.testing.assert_allclose(decoded, [half, 1.5e38, half, -1e38, 0.0, 1234.5], rtol=1e-6)
    probs = jnp.array([0.0, 0.0, 0.0, 0.0, 1.0])
    projected = rn.categorical_projection(probs, support, rewards=0.0, discounts=1.0)
    np.testing.assert_array_equal(projected, probs)
    projected = rn.categorical_projection(probs, support, rewards=-half / 2, discounts=1.0)
    np.testing.assert_allclose(projected, [0.0, 0.0, 0.0, 1.0, 0.0], atol=1e-6)
    # HL-Gauss: the default bins reach past the largest float's half, their width does not
    edges = default_edges(np.asarray(support.atoms, np.float64))
    sigma = 0.75 * (edges[-1] - edges[0]) / 5
    got = np.asarray(rn.hl_gauss(targets[:5], support))
    np.testing.assert_allclose(got, hl_gauss_reference(targets[:5], edges, sigma), atol=1e-6)
    got = np.asarray(rn.hl_gauss(targets[:5], support, sigma=1.6e38))
    np.testing.assert_allclose(got, hl_gauss_reference(targets[:5], edges, 1.6e38), atol=1e-6)
    # a sigma whose half has a subnormal reciprocal is refused, not computed as 0 or NaN
    with pytest.raises(ValueError, match=r"sigma should be at most 1\.701e\+38 in float32, 2 over"):
        rn.hl_gauss(targets[:5], support, sigma=1.8e38)


def test_scaled_support_minimum_is_capped_at_the_widest_bound():
    with pytest.raises(
        ValueError,
        match=r"minimum should be at most 1\.701e\+38, half the largest float32 number .*"
        r"got minimum=3e\+38\.",
    ):
        rn.scaled_support(5, minimum=3e38)
    half = float(np.finfo(np.float32).max) / 2
    scaled = rn.scaled_support(5, minimum=half)
    support = scaled.support(scaled.init())
    decoded = rn.decode_probs(rn.two_hot(jnp.float32(2e38), support), support)
    np.testing.assert_allclose(decoded, half, rtol=1e-6)
    np.testing.assert_allclose(
        rn.decode_probs(rn.two_hot(jnp.float32(1e38), support), support), 1e38, rtol=1e-6
    )
    state = scaled.init()
    crafted = state.replace(bound=jnp.float32(3e38))
    with pytest.raises(ValueError, match=r"bound holds 3\.0000000054977558e\+38; expected a bound"):
        rn.load_state(state, rn.save_state(crafted, scaled.config), scaled.config)


# Hyperparameters and shapes named ---------------------------------------------------------


def test_bounds_of_shapes_that_do_not_broadcast_are_named():
    message = r"lower has shape \(2,\) and upper \(3,\): they should broadcast to one shape"
    with pytest.raises(ValueError, match=message):
        rn.uniform_support(jnp.zeros(2), jnp.ones(3), 3)
    with pytest.raises(ValueError, match=message):
        jax.jit(lambda low, high: rn.uniform_support(low, high, 3).atoms)(jnp.zeros(2), jnp.ones(3))


def test_a_traced_sigma_is_named_as_the_concrete_number_it_should_be():
    support = rn.uniform_support(-1.0, 1.0, 5)
    for name in ("sigma", "sigma_ratio"):
        with pytest.raises(
            TypeError, match=rf"^{name} should be a concrete number, got the traced"
        ):
            jax.jit(lambda g, name=name: rn.hl_gauss(0.3, support, **{name: g}))(0.5)
    with pytest.raises(TypeError, match=r"^limit should be a concrete number, got the traced"):
        jax.jit(lambda limit: rn.symlog_support(5, limit=limit).atoms)(2.0)


# Traced invalid values: NaN, never a plausible number -------------------------------------


def test_traced_bad_weights_make_every_reduction_nan():
    logits = jnp.zeros((3, 5))
    targets = rn.two_hot(jnp.array([0.1, 0.5, 0.9]), rn.uniform_support(0.0, 1.0, 5))
    loss = jax.jit(
        lambda w, reduction: rn.categorical_cross_entropy(
            logits, targets, weights=w, reduction=reduction
        ),
        static_argnums=1,
    )
    for bad in (np.nan, -1.0, np.inf):
        weights = jnp.array([1.0, bad, 1.0])
        assert np.isnan(loss(weights, "mean")), bad
        assert np.isnan(loss(weights, "sum")), bad
        np.testing.assert_array_equal(np.isnan(loss(weights, "none")), [False, True, False])
    # no row weighing anything still gives 0, and valid weights their weighted mean
    assert float(loss(jnp.zeros(3), "mean")) == 0.0
    per_row = loss(jnp.ones(3), "none")
    np.testing.assert_allclose(
        loss(jnp.array([2.0, 0.0, 1.0]), "mean"), (2 * per_row[0] + per_row[2]) / 3
    )


def test_traced_invalid_supports_and_discounts_give_nan_rows():
    probs = jnp.full((2, 5), 0.2)
    project = jax.jit(
        lambda d: rn.categorical_projection(probs, rn.uniform_support(0.0, 1.0, 5), discounts=d)
    )
    for bad in (-0.5, np.inf, np.nan):
        rows = np.asarray(project(jnp.array([bad, 0.9])))
        assert np.isnan(rows[0]).all(), bad
        np.testing.assert_allclose(rows[1].sum(), 1.0, atol=1e-6)

    def everything(low, high):
        support = rn.uniform_support(low, high, 5)
        return (
            support.atoms,
            rn.two_hot(0.5, support),
            rn.hl_gauss(0.5, support),
            rn.decode_probs(probs[0], support),
            rn.categorical_projection(probs, support),
        )

    run = jax.jit(everything)
    for low, high in ((1.0, 0.0), (0.0, 0.0), (-3e38, 3e38), (0.0, np.inf), (np.nan, 1.0)):
        for out in run(low, high):
            assert np.isnan(np.asarray(out)).all(), (low, high, out)
    for out in run(0.0, 1.0):
        assert np.isfinite(np.asarray(out)).all()

    def of_atoms(atoms):
        support = rn.support(atoms)
        return support.atoms, rn.two_hot(0.5, support), rn.categorical_projection(probs, support)

    for atoms in ([0.0, 0.5, 0.25, 0.75, 1.0], [0.0, 0.5, 0.5, 0.75, 1.0], [-3e38, 0, 1, 2, 3e38]):
        for out in jax.jit(of_atoms)(jnp.array(atoms)):
            assert np.isnan(np.asarray(out)).all(), atoms
    # one support per row: only the invalid row is NaN
    rows = jax.jit(lambda a: rn.two_hot(jnp.array([0.5, 0.5]), rn.support(a)))(
        jnp.array([[0.0, 0.25, 0.5, 0.75, 1.0], [0.0, 0.25, 0.2, 0.75, 1.0]])
    )
    np.testing.assert_allclose(rows[0], [0.0, 0.0, 1.0, 0.0, 0.0])
    assert np.isnan(np.asarray(rows[1])).all()
    # HL-Gauss edges: traced ones that are not finite and increasing give NaN
    support = rn.uniform_support(-1.0, 1.0, 2)
    encode = jax.jit(lambda e: rn.hl_gauss(0.0, support, edges=e, sigma=0.5))
    np.testing.assert_allclose(encode(jnp.array([-2.0, 0.0, 2.0])).sum(), 1.0, atol=1e-6)
    for edges in ([-2.0, 3.0, 2.0], [-np.inf, 0.0, 2.0], [-2.0, 0.0, np.inf]):
        assert np.isnan(np.asarray(encode(jnp.array(edges)))).all(), edges


# States of another transform ---------------------------------------------------------------


@pytest.mark.parametrize("statistic", ["std", "ret_abs_max"])
def test_scaled_support_refuses_statistics_of_other_quantities_by_name(statistic):
    scaled = rn.scaled_support(5, statistic=statistic)
    center = rn.center_reward()
    _, rewards = center.step(center.init((4,)), jnp.array([-3.0, 1.0, 2.0, 8.0]))
    others = {
        r"got CenterRewardState, center_reward's state: its statistics are of the rewards": rewards,
        r"got ObservationNormState, normalize_observation's state": rn.normalize_observation().init(
            jnp.zeros(2)
        ),
        r"got PopArtState, popart's state": rn.popart(None).init(),
    }
    for message, state in others.items():
        with pytest.raises(TypeError, match=r"reward_state should be the state of a normalize_rew"):
            scaled.update(scaled.init(), state)
        with pytest.raises(TypeError, match=message):
            scaled.update(scaled.init(), state)
