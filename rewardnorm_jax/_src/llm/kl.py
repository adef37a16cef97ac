r"""The KL penalty in the reward: per-token estimates of KL(policy || reference).

With :math:`\delta_t = \log \pi(a_t) - \log \pi_\text{ref}(a_t)` the log ratio
of a sampled token (Schulman, `Approximating KL divergence
<http://joschu.net/blog/kl-approx.html>`_, 2020):

.. math::

    k_1 = \delta, \qquad |k_1| = |\delta|, \qquad
    k_2 = \tfrac12 \delta^2, \qquad
    k_3 = e^{-\delta} - 1 + \delta

and the penalized reward is :math:`r_t - \beta\, k_t` on the response tokens.
``k3`` is computed as :math:`\operatorname{expm1}(-\delta) + \delta`, by its
Taylor series where :math:`|\delta| < 1/2`: the trainers' float32
``exp(d) - d - 1`` is off by 5% at :math:`|\delta| = 10^{-3}` and by 100% at
:math:`10^{-4}`, where a policy close to its reference sits
(``benchmarks/float32_residue.py``); the library's is within 3e-7 (two or three ulps).

A name ending in ``+`` (verl's ``k3+``) keeps the estimate's value and takes
the gradient of ``k2`` (straight-through), whose expected gradient is the KL's.
"""

import dataclasses
import math

import jax
import jax.numpy as jnp

from rewardnorm_jax._src.core import checks

KL_ESTIMATORS = ("k1", "abs", "k2", "k3", "k1+", "abs+", "k3+")
"""Every estimator; ``+``: the value of the one named, the gradient of ``k2``."""

SERIES_LIMIT = 1.0
r"""Below this :math:`|\delta|`, ``k3`` sums its Taylor series."""
_TERMS = tuple(1 / math.factorial(k) for k in range(2, 21))  # to within float64 below 1


@dataclasses.dataclass(frozen=True)
class KLConvention:
    r"""One trainer's KL estimators and clamps.

    Attributes:
      estimators: the estimators the trainer has.
      clip: the symmetric clamp of every estimate (``None``: none).
      k3_log_ratio_clip: ``k3`` clamps :math:`\delta` to this before its
        exponential, and its own estimate to ``k3_clip`` (verl).
      k3_clip: see ``k3_log_ratio_clip``.
      weighs: what a mask's weight multiplies: ``"estimate"`` (verl's ``kld *
        response_mask``) or ``"log_ratio"`` (OpenRLHF's ``compute_approx_kl``).
    """

    name: str
    estimators: tuple[str, ...]
    clip: float | None = None
    k3_log_ratio_clip: float | None = None
    k3_clip: float | None = None
    weighs: str = "estimate"


KL_CONVENTIONS = {
    convention.name: convention
    for convention in (
        KLConvention("exact", KL_ESTIMATORS),
        KLConvention("verl", KL_ESTIMATORS, k3_log_ratio_clip=20.0, k3_clip=10.0),
        KLConvention("openrlhf", ("k1", "k2", "k3"), clip=10.0, weighs="log_ratio"),
        KLConvention("tunix", ("k1", "k2", "k3")),
    )
}
"""The KL conventions by name: the library's ``"exact"`` (no clamp) and one per trainer."""


def kl_estimate(
    log_probs,
    ref_log_probs,
    mask=None,
    *,
    estimator: str = "k1",
    convention: str = "exact",
    clip: float | None = None,
) -> jax.Array:
    r"""Per-token estimates of KL(policy || reference), weighted by ``mask``; 0 where it is 0.

    Conventions:

    * ``"exact"`` (default): every estimator, no clamp;
    * ``"verl"`` (``kl_penalty``; ``kl``, ``low_var_kl``, ``mse`` name ``k1``,
      ``k3``, ``k2``): every estimator; ``k3`` clamps :math:`\delta` to
      :math:`\pm 20` and its estimate to :math:`\pm 10`;
    * ``"openrlhf"`` (``compute_approx_kl``): ``k1``, ``k2``, ``k3``, each
      clamped to :math:`\pm 10`;
    * ``"tunix"`` (``compute_kl_divergence``; ``kl``, ``mse_kl``,
      ``low_var_kl``): ``k1``, ``k2``, ``k3``, no clamp (its ``clamp_value``
      is ``clip``).

    Args:
      log_probs: the policy's log-probabilities of the sampled tokens, real,
        any shape (computed in float32 at least).
      ref_log_probs: the reference policy's, of the same shape.
      mask: the positions that count (response tokens), bool or 0/1, or a
        weight >= 0 per position, of the same shape; ``None``: all. Positions
        of weight 0 give 0, whatever they hold (``-inf`` padding included),
        with a gradient of 0. A weight multiplies the estimate (OpenRLHF's
        convention: the log ratio, before the estimator), as the trainers
        multiply by their masks, concrete or traced alike; a concrete weight
        that is negative or not finite is refused, a traced one gives NaN.
      estimator: one of :data:`KL_ESTIMATORS`.
      convention: ``"exact"``, ``"verl"``, ``"openrlhf"`` or ``"tunix"``.
      clip: a symmetric clamp of every estimate (Tunix's ``clamp_value``),
        in place of OpenRLHF's :math:`\pm 10`; verl's ``k3`` clamps apply
        too. ``None``: the convention's clamps alone.

    Returns:
      The estimates, of ``log_probs``' shape and floating dtype.

    Examples:
      >>> import numpy as np
      >>> import rewardnorm_jax as rn
      >>> logp, ref = np.array([-1.0, -2.0]), np.array([-1.0 - 2**-10, -1.0])
      >>> k3 = rn.kl_estimate(logp, ref, estimator="k3")  # d^2 / 2 - d^3 / 6 ... and e - 2
      >>> [f"{value:.6g}" for value in k3.tolist()]
      ['4.76682e-07', '0.718282']
    """
    rules = _convention(convention, estimator)
    clip = rules.clip if clip is None else _check_clip(clip)
    log_probs, ref_log_probs, weights = _check_inputs(log_probs, ref_log_probs, mask)
    kept = weights != 0
    # The inputs at masked-out positions are replaced before any arithmetic, so that
    # neither their values nor their gradients can be NaN.
    log_ratio = jnp.where(kept, log_probs, 0) - jnp.where(kept, ref_log_probs, 0)
    if rules.weighs == "log_ratio":
        log_ratio = log_ratio * weights
    value = _estimate(rules, estimator.rstrip("+"), log_ratio, clip)
    if clip is not None:
        value = jnp.clip(value, -clip, clip)
    if estimator.endswith("+"):  # the value of the estimate, the gradient of k2
        k2 = 0.5 * log_ratio * log_ratio
        # value + (k2 - k2) in this order keeps the value exactly (and an infinite one).
        value = jax.lax.stop_gradient(value) + jnp.where(
            jnp.isfinite(k2), k2 - jax.lax.stop_gradient(k2), 0
        )
    if rules.weighs == "estimate":
        value = value * weights
    return jnp.where(kept, value, 0)


def kl_penalized_rewards(
    rewards,
    log_probs,
    ref_log_probs,
    mask=None,
    *,
    beta: float,
    estimator: str = "k1",
    convention: str = "exact",
    clip: float | None = None,
) -> jax.Array:
    r"""Token rewards minus :math:`\beta` times the KL estimate, on the masked-in tokens.

    :math:`r_t - \beta m_t k_t` with :math:`m_t` the mask (a weight, or 0/1), as
    verl's ``apply_kl_penalty`` (``token_level_scores - beta * kld *
    response_mask``) and OpenRLHF's ``compute_reward`` compute it; ``beta``
    is fixed, as Tunix's and verl's defaults are. The options are those of
    :func:`kl_estimate`.

    Args:
      rewards: token rewards (the sequence's score at its last token, 0
        elsewhere), real, of ``log_probs``' shape or broadcastable to it.
      log_probs: see :func:`kl_estimate`.
      ref_log_probs: see :func:`kl_estimate`.
      mask: see :func:`kl_estimate`.
      beta: the KL coefficient, finite and >= 0; it may be traced (a schedule: a traced
        value out of range gives NaN).
      estimator: see :func:`kl_estimate`.
      convention: see :func:`kl_estimate`.
      clip: see :func:`kl_estimate`.

    Returns:
      The penalized rewards, of ``log_probs``' shape.

    Examples:
      >>> import numpy as np
      >>> import rewardnorm_jax as rn
      >>> rewards = np.array([[0.0, 1.0, 0.0]])
      >>> logp, ref = np.array([[-1.0, -0.5, -np.inf]]), np.array([[-1.5, -0.5, -2.0]])
      >>> penalized = rn.kl_penalized_rewards(rewards, logp, ref, [[1, 1, 0]], beta=0.1)
      >>> print(np.asarray(penalized).round(6))
      [[-0.05  1.    0.  ]]
    """
    kl = kl_estimate(
        log_probs, ref_log_probs, mask, estimator=estimator, convention=convention, clip=clip
    )
    rewards = checks.as_floating("rewards", rewards)
    same_rank = rewards.ndim == kl.ndim  # (B,) against (B, T) would spread along tokens
    if not same_rank or checks.broadcast_shape(rewards.shape, kl.shape) != kl.shape:
        raise ValueError(
            f"rewards has shape {rewards.shape}, which does not broadcast to the log "
            f"probabilities' shape {kl.shape} with as many axes."
        )
    dtype = jnp.promote_types(rewards.dtype, kl.dtype)
    return rewards.astype(dtype) - _checked_beta(beta, dtype) * kl.astype(dtype)


def _estimate(rules: KLConvention, name: str, log_ratio: jax.Array, clip) -> jax.Array:
    if name == "k1":
        return log_ratio
    if name == "abs":
        return jnp.abs(log_ratio)
    if name == "k2":
        return 0.5 * log_ratio * log_ratio
    delta = -log_ratio  # k3 = exp(d) - d - 1, d = log ref - log policy
    if rules.k3_log_ratio_clip is not None:
        delta = jnp.clip(delta, -rules.k3_log_ratio_clip, rules.k3_log_ratio_clip)
    if clip is not None:
        # Where k3 >= clip the clamp gives clip whatever delta is: capping delta there
        # keeps exp(delta) finite, and the clamp's zero gradient from meeting an inf.
        delta = jnp.minimum(delta, max(1.0, math.log(clip) + 2))
    value = _expm1_minus_identity(delta)
    if rules.k3_clip is not None:
        value = jnp.clip(value, -rules.k3_clip, rules.k3_clip)
    return value


def _expm1_minus_identity(d: jax.Array) -> jax.Array:
    """:math:`e^d - 1 - d` to within a few ulps: its Taylor series below :data:`SERIES_LIMIT`."""
    small = jnp.abs(d) < SERIES_LIMIT
    near = jnp.where(small, d, 0)  # each branch sees inputs it is accurate and finite on
    far = jnp.where(small, SERIES_LIMIT, d)
    series = jnp.zeros_like(d)
    for term in reversed(_TERMS):  # Horner: d^2 (1/2! + d (1/3! + d (...)))
        series = series * near + term
    return jnp.where(small, series * near * near, jnp.expm1(far) - far)


def _convention(convention, estimator) -> KLConvention:
    rules = KL_CONVENTIONS[checks.check_choice("convention", convention, tuple(KL_CONVENTIONS))]
    if not (isinstance(estimator, str) and estimator in rules.estimators):
        raise ValueError(
            f"estimator should be one of {', '.join(map(repr, rules.estimators))} under "
            f"convention={convention!r}, got estimator={estimator!r}"
            + ("." if convention == "exact" else " (convention='exact' has them all).")
        )
    return rules


def _checked_beta(beta, dtype) -> jax.Array:
    """``beta`` as a scalar of ``dtype``; a traced one (an annealed beta) out of range is NaN."""
    if isinstance(beta, jax.core.Tracer):
        if beta.shape != ():
            raise ValueError(
                f"beta should be a scalar (one coefficient for every token), got a traced "
                f"beta of shape {beta.shape}."
            )
        beta = jnp.asarray(beta, dtype)
        return jnp.where((beta >= 0) & jnp.isfinite(beta), beta, jnp.nan)
    if not (checks.is_real(beta, "beta") and math.isfinite(beta) and beta >= 0):
        raise ValueError(f"beta should be a finite number >= 0, got beta={beta!r}.")
    checks.check_fits("beta", float(beta), dtype)
    return jnp.asarray(beta, dtype)


def _check_clip(clip) -> float:
    if not (checks.is_real(clip, "clip") and clip > 0 and not math.isnan(clip)):
        raise ValueError(f"clip should be None or a number > 0, got clip={clip!r}.")
    return float(clip)


def _check_inputs(log_probs, ref_log_probs, mask):
    log_probs = checks.as_floating("log_probs", log_probs)
    ref_log_probs = checks.as_floating("ref_log_probs", ref_log_probs)
    if ref_log_probs.shape != log_probs.shape:
        raise ValueError(
            f"ref_log_probs has shape {ref_log_probs.shape}; expected log_probs' shape "
            f"{log_probs.shape}."
        )
    dtype = jnp.promote_types(log_probs.dtype, ref_log_probs.dtype)
    if mask is None:
        mask = jnp.ones(log_probs.shape, bool)
    weights = checks.as_weights("mask", mask, dtype)
    if weights.shape != log_probs.shape:
        raise ValueError(
            f"mask has shape {weights.shape}; expected log_probs' shape {log_probs.shape}."
        )
    return log_probs.astype(dtype), ref_log_probs.astype(dtype), weights
