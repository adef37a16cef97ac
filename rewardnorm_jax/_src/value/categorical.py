r"""Categorical value targets: a distribution over a fixed support, learnt by cross-entropy.

A categorical critic predicts logits over :math:`K` atoms :math:`z_1 < \dots < z_K`
(the support) and reads its value as the expected atom. Its regression target
:math:`y` becomes a distribution over the same atoms:

* **two-hot** (MuZero, DreamerV3): the mass on the two atoms around :math:`y`,
  linear in between, :math:`p_i = \frac{z_{i+1} - y}{z_{i+1} - z_i}`,
  :math:`p_{i+1} = 1 - p_i` for :math:`z_i \le y \le z_{i+1}`, so that
  :math:`\sum_k p_k z_k = y` to float rounding;
* **HL-Gauss** (Imani and White, 2018; Farebrother et al., 2024): the mass
  of :math:`\mathcal N(y, \sigma^2)` over each atom's bin,
  :math:`p_k \propto \Phi\big(\frac{e_{k+1} - y}{\sigma}\big)
  - \Phi\big(\frac{e_k - y}{\sigma}\big)`, bin edges :math:`e` midway between
  atoms and half a bin beyond the ends.

A :class:`Support` holds the atoms in the space the encoders work in:
``"value"`` (the targets' own units) or ``"symlog"`` (DreamerV3: the atoms
are uniform in :math:`\operatorname{symlog}(y)`, targets are encoded as
:math:`\operatorname{symlog}(y)` and values decoded with :math:`\operatorname{symexp}`).
Beyond the support, two-hot clips the target to the end atom (all the mass
there); HL-Gauss keeps the Gaussian at the target and renormalises its mass
over the bins, as Farebrother et al.'s listing does. Every function works
under ``jit``, ``vmap`` and ``grad``; the number of atoms is static.
"""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from rewardnorm_jax._src.core import checks
from rewardnorm_jax._src.stats import running as rs
from rewardnorm_jax._src.stats.summation import power_of_two
from rewardnorm_jax._src.value.transforms import symexp, symlog

SPACES = ("value", "symlog")
"""The spaces a support's atoms may live in."""
REDUCTIONS = ("mean", "sum", "none")
"""How :func:`categorical_cross_entropy` reduces the per-target losses."""


class Support(struct.PyTreeNode):
    r"""The atoms of a categorical distribution, increasing along the last axis.

    ``atoms`` has shape ``(K,)`` (one support) or ``(..., K)`` (one per
    target: per-task bounds); ``space`` (static) is ``"value"`` or
    ``"symlog"``, the space the atoms are in; ``uniform`` (static) says the
    atoms are evenly spaced (:func:`uniform_support`, :func:`symlog_support`),
    so that a value's bracketing atoms are found from its place between the
    end atoms, :math:`O(1)`, rather than by a binary search, :math:`O(\log K)`.
    """

    atoms: jax.Array
    space: str = struct.field(pytree_node=False, default="value")
    uniform: bool = struct.field(pytree_node=False, default=False)

    @property
    def num_atoms(self) -> int:
        """:math:`K`, static."""
        return self.atoms.shape[-1]

    @property
    def values(self) -> jax.Array:
        """The atoms in the targets' units (:func:`symexp` of them in ``"symlog"`` space)."""
        return symexp(self.atoms) if self.space == "symlog" else self.atoms

    def encode(self, targets: jax.Array) -> jax.Array:
        """``targets`` in the atoms' space."""
        return symlog(targets) if self.space == "symlog" else targets

    def decode(self, encoded: jax.Array) -> jax.Array:
        """The inverse of :meth:`encode`."""
        return symexp(encoded) if self.space == "symlog" else encoded


def uniform_support(lower, upper, num_atoms: int, *, space: str = "value", dtype=None) -> Support:
    r"""``num_atoms`` atoms evenly spaced from ``lower`` to ``upper``, both included.

    ``lower`` and ``upper`` may be arrays of one shape (a support per task, or
    per target: atoms of shape ``(..., K)``), and traced. With
    ``space="symlog"`` they are bounds in symlog space. Concrete bounds must be
    finite, with ``lower < upper`` and ``upper - lower`` finite in ``dtype``
    (a support :math:`[-b, b]` up to half the dtype's largest value); traced
    bounds that are not give atoms of NaN (:ref:`traced-input`).

    Example:
      >>> import rewardnorm_jax as rn
      >>> rn.uniform_support(-1.0, 1.0, 5).atoms.tolist()
      [-1.0, -0.5, 0.0, 0.5, 1.0]
    """
    checks.check_count("num_atoms", num_atoms, minimum=2)
    checks.check_choice("space", space, SPACES)
    dtype = rs.check_dtype(dtype)
    _check_bounds(lower, upper, dtype)
    lower, upper = jnp.broadcast_arrays(jnp.asarray(lower, dtype), jnp.asarray(upper, dtype))
    atoms = jnp.linspace(lower, upper, num_atoms, axis=-1, dtype=dtype)
    if isinstance(atoms, jax.core.Tracer):  # bounds no check could see: NaN where invalid
        return Support(atoms=_nan_unless_valid(atoms), space=space, uniform=True)
    if not np.all(np.diff(np.asarray(atoms)) > 0):
        raise ValueError(
            f"lower={lower!r} and upper={upper!r} are too close for num_atoms={num_atoms} in "
            f"{np.dtype(dtype).name}: neighbouring atoms round to the same value. Pass bounds "
            "further apart, fewer atoms, or dtype=float64."
        )
    return Support(atoms=atoms, space=space, uniform=True)


def symlog_support(num_atoms: int = 255, *, limit: float = 20.0, dtype=None) -> Support:
    r"""DreamerV3's support: ``num_atoms`` atoms uniform in symlog space on ``[-limit, limit]``.

    DreamerV3 uses 255 atoms on :math:`[-20, 20]`, values up to
    :math:`\operatorname{symexp}(20) \approx 4.9 \cdot 10^8`.

    Example:
      >>> import rewardnorm_jax as rn
      >>> support = rn.symlog_support(5, limit=2.0)
      >>> [round(v, 4) for v in support.values.tolist()]
      [-6.3891, -1.7183, 0.0, 1.7183, 6.3891]
    """
    if not (checks.is_real(limit, "limit") and math.isfinite(limit) and limit > 0):
        raise ValueError(f"limit should be a finite number > 0, got limit={limit!r}.")
    largest = float(jnp.finfo(rs.check_dtype(dtype)).max)
    if limit > math.log1p(largest):
        raise ValueError(
            f"limit={limit!r} is beyond symlog of the dtype's largest value "
            f"({math.log1p(largest):.4g}): its atoms' values would overflow."
        )
    return uniform_support(-limit, limit, num_atoms, space="symlog", dtype=dtype)


def support(atoms, *, space: str = "value") -> Support:
    """A support of any increasing atoms (at least 2, along the last axis).

    Concrete atoms are checked finite and strictly increasing, the last minus
    the first finite in their dtype; traced atoms that are not become NaN
    (:ref:`traced-input`).

    Example:
      >>> import rewardnorm_jax as rn
      >>> rn.support([-10.0, -1.0, 0.0, 1.0, 10.0]).num_atoms
      5
    """
    checks.check_choice("space", space, SPACES)
    atoms = checks.as_floating("atoms", atoms)
    if atoms.ndim == 0 or atoms.shape[-1] < 2:
        raise ValueError(
            f"atoms has shape {atoms.shape}; expected at least 2 atoms along the last axis."
        )
    if isinstance(atoms, jax.core.Tracer):
        return Support(atoms=_nan_unless_valid(atoms), space=space)
    concrete = np.asarray(atoms)
    checks.refuse_where("atoms", concrete, ~np.isfinite(concrete), "finite atoms")
    steps = np.diff(concrete, axis=-1)
    checks.refuse_where("atoms", concrete[..., 1:], ~(steps > 0), "strictly increasing atoms")
    _check_width(("atoms[0]", "atoms[-1]"), concrete[..., 0], concrete[..., -1], atoms.dtype)
    return Support(atoms=atoms, space=space)


def two_hot(targets, support: Support) -> jax.Array:
    r"""Each target as the two-hot distribution over ``support``: shape ``(..., K)``.

    The target (in the support's space) is clipped to the end atoms, and its
    mass split between the two atoms around it, linearly, so that the
    expected atom is the clipped target to float rounding, on any increasing
    support, at every atom and at both ends. A NaN target gives a row of NaN.

    Example:
      >>> import rewardnorm_jax as rn
      >>> support = rn.uniform_support(0.0, 4.0, 5)
      >>> rn.two_hot(2.25, support).tolist()
      [0.0, 0.0, 0.75, 0.25, 0.0]
    """
    return _two_hot(_targets(targets, support), support)


@jax.jit  # one program, also for calls outside jit
def _two_hot(targets: jax.Array, support: Support) -> jax.Array:
    below, weight = bracket(support.atoms, support.encode(targets), uniform=support.uniform)
    return _spread(below, weight, support.num_atoms)


def hl_gauss(
    targets, support: Support, *, sigma=None, sigma_ratio: float = 0.75, edges=None
) -> jax.Array:
    r"""Each target as the histogram of :math:`\mathcal N(y, \sigma^2)` over the atoms' bins.

    Bin edges lie midway between atoms, and half a bin beyond the end atoms
    (or are given). The Gaussian's mass in each bin, renormalised over the
    support's range, is :math:`\frac{\operatorname{erf}(u_{k+1}) - \operatorname{erf}(u_k)}
    {\operatorname{erf}(u_K) - \operatorname{erf}(u_0)}`, :math:`u_k = (e_k - y) / (\sqrt2 \sigma)`:
    the listing of Farebrother et al. (2024, Appendix A), with the Gaussian at
    the target itself, beyond the support too. There the erf differences
    cancel (:math:`\operatorname{erf}(u) = 1` in float32 from :math:`u \approx 4`),
    so the masses (of every target) are computed from the Gaussian's tails
    beyond each edge on the side away from the target,
    :math:`\frac{Q(t_k) - Q(t_{k+1})}{Q(t_0) - Q(t_K)}` with
    :math:`Q(t_k) = P(X > e_k)` (mirrored for a target in the bins' upper half),
    as ratios of :math:`\operatorname{erfc}` (of its asymptotic series where it
    underflows): as exact as the edges' distances from the target, rounded to
    the dtype, however far the target is, and all the mass on the end atom in
    the limit. A ``sigma`` above 2 over the dtype's smallest normal number
    (:math:`1.7 \cdot 10^{38}` in float32) is refused (its half's reciprocal
    would be subnormal); a default :math:`\sigma` beyond it (a support of 2
    atoms as wide as the dtype allows) gives NaN.

    Args:
      targets: real targets, any shape.
      support: the :class:`Support` (its space: the Gaussian is in it).
      sigma: the standard deviation, in the support's space; ``None``:
        ``sigma_ratio`` times the mean bin width. A concrete number.
      sigma_ratio: :math:`\sigma` over the bin width when ``sigma`` is None
        (0.75, as Farebrother et al. recommend). A concrete number.
      edges: ``None``, or the ``K + 1`` finite, increasing bin edges (in the
        support's space), shared by every target; traced edges that are not
        give NaN (:ref:`traced-input`).

    Example:
      >>> import rewardnorm_jax as rn
      >>> probs = rn.hl_gauss(0.0, rn.uniform_support(-2.0, 2.0, 5))
      >>> [round(p, 4) for p in probs.tolist()]
      [0.0223, 0.2299, 0.4954, 0.2299, 0.0223]
      >>> below = rn.hl_gauss(-2.5, rn.uniform_support(-2.0, 2.0, 5))  # at the first edge
      >>> [round(p, 4) for p in below.tolist()]
      [0.8176, 0.1748, 0.0076, 0.0001, 0.0]
    """
    targets = _targets(targets, support)
    dtype = support.atoms.dtype
    if edges is not None:
        edges = _checked_edges(edges, support)
    if sigma is None:
        ratio = checks.check_positive("sigma_ratio", sigma_ratio, dtype)
        return _hl_gauss(targets, support, edges, None, ratio)
    sigma = checks.check_positive("sigma", sigma, dtype)
    if sigma > _largest_sigma(dtype):
        raise ValueError(
            f"sigma should be at most {_largest_sigma(dtype):.4g} in {np.dtype(dtype).name}, "
            "2 over its smallest normal number (the reciprocal of half a larger sigma is "
            f"subnormal, which XLA may flush to 0), got sigma={sigma!r}."
        )
    return _hl_gauss(targets, support, edges, jnp.asarray(sigma, dtype), None)


def _largest_sigma(dtype) -> float:
    """The largest sigma whose half has a normal reciprocal in ``dtype``."""
    return 2 / float(jnp.finfo(dtype).tiny)


@jax.jit
def _hl_gauss(targets, support: Support, edges, sigma, ratio) -> jax.Array:
    """:func:`hl_gauss` of checked inputs: ``sigma``, or ``ratio`` times the mean bin width."""
    atoms = aligned(support.atoms, targets.ndim)
    if sigma is None:
        bins = _edges(atoms) if edges is None else edges
        # The mean bin width from the halved edges, whose difference never overflows.
        scale = ratio * (bins[..., -1] / 2 - bins[..., 0] / 2) / support.num_atoms * 2
    else:
        scale = sigma
    # An infinite target as the largest finite one: as far beyond any support, in the limit.
    y = jnp.clip(support.encode(targets), -jnp.finfo(atoms.dtype).max, jnp.finfo(atoms.dtype).max)
    # Half of the edges minus the target, from half the atoms minus half the target: exact
    # near the target, where the Gaussian's mass changes fast (an edge rounded first would
    # cost an ulp of it), and never inf - inf, however far the target.
    halves = (atoms if edges is None else edges) / 2 - y[..., None] / 2
    return _masses((_edges(halves) if edges is None else halves) / (scale[..., None] / 2))


def _masses(t: jax.Array) -> jax.Array:
    r"""The standard Gaussian's masses between increasing edges ``t``, renormalised over them.

    Seen from the target's side with the more mass (edges mirrored when it is
    in their upper half), each mass is a difference of the tails beyond the
    edges, :math:`\frac{Q(t_k) - Q(t_{k+1})}{Q(t_0) - Q(t_K)}`,
    :math:`Q(t) = P(X > t) = \tfrac12 \operatorname{erfc}(t / \sqrt2)`, as ratios
    :math:`Q(t_k) / Q(t_0)`: no erf values near 1 cancel. Beyond the range
    where :math:`\operatorname{erfc}` is a normal number, the ratios come from
    its asymptotic series; where every edge is as far (their distances round
    alike), the limit: all the mass in the nearest bin.
    """
    upper = t[..., :1] + t[..., -1:] < 0  # the target in the edges' upper half: mirrored
    # Edges 1e15 sigmas away or more hold no mass beside nearer ones (their tails' ratio is
    # below exp(-1e15)): as far as that, the arithmetic stays finite, its gradients too.
    near_first = jnp.minimum(jnp.where(upper, -t[..., ::-1], t), 1e15) / math.sqrt(2)
    ratio, far = jax.lax.optimization_barrier(_tail_ratios(near_first))
    # Every edge as far (a target so far that their distances round alike): the limit. Near
    # edges that round alike (a sigma beyond the dtype's range) give 0 / 0: NaN.
    limit = far & ~(ratio[..., -1:] < 1) & ~jnp.isnan(t).any(axis=-1, keepdims=True)
    masses = (ratio[..., :-1] - ratio[..., 1:]) / jnp.where(limit, 1, 1 - ratio[..., -1:])
    masses = jnp.where(limit, (jnp.arange(t.shape[-1] - 1) == 0).astype(masses.dtype), masses)
    return jnp.where(upper, masses[..., ::-1], masses)


def _tail_ratios(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    r""":math:`\operatorname{erfc}(x_k) / \operatorname{erfc}(x_0)` for increasing ``x``; ``far``.

    Directly while :math:`\operatorname{erfc}(x_0)` is a normal number with
    room for ratios down to the dtype's precision; beyond (``far``, per row),
    :math:`e^{-(x_k - x_0)(x_k + x_0)} \frac{x_0 S(x_k)}{x_k S(x_0)}` with
    :math:`S(x) = \sum_n (-1)^n (2n - 1)!! / (2x^2)^n` to :math:`n = 5`, whose
    next term is below the dtype's precision there.
    """
    info = jnp.finfo(x.dtype)
    # Far: erfc(x_0) below tiny / eps, where ratios above eps would lose digits to underflow.
    far = x[..., :1] > math.sqrt(-math.log(float(info.tiny) / float(info.eps))) - 1
    near = jnp.where(far, 0, x)  # each branch on inputs it is finite for, gradients too
    direct = jax.scipy.special.erfc(near) / jax.scipy.special.erfc(near[..., :1])
    x = jnp.where(far, x, 1)
    first = x[..., :1]
    series = _erfc_series(x)
    scaled = jnp.exp(-(x - first) * (x + first)) * (first * series) / (x * series[..., :1])
    return jnp.where(far, scaled, direct), far


def _erfc_series(x: jax.Array) -> jax.Array:
    r"""The asymptotic series :math:`S(x) = \sqrt\pi x e^{x^2} \operatorname{erfc}(x)`, 6 terms."""
    u = 1 / (2 * x * x)
    return 1 - u * (1 - u * (3 - u * (15 - u * (105 - u * 945))))


def _checked_edges(edges, support: Support) -> jax.Array:
    """``edges`` as ``K + 1`` floats of the support's dtype: finite and increasing (traced: NaN)."""
    edges = jnp.asarray(checks.check_reward("edges", edges), support.atoms.dtype)
    if edges.shape != (support.num_atoms + 1,):
        raise ValueError(
            f"edges has shape {edges.shape}; expected ({support.num_atoms + 1},): the "
            f"{support.num_atoms} bins' edges, shared by every target."
        )
    if isinstance(edges, jax.core.Tracer):
        return _nan_unless_valid(edges)
    concrete = np.asarray(edges)
    checks.refuse_where("edges", concrete, ~np.isfinite(concrete), "finite edges")
    bad = ~(np.diff(concrete) > 0)
    checks.refuse_where("edges", concrete[1:], bad, "finite, strictly increasing edges")
    _check_width(("edges[0]", "edges[-1]"), concrete[0], concrete[-1], edges.dtype)
    return edges


def _edges(atoms: jax.Array) -> jax.Array:
    """The bins' ``K + 1`` edges: midway between atoms, and half a bin beyond the end atoms."""
    first = atoms[..., :1] - (atoms[..., 1:2] - atoms[..., :1]) / 2
    last = atoms[..., -1:] + (atoms[..., -1:] - atoms[..., -2:-1]) / 2
    middle = atoms[..., 1:] / 2 + atoms[..., :-1] / 2  # never overflows, rounds as (a + b) / 2
    return jnp.concatenate([first, middle, last], axis=-1)


def decode_probs(probs, support: Support) -> jax.Array:
    r"""The value of a distribution: its expected atom :math:`\sum_k p_k z_k`, in target units.

    In ``"symlog"`` space, :math:`\operatorname{symexp}(\sum_k p_k z_k)`.
    """
    probs = checks.as_floating("probs", probs)
    _check_atoms_axis("probs", probs, support)
    _check_batch("probs", probs.shape[:-1], support)
    return _decode(probs, support)


@jax.jit
def _decode(probs: jax.Array, support: Support) -> jax.Array:
    return support.decode(jnp.sum(probs * aligned(support.atoms, probs.ndim - 1), axis=-1))


def decode_logits(logits, support: Support) -> jax.Array:
    r"""The value of logits: :func:`decode_probs` of their softmax (stable for large logits).

    Logits narrower than float32 (bfloat16, float16) are decoded in float32.

    Example:
      >>> import numpy as np
      >>> import rewardnorm_jax as rn
      >>> support = rn.uniform_support(0.0, 4.0, 5)
      >>> float(rn.decode_logits(np.log(rn.two_hot(2.25, support) + 1e-30), support))
      2.25
    """
    logits = _wide(checks.as_floating("logits", logits))
    _check_atoms_axis("logits", logits, support)
    _check_batch("logits", logits.shape[:-1], support)
    return _decode_logits(logits, support)


@jax.jit
def _decode_logits(logits: jax.Array, support: Support) -> jax.Array:
    return _decode(jax.nn.softmax(logits, axis=-1), support)


def categorical_cross_entropy(logits, targets, *, reduction: str = "mean", weights=None):
    r"""The cross-entropy :math:`-\sum_k t_k \log \operatorname{softmax}(\ell)_k` of each row.

    The target distributions are constants (no gradient flows into them), as
    a critic's targets are. Logits narrower than float32 are computed in
    float32.

    Args:
      logits: ``(..., K)`` the critic's logits.
      targets: ``(..., K)`` target distributions (:func:`two_hot`,
        :func:`hl_gauss`, :func:`~rewardnorm_jax.categorical_projection`).
      reduction: ``"mean"`` (over the rows, weighted by ``weights``),
        ``"sum"`` or ``"none"`` (one loss per row, times its weight).
      weights: optional ``(...)``: each row's weight, >= 0 (bools or 0/1 to
        leave rows out); the mean divides by their sum (0 where it is 0).
        Concrete weights that are negative or not finite are refused; traced
        ones make the loss NaN, in every reduction (:ref:`traced-input`).

    Example:
      >>> import numpy as np
      >>> import rewardnorm_jax as rn
      >>> targets = rn.two_hot(np.array([0.5, 3.0]), rn.uniform_support(0.0, 4.0, 5))
      >>> loss = rn.categorical_cross_entropy(np.zeros((2, 5)), targets)
      >>> round(float(loss), 4)  # log 5, for uniform logits
      1.6094
    """
    checks.check_choice("reduction", reduction, REDUCTIONS)
    logits = _wide(checks.as_floating("logits", logits))
    if logits.ndim == 0:
        raise ValueError("logits is a scalar; pass (..., K): one logit per atom.")
    targets = jax.lax.stop_gradient(checks.as_floating("targets", targets))
    if targets.shape != logits.shape:
        raise ValueError(
            f"targets has shape {targets.shape}; expected the logits' shape {logits.shape}."
        )
    if weights is not None:
        weights = checks.as_weights("weights", weights, logits.dtype)
        if weights.shape != logits.shape[:-1]:
            raise ValueError(f"weights has shape {weights.shape}; expected {logits.shape[:-1]}.")
    return _cross_entropy(logits, targets, weights, reduction)


@functools.partial(jax.jit, static_argnums=3)
def _cross_entropy(logits, targets, weights, reduction: str) -> jax.Array:
    """:func:`categorical_cross_entropy` of checked inputs."""
    log_probs = jax.nn.log_softmax(logits, axis=-1)
    # A target of exactly 0 contributes 0, even where its log-probability is -inf.
    losses = -jnp.sum(jnp.where(targets == 0, 0, targets * log_probs), axis=-1)
    if weights is not None:
        if reduction == "mean":
            # The mean is scale invariant: scaled by the power of two that brings the largest
            # into [1, 2) (exactly), weights of any total sum without overflow.
            weights = weights * (2 * power_of_two(jnp.max(weights, initial=0)))
        losses = jnp.where(weights != 0, losses * weights, 0)
    if reduction == "none":
        return losses
    total = jnp.sum(losses)
    if reduction == "sum":
        return total
    count = losses.size if weights is None else jnp.sum(weights)
    # No rows weigh anything: 0. A NaN count (a traced invalid weight) gives NaN.
    return jnp.where(count != 0, total / jnp.where(count != 0, count, 1), 0)


def bracket(atoms: jax.Array, y: jax.Array, *, uniform: bool) -> tuple[jax.Array, jax.Array]:
    """Each ``y``'s bracketing atoms: the index ``i`` below, the fraction of the way to ``i + 1``.

    ``0 <= i <= K - 2``, ``y`` clipped to the end atoms first. ``atoms`` is
    ``(K,)`` or ``(B, K)`` with ``y`` of shape ``(B, ...)``; ``uniform``:
    they are evenly spaced (the index is computed, not searched).
    """
    find = _index_between_uniform if uniform else _index_by_search
    if atoms.ndim == 1:
        below = find(atoms, y)
        lower, upper = atoms[below], atoms[below + 1]
    else:
        batch = atoms.reshape(-1, atoms.shape[-1])
        flat = y.reshape(batch.shape[0], -1)
        below = jax.vmap(find)(batch, flat)
        lower = jnp.take_along_axis(batch, below, axis=-1).reshape(y.shape)
        upper = jnp.take_along_axis(batch, below + 1, axis=-1).reshape(y.shape)
        below = below.reshape(y.shape)
    return below, (_clip(y, lower, upper) - lower) / (upper - lower)


def _index_by_search(atoms: jax.Array, y: jax.Array) -> jax.Array:
    """The last ``i <= K - 2`` with ``atoms[i] <= y`` (0 below the support): a binary search."""
    return jnp.searchsorted(atoms[1:-1], y, side="right")


def _index_between_uniform(atoms: jax.Array, y: jax.Array) -> jax.Array:
    r""":func:`_index_by_search`'s index for evenly spaced atoms, in :math:`O(1)` per value.

    :math:`\lfloor (y - z_1) (K - 1) / (z_K - z_1) \rfloor` is off by at most
    one where the atoms' rounding or the quotient's moves ``y`` across an
    atom; one comparison with each neighbour corrects it.
    """
    last = atoms.shape[-1] - 2
    place = (y - atoms[0]) * ((atoms.shape[-1] - 1) / (atoms[-1] - atoms[0]))
    # Clipped before the conversion (NaN to 0, infinities to the ends): always a valid index.
    below = jnp.floor(jnp.minimum(jnp.where(place > 0, place, 0), last)).astype(jnp.int32)
    below = jnp.where((below > 0) & (y < atoms[below]), below - 1, below)
    return jnp.where((below < last) & (y >= atoms[below + 1]), below + 1, below)


def aligned(atoms: jax.Array, ndim: int) -> jax.Array:
    """Per-target atoms ``(B..., K)`` shaped to broadcast against values of ``ndim`` axes.

    The values' leading axes are ``B...``; shared atoms ``(K,)`` stay as they are.
    """
    batch = atoms.shape[:-1]
    return atoms.reshape(*batch, *(1,) * (ndim - len(batch)), atoms.shape[-1])


def _clip(y: jax.Array, lower: jax.Array, upper: jax.Array) -> jax.Array:
    """``y`` clipped to ``[lower, upper]``, with a gradient of 1 at either end.

    ``jnp.clip`` splits it in halves there, so that a target on an atom would
    move its mass half as fast as one beside it.
    """
    return jnp.where(y < lower, lower, jnp.where(y > upper, upper, y))


def _spread(below: jax.Array, weight: jax.Array, num_atoms: int) -> jax.Array:
    """``1 - weight`` on atom ``below`` and ``weight`` on the next one, as a ``(..., K)`` row."""
    index = jnp.arange(num_atoms)
    lower = (index == below[..., None]).astype(weight.dtype)
    upper = (index == below[..., None] + 1).astype(weight.dtype)
    row = lower * (1 - weight[..., None]) + upper * weight[..., None]
    # A NaN weight (a NaN target) makes the whole row NaN: compiled, the products
    # above become selects, which would leave the other atoms at 0.
    return jnp.where(jnp.isnan(weight)[..., None], jnp.nan, row)


def _targets(targets, support: Support) -> jax.Array:
    """``targets`` as floats of the support's dtype, of a shape its atoms fit."""
    if not isinstance(support, Support):
        raise TypeError(
            f"support should be a Support (uniform_support, symlog_support, support), got "
            f"{type(support).__name__}."
        )
    targets = jnp.asarray(checks.check_reward("targets", targets), support.atoms.dtype)
    _check_batch("targets", targets.shape, support)
    return targets


def _check_batch(name: str, shape: tuple[int, ...], support: Support) -> None:
    """Per-target atoms ``(B..., K)`` pair with the leading axes ``B...`` of ``name``."""
    batch = support.atoms.shape[:-1]
    if batch and shape[: len(batch)] != batch:
        raise ValueError(
            f"{name} has shape {shape}, but the support holds atoms of shape "
            f"{support.atoms.shape}: one support per target, so {name}'s leading axes "
            f"should be {batch}."
        )


def _check_atoms_axis(name: str, values: jax.Array, support: Support) -> None:
    if values.ndim == 0 or values.shape[-1] != support.num_atoms:
        raise ValueError(
            f"{name} has shape {values.shape}; expected {support.num_atoms} entries along the "
            "last axis, one per atom."
        )


def _check_bounds(lower, upper, dtype) -> None:
    """Bounds of one shape; concrete ones finite, ``lower < upper``, their distance finite."""
    checks.check_reward("lower", lower)
    checks.check_reward("upper", upper)
    if checks.broadcast_shape(jnp.shape(lower), jnp.shape(upper)) is None:
        raise ValueError(
            f"lower has shape {jnp.shape(lower)} and upper {jnp.shape(upper)}: they should "
            "broadcast to one shape (the shape of the supports, one per task or per target)."
        )
    if isinstance(lower, jax.core.Tracer) or isinstance(upper, jax.core.Tracer):
        return
    low, high = np.asarray(lower), np.asarray(upper)
    checks.refuse_where("lower", low, ~np.isfinite(low), "finite bounds")
    checks.refuse_where("upper", high, ~np.isfinite(high), "finite bounds")
    if np.any(~(np.broadcast_to(low, np.broadcast_shapes(low.shape, high.shape)) < high)):
        raise ValueError(f"lower should be < upper, got lower={lower!r}, upper={upper!r}.")
    _check_width(("lower", "upper"), low, high, dtype)


def _check_width(names: tuple[str, str], lower, upper, dtype) -> None:
    """Raises a ValueError where ``upper - lower`` overflows ``dtype``: the atoms' spacing would."""
    with np.errstate(over="ignore"):
        width = np.asarray(upper, dtype) - np.asarray(lower, dtype)
    if np.isinf(width).any():
        index = tuple(np.argwhere(np.isinf(width))[0])
        first, last = (float(np.broadcast_to(x, width.shape)[index]) for x in (lower, upper))
        largest = float(jnp.finfo(dtype).max)
        raise ValueError(
            f"{names[0]}={first:.4g} and {names[1]}={last:.4g} are {last - first:.4g} apart, "
            f"more than the largest {np.dtype(dtype).name} number ({largest:.4g}): the atoms' "
            "spacing and each target's place between them would overflow. Expected bounds at "
            f"most {largest:.4g} apart (a support [-b, b] with b <= {largest / 2:.4g})"
            + (", or dtype=float64." if largest < 1e300 else ".")
        )


def _nan_unless_valid(atoms: jax.Array) -> jax.Array:
    """Traced atoms, NaN in each support that is not strictly increasing with a finite width."""
    increasing = jnp.all(atoms[..., 1:] > atoms[..., :-1], axis=-1)
    valid = increasing & jnp.isfinite(atoms[..., -1] - atoms[..., 0])
    return jnp.where(valid[..., None], atoms, jnp.nan)


def _wide(values: jax.Array) -> jax.Array:
    """Values narrower than float32 as float32."""
    return values.astype(jnp.promote_types(values.dtype, jnp.float32))
