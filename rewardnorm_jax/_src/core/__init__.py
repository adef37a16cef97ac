"""The machinery every family is built on; it names no family.

* :mod:`~rewardnorm_jax._src.core.base`: the types (:class:`Config`,
  :class:`RewardTransform`, the protocols of its functions, :func:`per_env_field`,
  the ``task`` keyword);
* :mod:`~rewardnorm_jax._src.core.checks`: every check of an option or input;
* :mod:`~rewardnorm_jax._src.core.builder`: the checked ``init`` / ``update`` /
  ``apply`` / ``step`` every reward transform gets;
* :mod:`~rewardnorm_jax._src.core.state_fields`: what a state declares;
* :mod:`~rewardnorm_jax._src.core.semantics`: the presets of Gymnasium, SB3 and PureJaxRL;
* :mod:`~rewardnorm_jax._src.core.checkpoint` and
  :mod:`~rewardnorm_jax._src.core.checkpoint_migration`: saved states and older layouts;
* :mod:`~rewardnorm_jax._src.core.adapter`: the wrapper every environment adapter shares;
* :mod:`~rewardnorm_jax._src.core.extras`: optional dependencies named by their extra.
"""
