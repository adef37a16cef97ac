"""The environment adapters' tests, each on the real package."""
