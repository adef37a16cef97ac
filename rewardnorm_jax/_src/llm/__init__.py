"""RL on language models: group-relative advantages and the per-token terms of the loss.

The rewards of G answers per prompt, each against its group
(:mod:`~rewardnorm_jax._src.llm.advantages`, on a :mod:`~rewardnorm_jax._src.llm.layout`
of the batch, :mod:`~rewardnorm_jax._src.llm.moments` and the trainers'
:mod:`~rewardnorm_jax._src.llm.conventions`), masked whitening, the KL estimate
and penalty, the overlong penalty, and the aggregation of per-token losses into the loss
(:mod:`~rewardnorm_jax._src.llm.aggregation`).
"""

from rewardnorm_jax._src.llm.advantages import (
    GroupAdvantageEstimator,
    GroupAdvantages,
    group_advantages,
)
from rewardnorm_jax._src.llm.aggregation import AGGREGATIONS, aggregate_loss, aggregation_count
from rewardnorm_jax._src.llm.conventions import CONVENTIONS
from rewardnorm_jax._src.llm.kl import kl_estimate, kl_penalized_rewards
from rewardnorm_jax._src.llm.overlong import overlong_penalty
from rewardnorm_jax._src.llm.whiten import masked_whiten

__all__ = [
    "AGGREGATIONS",
    "CONVENTIONS",
    "GroupAdvantageEstimator",
    "GroupAdvantages",
    "aggregate_loss",
    "aggregation_count",
    "group_advantages",
    "kl_estimate",
    "kl_penalized_rewards",
    "masked_whiten",
    "overlong_penalty",
]
