"""Observation normalization's tests: the normalizer and its suite wrappers against references."""
