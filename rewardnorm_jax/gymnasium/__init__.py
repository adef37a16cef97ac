r"""Gymnasium adapter: drop-in reward and observation wrappers over the library's one math.

``NormalizeReward``, ``TransformReward``, ``ClipReward`` and ``NormalizeObservation`` are
:class:`gymnasium.Wrapper` subclasses with the signatures, defaults, attributes and results of
Gymnasium's wrappers of the same names; :mod:`rewardnorm_jax.gymnasium.vector` holds the vector
versions. The recurrence and
the statistics merge are the JAX core's code (:mod:`rewardnorm_jax._src.stats.formulas`), run on the
host in float64 as Gymnasium computes: no JAX call per step, no x64 mode. Only this subpackage
imports Gymnasium.
"""

import math
from typing import Any, SupportsFloat

import numpy as np

from rewardnorm_jax._src.core.extras import requires

with requires("gymnasium", __name__):
    import gymnasium as gym

from rewardnorm_jax._src.core import base
from rewardnorm_jax._src.stats import formulas
from rewardnorm_jax.gymnasium import _common
from rewardnorm_jax.gymnasium._observation import ObservationStatistics
from rewardnorm_jax.gymnasium._stats import ObjectiveStats, RunningMeanStd

__all__ = [
    "ClipReward",
    "NormalizeObservation",
    "NormalizeReward",
    "ObjectiveStats",
    "RunningMeanStd",
    "TransformReward",
    "vector",
]

# Python and NumPy scalars that are real numbers (bools included): a step's fast path.
_REAL_SCALARS = (float, int, np.floating, np.integer, np.bool_)


class NormalizeReward(_common.Normalizer[gym.Env], gym.Wrapper, gym.utils.RecordConstructorArgs):
    r"""Scales rewards so that their discounted return has approximately unit variance.

    Each step discounts the tracked return by ``gamma`` and adds the reward (from 0, restarting
    on termination; :doc:`/semantics` writes the recurrence out), merges the return into
    ``return_rms`` and returns the reward divided by the square root of the updated variance
    plus ``epsilon``, as Gymnasium's :class:`gymnasium.wrappers.NormalizeReward` (to float64
    rounding): the mean is not subtracted, ``truncated`` is ignored and ``reset()`` does not clear
    :math:`G`. ``update_running_mean = False`` freezes the statistics (the return keeps
    accumulating); ``save(path)`` / ``load(path)`` write and restore them with the return.
    ``return_rms`` is a :class:`RunningMeanStd` (a Gymnasium one assigned to it works too). A
    NaN or infinite reward passes through but never enters the return or the statistics. A
    reward that is not real (a complex number, a string), or a flag that is not a bool or a
    number, raises TypeError (a reward or flag of the wrong shape ValueError); an invalid
    ``gamma`` or ``epsilon`` raises :class:`gymnasium.error.InvalidBound`, as in Gymnasium
    1.4.0. Vector version: :class:`rewardnorm_jax.gymnasium.vector.NormalizeReward`.

    A vector reward of k objectives (MO-Gymnasium's, shape ``(k,)``) is normalized objective by
    objective: :math:`G_i \leftarrow \gamma G_i (1 - \text{terminated}) + r_i` and
    :math:`\tilde r_i = r_i / \sqrt{\sigma_i^2 + \epsilon}`, each :math:`\sigma_i^2` the
    variance of objective i's returns (an :class:`ObjectiveStats`), as k stacked
    ``mo_gymnasium.wrappers.MONormalizeReward(env, idx=i)``; with ``objectives="shared"``, one
    :class:`RunningMeanStd` learns all k returns of each step (one batch) and
    :math:`\tilde r_i = r_i / \sqrt{\sigma^2 + \epsilon}` keeps the objectives' ratios. The
    first step (or a loaded checkpoint) sets the layout, one number or k objectives; a reward of
    another shape later, or one that is neither, raises ValueError. An MO-Gymnasium environment
    declares its layout (``env.unwrapped.reward_space``, shape ``(k,)``), so ``return_rms`` has
    it from construction and ``eval_env.return_rms.set_state(train_env.return_rms.get_state())``
    works before the first step; with MO-Gymnasium's ``LinearReward`` (one number) in the
    wrapped stack nothing is declared, and the first step decides. Statistics assigned to
    ``return_rms`` are kept and used, also when assigned before the first step as in Gymnasium's
    ``eval_env.return_rms = train_env.return_rms``. Valid are, under ``objectives="each"`` for
    k objectives, an :class:`ObjectiveStats` of k objectives or Gymnasium's
    ``RunningMeanStd(shape=(k,))`` (converted into one), and otherwise a :class:`RunningMeanStd`
    of shape ``()`` (this library's or Gymnasium's); another value raises ValueError naming it,
    at assignment once the layout is set or declared, else at the step or load that sets it.

    Args:
        env: The environment to wrap.
        gamma: The discount factor of the tracked return, in [0, 1].
        epsilon: A stability parameter added to the variance, > 0 and finite.
        objectives: For a vector reward, ``"each"`` (one set of statistics per objective) or
            ``"shared"`` (one scale across the objectives); a scalar reward ignores it.

    Example:
        Gymnasium's example (without the wrapper, the variance is 0.0008876301247721108;
        Gymnasium's wrapper gives 0.010162116476634746, matched to float64 rounding):

        >>> import gymnasium as gym, numpy as np
        >>> from rewardnorm_jax.gymnasium import NormalizeReward
        >>> env = NormalizeReward(gym.make("MountainCarContinuous-v0"), gamma=0.99, epsilon=1e-8)
        >>> _ = env.reset(seed=123), env.action_space.seed(123)
        >>> episode_rewards, done = [], False
        >>> while not done:
        ...     _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
        ...     episode_rewards.append(reward)
        ...     done = terminated or truncated
        >>> np.var(episode_rewards)  # doctest: +ELLIPSIS
        np.float64(0.01016211647663474...)

    Change logs:
     * v0.1.0 - Initially added, matching Gymnasium 1.4.0's ``NormalizeReward``.
     * Unreleased - Vector (multi-objective) rewards, and ``objectives``.
    """

    _checkpointed = (("discounted_reward", "_discounted_reward"),)
    _returns_dtype = np.float64
    _discounted_reward: np.ndarray
    discounted_reward = _common.returns_property(
        "discounted_reward", "Gymnasium's float64 array (1,), (1, k) for k objectives"
    )

    def step(self, action) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """Steps through the environment, normalizing the reward returned."""
        # Typed Any: environments do not always return what Gymnasium annotates.
        outputs: tuple[Any, ...] = self.env.step(action)
        obs, reward, terminated, truncated, info = outputs
        if self._objective_shape != () or not (
            isinstance(reward, _REAL_SCALARS)
            and isinstance(terminated, _REAL_SCALARS)
            and isinstance(truncated, _REAL_SCALARS)
        ):  # 0-d arrays pass; anything else raises an error naming the output at fault
            rewards, ends, cuts = _common.step_arrays((), reward, terminated, truncated)
            self._use_layout(rewards.shape, "the environment returned a reward of")
            if rewards.shape:  # one return per objective, a batch of one environment
                scaled = self._advance(self._discounted_reward, rewards[None], ends, cuts, None)
                return obs, scaled[0], terminated, truncated, info
        reward, ends, cuts = float(reward), bool(terminated), bool(truncated)
        valid = math.isfinite(reward)
        ret, rms = self._return_step(
            float(self._discounted_reward[0]), reward, ends, cuts, valid, None, _learn_return
        )
        self._discounted_reward[0] = ret
        scaled = formulas.scale_by_std(np, reward, float(rms.var), self._epsilon, None, not valid)
        return obs, np.float64(scaled), terminated, truncated, info


def _learn_return(rms, ret: float, selected: bool):
    """Merges one return into the statistics: a batch of one, mean ``ret``, variance 0.

    A scalar reward's step, in Python floats (a few microseconds).
    """
    if selected:
        rms.update_from_moments(ret, 0.0, 1)
    return rms


class TransformReward(
    _common.TransformRewardBase, gym.RewardWrapper, gym.utils.RecordConstructorArgs
):
    """Applies a function to the ``reward`` received from the environment's ``step``.

    Same as :class:`gymnasium.wrappers.TransformReward` (arguments ``env`` and ``func``); a
    non-callable ``func`` raises ``ValueError``. Vector version:
    :class:`rewardnorm_jax.gymnasium.vector.TransformReward`.
    """

    def reward(self, reward: SupportsFloat) -> SupportsFloat:
        """Applies ``func`` to the reward."""
        return self.func(reward)


class ClipReward(_common.ClipRewardBase, TransformReward, gym.utils.RecordConstructorArgs):
    """Clips the rewards of an environment between a lower and an upper bound.

    Same as :class:`gymnasium.wrappers.ClipReward` (arguments ``env``, ``min_reward=None``,
    ``max_reward=None``; ``numpy.clip``; either bound, a number or an array, may be ``None``):
    ``InvalidBound`` if both are ``None``, either is NaN or ``min_reward > max_reward``. Vector
    version: :class:`rewardnorm_jax.gymnasium.vector.ClipReward`.
    """


class NormalizeObservation(
    gym.ObservationWrapper, gym.utils.RecordConstructorArgs, ObservationStatistics
):
    r"""Normalizes observations to be centered at the mean with unit variance.

    Each observation (at ``reset`` and ``step``) first joins the running statistics ``obs_rms``
    (a :class:`RunningMeanStd` of the observation's shape), then comes out as
    :math:`(x - \mu) / \sqrt{\sigma^2 + \epsilon}` in float32, feature by feature, as
    Gymnasium's :class:`gymnasium.wrappers.NormalizeObservation` (its statistics are of the
    observation space's dtype, float32, where these are float64 with compensated sums: the two
    agree to float32 rounding). The observation space becomes an unbounded float32 ``Box`` of
    the same shape; a space without a shape (``Dict``, ``Tuple``) raises ValueError, as in
    Gymnasium 1.4. ``update_running_mean = False`` freezes the statistics for evaluation;
    ``save(path)`` / ``load(path)`` write and restore them (the library's checkpoint format,
    refusing another wrapper's file, another ``epsilon`` or another shape). A non-finite value
    is left out of its feature's statistics (each feature counts its own samples) and comes out
    non-finite. An invalid ``epsilon`` raises :class:`gymnasium.error.InvalidBound`. Vector
    version: :class:`rewardnorm_jax.gymnasium.vector.NormalizeObservation`.

    Args:
        env: The environment to wrap.
        epsilon: A stability parameter added to the variance, > 0 and finite.

    Example:
        Gymnasium's example, with Gymnasium's wrapper beside it:

        >>> import gymnasium as gym, numpy as np
        >>> from gymnasium.wrappers import NormalizeObservation as GymNormalizeObservation
        >>> from rewardnorm_jax.gymnasium import NormalizeObservation
        >>> ours = NormalizeObservation(gym.make("CartPole-v1"))
        >>> theirs = GymNormalizeObservation(gym.make("CartPole-v1"))
        >>> same = np.allclose(ours.reset(seed=123)[0], theirs.reset(seed=123)[0], atol=1e-6)
        >>> done = False
        >>> while not done:
        ...     obs, _, term, trunc, _ = ours.step(1)
        ...     same &= np.allclose(obs, theirs.step(1)[0], rtol=1e-5, atol=1e-6)
        ...     done = term or trunc
        >>> bool(same), obs.dtype, ours.obs_rms.samples
        (True, dtype('float32'), [10, 10, 10, 10])

    Change logs:
     * Unreleased - Initially added, matching Gymnasium 1.4.0's ``NormalizeObservation``.
    """

    def __init__(self, env: gym.Env, epsilon: base.Real = 1e-8):
        gym.utils.RecordConstructorArgs.__init__(self, epsilon=epsilon)
        gym.ObservationWrapper.__init__(self, env)
        self.observation_space = self._statistics_for(env.observation_space, epsilon)

    def observation(self, observation) -> np.ndarray:
        """Merges the observation into the statistics if they are learning; normalized."""
        return self._normalize(observation, ())


from rewardnorm_jax.gymnasium import vector  # noqa: E402  (the vector twins)
