"""Settings for every test: hypothesis draws the same examples on every run."""

import os

from hypothesis import settings

# The suite draws the same hypothesis examples on every run, so a result is
# reproducible on any machine. HYPOTHESIS_PROFILE=explore draws fresh random
# examples instead, to search for new failures:
#   HYPOTHESIS_PROFILE=explore python -m pytest -q tests/core/test_hostile_inputs.py
settings.register_profile("repeatable", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))
