"""How long a test's subprocess may run before it counts as hung.

The pages' examples, the notebooks' cells, the demo and the multi-device
workers run in interpreters of their own. On a quiet 2-core machine each takes
seconds to a few minutes; on a loaded one (load average 5-11) several times
that. Their timeouts detect a hang, never slowness, so they sit far above any
run seen: a slow machine passes, a hung subprocess still fails within the CI's
90 minutes, with its output.
"""

HANG_TIMEOUT_S = 1800
"""Seconds after which a subprocess (or one notebook cell) is killed as hung."""
