"""The library's loss aggregation as a function of Tunix's ``aggregate_loss`` signature."""

from collections.abc import Callable

import jax

from rewardnorm_jax._src.core import checks
from rewardnorm_jax._src.llm import AGGREGATIONS, aggregate_loss


def tunix_aggregator(convention: str = "tunix") -> Callable[..., jax.Array]:
    """``fn(per_token_loss, completion_mask, loss_agg_mode, norm=None)``: the library's aggregation.

    The signature of ``tunix.rl.common.aggregate_loss``, which Tunix's ``grpo``
    policy loss calls with its config's ``loss_agg_mode``, read in
    ``convention``'s spelling: ``"tunix"`` gives Tunix's numbers (its newest
    ``sequence-mean-token-sum-norm``, which divides by the rows), ``"trl"``
    lets ``GRPOConfig(loss_agg_mode="dapo")`` aggregate as TRL does, and so on
    (see :func:`rewardnorm_jax.aggregate_loss`). Tunix's ``norm`` is the
    ``length`` of the modes that divide by one, the ``count`` of those that
    divide by the rows (``sequence-mean-token-sum-norm``), and ignored by the
    others, as Tunix ignores it.

    Args:
      convention: a convention of :func:`rewardnorm_jax.aggregate_loss`.

    Returns:
      The function, to stand in for ``tunix.rl.common.aggregate_loss``.

    Raises:
      ValueError: for an unknown convention; the function raises for a mode
        the convention does not have, and for Tunix's packed sequences
        (``segment_ids``).

    Example:
      >>> import numpy as np
      >>> from rewardnorm_jax.tunix import tunix_aggregator
      >>> aggregate = tunix_aggregator("trl")
      >>> losses, mask = np.array([[1.0, 3.0], [2.0, 0.0]]), np.array([[1, 1], [1, 0]])
      >>> aggregate(losses, mask, "dapo").item()  # (1 + 3 + 2) / 3 tokens
      2.0
    """
    checks.check_choice("convention", convention, tuple(AGGREGATIONS))

    def aggregate(per_token_loss, completion_mask, loss_agg_mode, norm=None, **kwargs):
        if kwargs:
            raise ValueError(
                f"the library aggregates rows, one sequence each: got {', '.join(kwargs)} "
                "(packed sequences)."
            )
        divisor = AGGREGATIONS[convention].modes.get(loss_agg_mode)
        named = {}
        if norm is not None and divisor is not None:  # an unknown mode: the library's message
            if divisor.length:
                named["length"] = norm
            elif divisor.count == "rows":
                named["count"] = norm
        return aggregate_loss(
            per_token_loss, completion_mask, loss_agg_mode, convention=convention, **named
        )

    return aggregate
