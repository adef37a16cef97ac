"""Every step a Brax trainer takes, sent to the host: the stream its statistics learned from.

Brax's trainers return the policy, not the environment state, so a test cannot
read the statistics at the end of training. :class:`StepRecorder` sits
outermost, around the wrapper that :func:`rewardnorm_jax.brax.wrap_env_fn`
builds, and sends each step's raw rewards, episode ends, transformed rewards
and transform state to the host with ``jax.debug.callback``. :func:`stream`
puts them back in order (by the statistics' exact count), one column per
environment, so a test can feed the same stream to the core and compare.
"""

from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from brax import envs as brax_envs

import rewardnorm_jax as rn
from rewardnorm_jax import brax as rnb

NUMPY_FIELDS = ("raw", "reward", "done", "truncation")


class StepRecorder(brax_envs.Wrapper):
    """Sends each step's rewards, ends and transform state to ``records``.

    With ``axis_name`` (the trainer's ``pmap`` axis, ``"i"`` in Brax) each
    record names the device that took the step.
    """

    def __init__(self, env, records: list, axis_name: str | None = None):
        super().__init__(env)
        self.records = records
        self.axis_name = axis_name

    def step(self, state, action):
        state = self.env.step(state, action)
        device = 0 if self.axis_name is None else jax.lax.axis_index(self.axis_name)
        values = (
            state.metrics["raw_reward"],
            state.reward,
            state.done,
            state.info["truncation"],
        )
        jax.debug.callback(self._record, device, values, rnb.get_transform_state(state))
        return state

    def _record(self, device, values, transform_state) -> None:
        record: dict[str, Any] = dict(zip(NUMPY_FIELDS, map(np.asarray, values), strict=True))
        record["device"] = int(device)
        record["state"] = jax.device_get(transform_state)
        record["count"] = int(rn.count_as_int(record["state"].stats))
        self.records.append(record)


def recording_wrap_env_fn(
    transform: rn.RewardTransform, records: list, axis_name: str | None = None, **kwargs
) -> Callable[..., Any]:
    """:func:`rewardnorm_jax.brax.wrap_env_fn` with a :class:`StepRecorder` around training."""
    wrap = rnb.wrap_env_fn(transform, **kwargs)

    def fn(env, **wrap_kwargs):
        wrapped = wrap(env, **wrap_kwargs)
        if isinstance(wrapped, rnb.RewardTransformWrapper):
            return StepRecorder(wrapped, records, axis_name)
        return wrapped  # the raw evaluation environment

    return fn


def stream(records: list) -> dict:
    """The recorded steps as ``(T, num_envs)`` arrays, devices side by side, in step order.

    Returns:
      ``raw``, ``reward``, ``terminated``, ``truncated`` of shape ``(T, N)``
      (device 0's environments first), and ``final``: each device's transform
      state after its last step.

    Raises:
      AssertionError: if the devices recorded different numbers of steps.
    """
    devices = sorted({record["device"] for record in records})
    per_device = [
        sorted((r for r in records if r["device"] == d), key=lambda r: r["count"]) for d in devices
    ]
    assert len({len(steps) for steps in per_device}) == 1, [len(s) for s in per_device]

    def column(field):
        return np.concatenate([np.stack([r[field] for r in steps]) for steps in per_device], 1)

    truncated = column("truncation") > 0
    return {
        "raw": column("raw"),
        "reward": column("reward"),
        "terminated": (column("done") > 0) & ~truncated,
        "truncated": truncated,
        "final": [steps[-1]["state"] for steps in per_device],
    }
