"""Reward transforms' tests: normalization, centering, percentiles, replay, reward streams."""
