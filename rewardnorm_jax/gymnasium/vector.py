r"""Vector twins of the Gymnasium adapter: :class:`gymnasium.vector.VectorWrapper` subclasses.

``NormalizeReward``, ``TransformReward``, ``ClipReward`` and ``NormalizeObservation`` replace
``gymnasium.wrappers.vector``'s classes of the same names.
"""

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.logger import warn
from gymnasium.vector import (
    AutoresetMode,
    VectorEnv,
    VectorObservationWrapper,
    VectorRewardWrapper,
    VectorWrapper,
)
from gymnasium.vector.utils import batch_space

from rewardnorm_jax._src.core import base, checks
from rewardnorm_jax.gymnasium import _common
from rewardnorm_jax.gymnasium._observation import ObservationStatistics

__all__ = ["ClipReward", "NormalizeObservation", "NormalizeReward", "TransformReward"]


class NormalizeReward(
    _common.Normalizer[VectorEnv], VectorWrapper, gym.utils.RecordConstructorArgs
):
    r"""Scales rewards so that the discounted returns have approximately unit variance.

    One set of running statistics (``return_rms``) is shared by all sub-environments; each keeps
    its discounted return in ``accumulated_reward`` (float32, as Gymnasium). Each step, the
    environments that take part advance their returns as the single-environment wrapper does
    (:doc:`/semantics` writes the recurrence out), their returns join the statistics, and every
    reward is divided by the square root of the variance plus ``epsilon``. Which take part
    depends on ``env.metadata["autoreset_mode"]``: under NEXT_STEP (the default) and DISABLED,
    those that did not end their episode at the previous step (the reset-only step is left out);
    under SAME_STEP, all, with the return of an ended episode set to 0 after the step. This is
    Gymnasium 1.4.0's :class:`gymnasium.wrappers.vector.NormalizeReward` (under NEXT_STEP,
    1.3.0's too, to float64 rounding). ``reset(options={"reset_mask": m})`` zeroes only the
    returns of the environments it resets (Gymnasium zeroes them all, a known bug). ``save`` /
    ``load`` also keep the pending autoresets, so a restored wrapper continues bit for bit; the
    rest (``update_running_mean``, ``return_rms``, non-finite rewards, checks, vector rewards)
    is as in :class:`rewardnorm_jax.gymnasium.NormalizeReward`. Rewards of shape
    ``(num_envs, k)`` (MO-Gymnasium's ``MOSyncVectorEnv``) keep returns of that shape; each
    objective's statistics are then those this wrapper keeps of that objective's rewards alone,
    or one set learns every objective's returns under ``objectives="shared"``. MO-Gymnasium's
    vector environments declare k (``reward_space``, one environment's reward), so
    ``return_rms`` and ``accumulated_reward`` have the layout from construction (none with
    MO-Gymnasium's ``LinearReward`` in the wrapped stack); statistics assigned to
    ``return_rms``, before the first step too, are kept and checked as in the single-environment
    wrapper.

    Args:
        env: The vector environment to wrap.
        gamma: The discount factor of the tracked returns, in [0, 1].
        epsilon: A stability parameter added to the variance, > 0 and finite.
        objectives: For vector rewards, ``"each"`` (one set of statistics per objective) or
            ``"shared"`` (one scale across the objectives); scalar rewards ignore it.

    Example:
        Gymnasium's example (without the wrapper, mean -0.03359492141887935, std
        0.029028230434438706):

        >>> import gymnasium as gym, numpy as np
        >>> from rewardnorm_jax.gymnasium.vector import NormalizeReward
        >>> envs = NormalizeReward(gym.make_vec("MountainCarContinuous-v0", 3))
        >>> _ = envs.reset(seed=123), envs.action_space.seed(123)
        >>> episode_rewards = [envs.step(envs.action_space.sample())[1] for _ in range(100)]
        >>> np.mean(episode_rewards), np.std(episode_rewards)
        (np.float64(-0.1598639409552856), np.float64(0.2780030923586878))

    Change logs:
     * v0.1.0 - Initially added, matching Gymnasium 1.4.0 (SAME_STEP autoreset).
     * Unreleased - Vector (multi-objective) rewards, and ``objectives``.
    """

    _checkpointed = (("accumulated_reward", "_accumulated_reward"), ("prev_dones", "_prev_dones"))
    _returns_dtype = np.float32
    _accumulated_reward: np.ndarray
    _prev_dones: np.ndarray
    accumulated_reward = _common.returns_property(
        "accumulated_reward",
        "Gymnasium's float32 array (num_envs,), (num_envs, k) for k objectives; assignments "
        "round to float32",
    )

    def reset(
        self, *, seed: int | list[int] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Resets the environments and zeroes the returns of those reset."""
        # Gymnasium's vector envs pop "reset_mask" from the options: read it first.
        reset_mask = None if options is None else options.get("reset_mask")
        # VectorEnv.reset is annotated seed: int | None, but vector envs take a list too.
        result = self.env.reset(seed=seed, options=options)  # type: ignore[arg-type, unused-ignore]
        selected = slice(None) if reset_mask is None else np.asarray(reset_mask, dtype=bool)
        self._accumulated_reward[selected] = 0.0
        self._prev_dones[selected] = False
        return result

    # Gymnasium annotates VectorWrapper.step with type variables its class does not bind.
    def step(  # type: ignore[override, unused-ignore]
        self, actions
    ) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Steps through the environments, normalizing the rewards returned."""
        obs, reward, terminated, truncated, info = self.env.step(actions)
        rewards, ends, cuts = _common.step_arrays(
            self._prev_dones.shape, reward, terminated, truncated
        )
        if rewards.shape[1:] != self._objective_shape:  # the first step, or a changed shape
            self._use_layout(rewards.shape[1:], "the environment returned rewards of")
        active = None if self._same_step else ~self._prev_dones
        self._prev_dones = ends | cuts
        if rewards.ndim == 2:  # one flag per environment, for each of its objectives
            ends, cuts = ends[:, None], cuts[:, None]
            active = None if active is None else active[:, None]
        scaled = self._advance(self._accumulated_reward, rewards, ends, cuts, active)
        return obs, scaled, terminated, truncated, info

    def normalize(self, reward) -> np.ndarray:
        """Gymnasium 1.3's helper, kept for code that calls it: ``step`` does not.

        Merges the current discounted return of every environment (finite ones) into the
        statistics if they are learning, then returns ``reward / sqrt(var + epsilon)``.
        """
        returns = self._accumulated_reward
        selected = np.isfinite(returns) & self._update_running_mean
        self._learn_returns(self.return_rms, returns, selected)
        return self._scaled(np.asarray(checks.check_reward("reward", reward), np.float64))


class TransformReward(
    _common.TransformRewardBase, VectorRewardWrapper, gym.utils.RecordConstructorArgs
):
    """Applies a function to the rewards of a vector environment (the whole array at once).

    Same as :class:`gymnasium.wrappers.vector.TransformReward` (arguments ``env`` and ``func``);
    a non-callable ``func`` raises ``ValueError``.
    """

    # Gymnasium annotates VectorRewardWrapper.rewards with a type variable its class does not bind.
    def rewards(self, reward: np.ndarray) -> np.ndarray:  # type: ignore[override, unused-ignore]
        """Applies ``func`` to the rewards."""
        return self.func(reward)


class ClipReward(_common.ClipRewardBase, TransformReward, gym.utils.RecordConstructorArgs):
    """Clips the rewards of a vector environment between a lower and an upper bound.

    The arguments, values and checks of :class:`gymnasium.wrappers.vector.ClipReward`, computed
    with one ``numpy.clip`` over the whole array (Gymnasium clips environment by environment in
    a Python loop, overwriting the inner environment's array); a bound is a number or one per
    sub-environment, else ValueError.
    """


class NormalizeObservation(
    VectorObservationWrapper, gym.utils.RecordConstructorArgs, ObservationStatistics
):
    r"""Normalizes the observations of a vector environment, feature by feature.

    One set of statistics (``obs_rms``, of one observation's shape) learns every
    sub-environment's observation at each ``reset`` and ``step``, reset observations of the
    NEXT_STEP autoreset included, then the observations come out as
    :math:`(x - \mu) / \sqrt{\sigma^2 + \epsilon}` in float32: Gymnasium's
    :class:`gymnasium.wrappers.vector.NormalizeObservation` to float32 rounding, with the rest
    (statistics, freezing, ``save`` / ``load``, non-finite values, checks) as in
    :class:`rewardnorm_jax.gymnasium.NormalizeObservation`. As in Gymnasium 1.4, an
    environment whose ``metadata["autoreset_mode"]`` is not NEXT_STEP, or a partial reset
    (``reset(options={"reset_mask": m})`` with ``m`` not all true), raises ValueError, and a
    missing ``autoreset_mode`` is taken as NEXT_STEP with a warning.

    Args:
        env: The vector environment to wrap.
        epsilon: A stability parameter added to the variance, > 0 and finite.

    Example:
        >>> import gymnasium as gym, numpy as np
        >>> from rewardnorm_jax.gymnasium.vector import NormalizeObservation
        >>> envs = NormalizeObservation(gym.make_vec("CartPole-v1", 3))
        >>> obs, _ = envs.reset(seed=123)
        >>> for _ in range(100):
        ...     obs, *_ = envs.step(envs.action_space.sample())
        >>> obs.shape, obs.dtype, envs.obs_rms.samples
        ((3, 4), dtype('float32'), [303, 303, 303, 303])

    Change logs:
     * Unreleased - Initially added, matching Gymnasium 1.4.0's vector ``NormalizeObservation``.
    """

    def __init__(self, env: VectorEnv, epsilon: base.Real = 1e-8):
        gym.utils.RecordConstructorArgs.__init__(self, epsilon=epsilon)
        mode = env.metadata.get("autoreset_mode")
        if "autoreset_mode" not in env.metadata:
            warn(
                f"{env} is missing `autoreset_mode` data. Assuming that the vector environment "
                "it follows the `NextStep` autoreset api or autoreset is disabled. Read "
                "https://farama.org/Vector-Autoreset-Mode for more details."
            )
        elif mode != AutoresetMode.NEXT_STEP:
            raise ValueError(
                f"Expected env.metadata['autoreset_mode'] to be AutoresetMode.NEXT_STEP, got {mode}"
            )
        VectorObservationWrapper.__init__(self, env)
        space = self._statistics_for(self.env.single_observation_space, epsilon)
        self.single_observation_space = space
        self.observation_space = batch_space(space, self.num_envs)

    def reset(
        self, *, seed: int | list[int] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Resets every environment (a partial reset raises ValueError), normalizing."""
        if options is not None and not np.all(options.get("reset_mask", True)):
            raise ValueError(
                "NormalizeObservation does not support partial resets. The 'reset_mask' must "
                "contain all True values."
            )
        return super().reset(seed=seed, options=options)  # type: ignore[arg-type, unused-ignore]

    def observations(self, observations) -> np.ndarray:  # type: ignore[override, unused-ignore]
        """Merges every environment's observation into the statistics if learning; normalized."""
        return self._normalize(observations, (self.num_envs,))
