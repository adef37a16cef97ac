"""The statistics every transform learns: data, one merge, and the math written once.

* :mod:`~rewardnorm_jax._src.stats.running`: :class:`RunningStats` (mean,
  variance, an exact sample count and, for moving statistics, a weight) and
  its one merge, shared across devices through an ``axis_name``;
* :mod:`~rewardnorm_jax._src.stats.summation`: the compensated sums a merge
  reduces a batch with, in the form each backend runs fastest;
* :mod:`~rewardnorm_jax._src.stats.formulas`: the recurrences (the discounted
  return, Chan's merge of moments), written once for JAX and NumPy, so the
  host adapters (Gymnasium) run the very arithmetic of the JAX core;
* :mod:`~rewardnorm_jax._src.stats.placement`: :class:`Statistics`, where a
  transform keeps its statistics (shared, per environment, per component, per
  task) and how they weigh the past.
"""
