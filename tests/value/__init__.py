"""Value targets' tests: squashing transforms and PopArt."""
