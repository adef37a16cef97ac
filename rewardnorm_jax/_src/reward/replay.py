r"""Rewards sampled from a replay buffer, transformed with the current statistics.

Off-policy learners (SAC, TD3) store transitions and train on samples drawn
later. A normalizer for them learns its statistics from the collection stream
(the transform's ``step`` or ``update`` on every environment step, as an
adapter's wrapper does) and normalizes each sampled batch when it is drawn,
with the statistics of that moment, so old transitions are rescaled as the
statistics move (rejax, FastTD3). The buffer keeps the raw rewards.
"""

import jax
import jax.numpy as jnp

from rewardnorm_jax._src.core import adapter, base


def apply_sampled(
    transform: base.RewardTransform,
    state: base.PyTree,
    reward: jax.typing.ArrayLike,
    task: base.TaskIds | None = None,
) -> jax.Array:
    r"""Transforms rewards of any shape (a replay sample) with the statistics in ``state``.

    ``transform.apply`` expects rewards of the shape the state was
    initialised with (the collecting batch); a replay sample has another shape.
    This is ``transform.apply`` on a state of the sample's shape holding the
    statistics of ``state`` (its tracked returns play no part in normalizing).
    For :func:`~rewardnorm_jax.normalize_reward`:

    .. math::
      \tilde r_j = \frac{r_j}{\max\big(\sqrt{\sigma^2 + \epsilon},\; M / g_{max}\big)}

    with :math:`\sigma^2` the running variance of the discounted return and,
    with ``g_max``, :math:`M` the running maximum of :math:`|G|` (without
    ``g_max`` the divisor is :math:`\sqrt{\sigma^2 + \epsilon}`). Nothing is
    learned: the statistics come from the collection stream.

    Args:
      transform: the transform that learned ``state``, e.g.
        ``rn.normalize_reward(0.99, g_max=10.0)``.
      state: its state (e.g. ``get_transform_state`` of an adapter's
        environment state), with statistics shared by the environments
        (the default statistics), one set or one per task.
      reward: raw rewards of any shape, e.g. ``(batch,)`` sampled transitions.
      task: for a keyed transform (``Statistics(num_tasks=K)``), each sampled reward's
        own task id, stored with the transition (the reward's shape, or a
        leading part of it); each reward is normalized by its task's
        statistics. ``None`` for any other transform.

    Returns:
      The transformed rewards, of ``reward``'s shape.

    Raises:
      ValueError: if ``transform`` is no :class:`~rewardnorm_jax.RewardTransform`,
        or its statistics are kept per environment (``Statistics(per_env=True)``: a
        sampled reward has no environment), or ``state`` is not a state of
        ``transform``; for a keyed transform without ``task`` (or ``task``
        for one that is not keyed), or ids outside ``[0, K)``.

    Example:
      >>> import rewardnorm_jax as rn
      >>> norm = rn.normalize_reward(0.99, g_max=10.0)
      >>> state = norm.init(4)   # four collecting environments
      >>> for _ in range(3):
      ...     _, state = norm.step(state, jnp.ones(4))
      >>> sampled = jnp.array([1.0, 0.5, 1.0, 0.0, 2.0, 1.0])  # six replayed rewards
      >>> [round(float(r), 3) for r in rn.apply_sampled(norm, state, sampled)]
      [1.243, 0.622, 1.243, 0.0, 2.487, 1.243]

    With per-task statistics, each sample carries its task:

      >>> keyed = rn.normalize_reward(0.99, statistics=rn.Statistics(num_tasks=2))
      >>> state = keyed.init(2)
      >>> _, state = keyed.step(state, jnp.array([1.0, 100.0]), task=jnp.array([0, 1]))
      >>> out = rn.apply_sampled(keyed, state, jnp.array([100.0, 1.0]), jnp.array([1, 0]))
      >>> [round(float(r), 1) for r in out]   # 100 / sqrt(1.0001), 1 / sqrt(2e-4): each its task's
      [100.0, 70.7]

    References:
      FastTD3 (Seo et al., `FastTD3: Simple, Fast, and Capable Reinforcement
      Learning for Humanoid Control <https://arxiv.org/abs/2505.22642>`_, 2025),
      ``fast_td3_utils.RewardNormalizer``; SimbaV2 (Lee et al., 2025) for
      ``g_max``; rejax's off-policy reward normalization.
    """
    adapter.check_transform(transform)
    shape = jnp.shape(reward)
    fresh = transform.init(shape)
    try:
        sample_state = adapter.keep_stats(fresh, state)
    except ValueError as error:
        raise ValueError(
            f"apply_sampled: state does not fit rewards of shape {shape}: {error} "
            "A sampled batch is normalized with statistics shared by the environments "
            "(one set, or one per task: the default statistics, or rn.Statistics(num_tasks=K)) "
            "learned by this transform; statistics kept per environment "
            "(rn.Statistics(per_env=True)) have none for a sampled reward."
        ) from None
    return transform.apply(sample_state, reward, task=task)
