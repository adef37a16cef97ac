r"""Gymnasium adapter: drop-in reward wrappers over the library's one copy of the math.

``rewardnorm_jax.gymnasium.NormalizeReward``, ``TransformReward`` and
``ClipReward`` are :class:`gymnasium.Wrapper` subclasses with the constructor
signatures, defaults, attributes and results of Gymnasium's own wrappers of
the same names; :mod:`rewardnorm_jax.gymnasium.vector` holds the
:class:`gymnasium.vector.VectorWrapper` versions. Swap the import and nothing
else changes (except the bugs listed in each class's notes).

The recurrence and the statistics are the JAX core's own code
(:func:`rewardnorm_jax._src.formulas.return_step` and
:func:`~rewardnorm_jax._src.formulas.merge_moments`, the functions the
transforms jit), called here with ``numpy`` on the host in float64 (Python
floats for one environment, NumPy arrays for vector environments), as
Gymnasium computes: no JAX dispatch per step and no need to enable JAX's x64
mode. The statistics are the core's :class:`~rewardnorm_jax.RunningStats`,
seen through Gymnasium's ``RunningMeanStd`` interface.

Only this subpackage imports Gymnasium; the top-level package exports none of it.
"""

import math
from collections.abc import Callable
from typing import Any, SupportsFloat

import numpy as np

from rewardnorm_jax._src.extras import requires

with requires("gymnasium", __name__):
    import gymnasium as gym

from rewardnorm_jax._src import base, formulas
from rewardnorm_jax._src import semantics as sem_lib
from rewardnorm_jax.gymnasium._checkpoint import SavesStatistics, check_returns
from rewardnorm_jax.gymnasium._stats import RunningMeanStd
from rewardnorm_jax.gymnasium._validation import clip_function

__all__ = ["ClipReward", "NormalizeReward", "RunningMeanStd", "TransformReward", "vector"]

_SEMANTICS = sem_lib.GYMNASIUM


class NormalizeReward(gym.Wrapper, gym.utils.RecordConstructorArgs, SavesStatistics):
    r"""Scales rewards so that their discounted return has approximately unit variance.

    Each step the wrapper updates the discounted return
    :math:`G \leftarrow \gamma\, G\, (1 - \text{terminated}) + r` (starting at 0),
    merges :math:`G` into the running statistics ``return_rms`` and returns
    :math:`r / \sqrt{\sigma^2_G + \epsilon}` with the updated variance. The mean
    is not subtracted (reward *scaling*, Engstrom et al.), ``truncated`` is
    ignored and ``reset()`` does not clear :math:`G`, exactly as Gymnasium's
    :class:`gymnasium.wrappers.NormalizeReward`, whose results this wrapper
    reproduces to float64 rounding.

    The property ``update_running_mean`` freezes (``False``) or continues
    (``True``, default) the statistics; rewards are still scaled and the return
    keeps accumulating while frozen, e.g. during evaluation. ``save(path)``
    and ``load(path)`` write and restore the statistics and the tracked return
    (as SB3's ``VecNormalize.save`` / ``load``; msgpack, never pickle).

    A vector version of the wrapper exists:
    :class:`rewardnorm_jax.gymnasium.vector.NormalizeReward`.

    Note:
        The statistics are a :class:`RunningMeanStd` with Gymnasium's
        interface (``mean``, ``var``, ``count``, ``update``). Save them with
        ``env.return_rms.get_state()`` and restore them with
        ``env.return_rms.set_state(state)`` (bit-exact), pickle them, or move
        them to the JAX core with ``env.return_rms.to_running_stats()``. A
        Gymnasium ``RunningMeanStd`` assigned to ``env.return_rms`` works too.

    Note:
        A NaN or infinite reward is passed through unchanged but never enters
        the return or the statistics (Gymnasium's wrapper would turn every
        later reward into NaN). An invalid ``gamma`` or ``epsilon`` raises
        :class:`gymnasium.error.InvalidBound`, as Gymnasium 1.4.0 does
        (1.3.0 accepted them silently).

    Note:
        The scaling depends on past trajectories: rewards are not scaled well
        right after the wrapper is created or the policy changes. The first
        scaled reward is large (about 70.7 for a reward of 1), since the
        variance of a single return is tiny.

    The examples are Gymnasium's; Gymnasium's wrapper ends the second with
    ``np.float64(0.010162116476634746)``, which this one matches to float64
    rounding (the statistics keep ``m2`` and an integer count instead of
    ``var`` and a float count, so the last bit may differ).

    Example without the normalize reward wrapper:
        >>> import numpy as np
        >>> import gymnasium as gym
        >>> env = gym.make("MountainCarContinuous-v0")
        >>> _ = env.reset(seed=123)
        >>> _ = env.action_space.seed(123)
        >>> episode_rewards = []
        >>> terminated, truncated = False, False
        >>> while not (terminated or truncated):
        ...     action = env.action_space.sample()
        ...     observation, reward, terminated, truncated, info = env.step(action)
        ...     episode_rewards.append(reward)
        ...
        >>> env.close()
        >>> np.var(episode_rewards)
        np.float64(0.0008876301247721108)

    Example with the normalize reward wrapper:
        >>> import numpy as np
        >>> import gymnasium as gym
        >>> from rewardnorm_jax.gymnasium import NormalizeReward
        >>> env = gym.make("MountainCarContinuous-v0")
        >>> env = NormalizeReward(env, gamma=0.99, epsilon=1e-8)
        >>> _ = env.reset(seed=123)
        >>> _ = env.action_space.seed(123)
        >>> episode_rewards = []
        >>> terminated, truncated = False, False
        >>> while not (terminated or truncated):
        ...     action = env.action_space.sample()
        ...     observation, reward, terminated, truncated, info = env.step(action)
        ...     episode_rewards.append(reward)
        ...
        >>> env.close()
        >>> np.var(episode_rewards)  # doctest: +ELLIPSIS
        np.float64(0.01016211647663474...)

    Change logs:
     * v0.1.0 - Initially added, matching Gymnasium 1.4.0's ``NormalizeReward``
       (``InvalidBound`` checks); statistics as a :class:`RunningMeanStd` with
       ``get_state`` / ``set_state`` and conversion to the JAX core; non-finite
       rewards kept out of the statistics.
    """

    _checkpointed = (("discounted_reward", "_discounted_reward"),)

    def __init__(self, env: gym.Env, gamma: base.Real = 0.99, epsilon: base.Real = 1e-8):
        """Wraps ``env`` so that its rewards are scaled by the running std of the return.

        Args:
            env: The environment to apply the wrapper.
            gamma: The discount factor of the tracked return, in [0, 1].
            epsilon: A stability parameter added to the variance, > 0.

        Raises:
            InvalidBound: If ``gamma`` is outside [0, 1] or ``epsilon`` is not
                strictly positive and finite.
            ValueError: If ``gamma`` or ``epsilon`` is not a real number.
        """
        SavesStatistics.__init__(self, gamma, epsilon)
        gym.utils.RecordConstructorArgs.__init__(self, gamma=gamma, epsilon=epsilon)
        gym.Wrapper.__init__(self, env)
        self.return_rms = RunningMeanStd()
        self._discounted_reward = np.zeros(1)

    @property
    def discounted_reward(self) -> np.ndarray:
        """The tracked discounted return: Gymnasium's float64 array of shape ``(1,)``.

        The wrapper's own array, so in-place writes (``env.discounted_reward[:] = 0``)
        take effect; assigning a number or an array copies it in.
        """
        return self._discounted_reward

    @discounted_reward.setter
    def discounted_reward(self, value):
        self._discounted_reward[...] = check_returns("discounted_reward", value, (1,))

    def step(self, action) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """Steps through the environment, normalizing the reward returned."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        reward = float(reward)
        valid = math.isfinite(reward)
        ret, rms = formulas.return_step(
            np,
            float(self._discounted_reward[0]),
            self.return_rms,
            reward,
            bool(terminated),
            bool(truncated),
            self._update_running_mean,
            valid,
            None,
            gamma=self._gamma,
            semantics=_SEMANTICS,
            merge=_merge_sample,
        )
        self._discounted_reward[0] = ret
        scaled = formulas.scale_by_std(np, reward, float(rms.var), self._epsilon, None, not valid)
        return obs, np.float64(scaled), terminated, truncated, info


def _merge_sample(rms, ret: float, selected: bool):
    """Merges one return into the statistics: a batch of one, mean ``ret``, variance 0."""
    if selected:
        rms.update_from_moments(ret, 0.0, 1)
    return rms


class TransformReward(gym.RewardWrapper, gym.utils.RecordConstructorArgs):
    """Applies a function to the ``reward`` received from the environment's ``step``.

    Same as :class:`gymnasium.wrappers.TransformReward`. A vector version
    exists: :class:`rewardnorm_jax.gymnasium.vector.TransformReward`.

    Example:
        >>> import gymnasium as gym
        >>> from rewardnorm_jax.gymnasium import TransformReward
        >>> env = gym.make("CartPole-v1")
        >>> env = TransformReward(env, lambda r: 2 * r + 1)
        >>> _ = env.reset()
        >>> _, rew, _, _, _ = env.step(0)
        >>> rew
        3.0

    Change logs:
     * v0.1.0 - Initially added; a non-callable ``func`` raises ``ValueError``.
    """

    def __init__(self, env: gym.Env, func: Callable[[SupportsFloat], SupportsFloat]):
        """Initialize the TransformReward wrapper.

        Args:
            env: The environment to wrap.
            func: The function to apply to each reward.

        Raises:
            ValueError: If ``func`` is not callable.
        """
        if not callable(func):
            raise ValueError(f"func should be callable, got {func!r}.")
        gym.utils.RecordConstructorArgs.__init__(self, func=func)
        gym.RewardWrapper.__init__(self, env)
        self.func = func

    def reward(self, reward: SupportsFloat) -> SupportsFloat:
        """Applies ``func`` to the reward."""
        return self.func(reward)


class ClipReward(TransformReward, gym.utils.RecordConstructorArgs):
    """Clips the rewards of an environment between a lower and an upper bound.

    Same as :class:`gymnasium.wrappers.ClipReward` (``numpy.clip``, either
    bound may be ``None``). A vector version exists:
    :class:`rewardnorm_jax.gymnasium.vector.ClipReward`.

    Example:
        >>> import gymnasium as gym
        >>> from rewardnorm_jax.gymnasium import ClipReward
        >>> env = gym.make("CartPole-v1")
        >>> env = ClipReward(env, 0, 0.5)
        >>> _ = env.reset()
        >>> _, rew, _, _, _ = env.step(1)
        >>> rew
        np.float64(0.5)

    Change logs:
     * v0.1.0 - Initially added.
    """

    def __init__(self, env: gym.Env, min_reward=None, max_reward=None):
        """Initialize the ClipReward wrapper.

        Args:
            env: The environment to wrap.
            min_reward: The lower bound (a number, an array or ``None``).
            max_reward: The upper bound (a number, an array or ``None``).

        Raises:
            InvalidBound: If both bounds are ``None`` or ``min_reward > max_reward``.
        """
        clip = clip_function(min_reward, max_reward)
        gym.utils.RecordConstructorArgs.__init__(self, min_reward=min_reward, max_reward=max_reward)
        TransformReward.__init__(self, env, clip)


from rewardnorm_jax.gymnasium import vector  # noqa: E402  (the vector twins)
