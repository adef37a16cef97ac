"""Tunix adapter (``import rewardnorm_jax.tunix``): the library's group advantages in Tunix.

Importing this subpackage registers the library's group-advantage estimators
in Tunix's registry (``tunix.rl.function_registry``), so that a
``GRPOConfig(advantage_estimator=name)`` picks them up:

* ``"rewardnorm_grpo"``, ``"rewardnorm_dr_grpo"``, ``"rewardnorm_batch_std"``,
  ``"rewardnorm_rloo"``: the library's ``"exact"`` convention (a constant
  group gives exactly 0);
* ``"rewardnorm_grpo_tunix"``, ``"rewardnorm_dr_grpo_tunix"``,
  ``"rewardnorm_rloo_tunix"``: Tunix's own convention (ddof 1, epsilon 1e-6),
  computed accurately.

``tunix_estimator(estimator, *, convention="exact", standardize_batch=False)``
builds such a function for a registration of one's own.

``tunix_aggregator(convention="tunix")`` is the library's loss aggregation
(:func:`rewardnorm_jax.aggregate_loss`) with the signature of
``tunix.rl.common.aggregate_loss``, which the learners' ``grpo`` policy loss
calls with their config's ``loss_agg_mode``.

The learner calls an estimator with ``rewards`` (one per answer, groups of
``num_generations`` consecutive answers) and ``num_generations`` only: no
masks, lengths or group ids. Estimators that need them (``opo``'s lengths,
ragged ids, token-level whitening) run in a loop of one's own, or in a
subclass of the learner that overrides the method that holds the completion
mask (``GRPOLearner._generate_and_compute_advantage`` in Tunix 0.1.7), with
:func:`rewardnorm_jax.group_advantages` and :func:`rewardnorm_jax.masked_whiten`.

Only this subpackage imports Tunix; the top-level package exports none of it.
"""

from rewardnorm_jax._src.core.extras import requires

with requires("tunix", __name__):
    from rewardnorm_jax.tunix._aggregation import tunix_aggregator
    from rewardnorm_jax.tunix._estimators import ESTIMATOR_NAMES, tunix_estimator

__all__ = ["ESTIMATOR_NAMES", "tunix_aggregator", "tunix_estimator"]
