r"""The C51 projection: a Bellman target distribution moved onto a fixed support.

A distributional critic's target for a transition is the next state's
distribution over atoms :math:`z_j`, with probabilities :math:`p_j`, moved to
:math:`r + \gamma_t z_j` (:math:`\gamma_t = \gamma (1 - \text{terminated})`, a
discount per sample). Those points fall between the atoms of the support, so
each one's mass is split between the two atoms around it, linearly (Bellemare
et al., 2017): the two-hot split of :mod:`~rewardnorm_jax._src.value.categorical`,
applied to every moved atom and summed,

.. math::

    q_i = \sum_j p_j \, h_i\big(\operatorname{clip}(r + \gamma_t z_j, z_1, z_K)\big),

:math:`h_i` the two-hot weight of atom :math:`i`. This is the projection that
minimises the Cramér distance (rlax's ``categorical_l2_project``), computed in
:math:`O(K)` memory per sample, where rlax builds a :math:`K \times K` matrix:
each moved atom's two neighbours are found (by its place between the end atoms
on a uniform support, :math:`O(1)`, so :math:`O(K)` work per sample; by a
binary search on any other support, :math:`O(K \log K)`), and its two weights
scattered onto them. The mass is conserved
(to float rounding), a moved atom that lands on an atom gives it all its mass,
and the expected value is :math:`r + \gamma_t \sum_j p_j z_j` wherever no moved
atom is clipped.
"""

import math

import jax
import jax.numpy as jnp

from rewardnorm_jax._src.core import checks
from rewardnorm_jax._src.value.categorical import Support, aligned, bracket


def categorical_projection(
    probs,
    support: Support,
    *,
    rewards=0.0,
    discounts=1.0,
    source_support: Support | None = None,
) -> jax.Array:
    r"""``probs`` moved to ``rewards + discounts * atoms`` and projected onto ``support``.

    Args:
      probs: ``(..., K')`` the next state's probabilities (a softmax of the
        target network's logits), over ``source_support``'s atoms.
      support: the :class:`~rewardnorm_jax.Support` to project onto; its atoms
        ``(K,)``, or ``(..., K)`` one per sample (per-task bounds).
      rewards: ``(...)`` or a scalar: each sample's reward.
      discounts: ``(...)`` or a scalar, finite and >= 0: each sample's discount,
        :math:`\gamma (1 - \text{terminated})` (0 at a terminal step; a
        truncated step bootstraps from its final observation, with
        :math:`\gamma`). Concrete ones out of range are refused; traced ones
        give a row of NaN (:ref:`traced-input`).
      source_support: the atoms ``probs`` is over; ``None``: ``support``'s
        (a support whose bounds moved is re-projected so, with
        ``rewards=0`` and ``discounts=1``).

    Returns:
      ``(..., K)`` probabilities over ``support``'s atoms, in their dtype; a row
      of NaN where the reward, the discount, a probability or an atom is NaN.

    Example:
      >>> import numpy as np
      >>> import rewardnorm_jax as rn
      >>> support = rn.uniform_support(-2.0, 2.0, 5)
      >>> next_probs = np.array([0.0, 0.0, 1.0, 0.0, 0.0])  # all the mass at 0
      >>> rn.categorical_projection(next_probs, support, rewards=0.5, discounts=0.9).tolist()
      [0.0, 0.0, 0.5, 0.5, 0.0]
    """
    source = support if source_support is None else source_support
    for name, value in (("support", support), ("source_support", source)):
        if not isinstance(value, Support):
            raise TypeError(f"{name} should be a Support, got {type(value).__name__}.")
    dtype = support.atoms.dtype
    probs = jnp.asarray(checks.as_floating("probs", probs), dtype)
    if probs.ndim == 0 or probs.shape[-1] != source.num_atoms:
        raise ValueError(
            f"probs has shape {probs.shape}; expected {source.num_atoms} probabilities along "
            "the last axis, one per atom of the source support."
        )
    batch = probs.shape[:-1]
    rewards = _per_sample("rewards", rewards, batch, dtype)
    discounts = _per_sample("discounts", discounts, batch, dtype)
    if not isinstance(discounts, jax.core.Tracer):
        bad = ~(discounts >= 0) | jnp.isinf(discounts)
        checks.refuse_where("discounts", discounts, bad, "finite discounts >= 0")
    for name, atoms in (("support", support.atoms), ("source_support", source.atoms)):
        if batch[: atoms.ndim - 1] != atoms.shape[:-1]:
            raise ValueError(
                f"probs has shape {probs.shape}, but {name} holds atoms of shape "
                f"{atoms.shape}: probs' leading axes should be {atoms.shape[:-1]}."
            )
    return _project(probs, support, source, rewards, discounts)


@jax.jit  # one program, also for calls outside jit
def _project(probs, support: Support, source: Support, rewards, discounts) -> jax.Array:
    """:func:`categorical_projection` of checked inputs, rewards and discounts per sample."""
    batch = probs.shape[:-1]
    moved = rewards[..., None] + discounts[..., None] * aligned(source.values, len(batch))
    atoms = support.atoms
    if atoms.ndim > 1:  # per-sample atoms, paired with the leading axes of the batch
        atoms = jnp.broadcast_to(aligned(atoms, len(batch)), (*batch, support.num_atoms))
    below, weight = bracket(atoms, support.encode(moved), uniform=support.uniform)
    projected = _scatter(below, weight, probs, support.num_atoms)
    # A NaN reward or probability makes its whole row NaN, not two of its atoms; so do a
    # traced discount out of range and traced atoms made NaN by their support.
    invalid = ~(discounts >= 0) | jnp.isinf(discounts) | jnp.isnan(rewards)
    invalid |= jnp.isnan(probs).any(axis=-1) | jnp.isnan(weight).any(axis=-1)
    return jnp.where(invalid[..., None], jnp.nan, projected)


def _scatter(below: jax.Array, weight: jax.Array, probs: jax.Array, num_atoms: int):
    """Each moved atom's mass, ``1 - weight`` onto atom ``below`` and ``weight`` onto the next."""
    batch = probs.shape[:-1]
    rows = jnp.arange(math.prod(batch))[:, None] * num_atoms
    flat_below = (below.reshape(-1, below.shape[-1]) + rows).reshape(-1)
    mass = probs.reshape(-1, probs.shape[-1])
    lower = (mass * (1 - weight.reshape(mass.shape))).reshape(-1)
    upper = (mass * weight.reshape(mass.shape)).reshape(-1)
    total = jnp.zeros(rows.shape[0] * num_atoms, probs.dtype)
    total = total.at[flat_below].add(lower).at[flat_below + 1].add(upper)
    return total.reshape(*batch, num_atoms)


def _per_sample(name: str, value, batch: tuple[int, ...], dtype) -> jax.Array:
    """``value`` broadcast to the batch's shape, as floats of ``dtype``."""
    value = jnp.asarray(checks.check_reward(name, value), dtype)
    if checks.broadcast_shape(value.shape, batch) != batch:
        raise ValueError(
            f"{name} has shape {value.shape}; expected a scalar or one per sample, of shape "
            f"{batch}."
        )
    return jnp.broadcast_to(value, batch)
