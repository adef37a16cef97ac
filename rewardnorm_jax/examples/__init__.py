"""Worked examples built on rewardnorm_jax (not part of the library API)."""
