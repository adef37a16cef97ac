"""The machinery's tests: the contract every transform passes, checkpoints, hostile input."""
