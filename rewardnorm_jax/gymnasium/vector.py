r"""Vector twins of the Gymnasium adapter: :class:`gymnasium.vector.VectorWrapper` subclasses.

``rewardnorm_jax.gymnasium.vector.NormalizeReward``, ``TransformReward`` and
``ClipReward`` replace ``gymnasium.wrappers.vector``'s classes of the same
names. The recurrence and the statistics are the JAX core's code
(:func:`rewardnorm_jax._src.formulas.return_step`), run with ``numpy`` on
the host.
"""

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv, VectorRewardWrapper, VectorWrapper

from rewardnorm_jax._src import base, formulas
from rewardnorm_jax._src import semantics as sem_lib
from rewardnorm_jax.gymnasium._checkpoint import SavesStatistics, check_returns
from rewardnorm_jax.gymnasium._stats import RunningMeanStd
from rewardnorm_jax.gymnasium._validation import clip_function

__all__ = ["ClipReward", "NormalizeReward", "TransformReward"]


class NormalizeReward(VectorWrapper, gym.utils.RecordConstructorArgs, SavesStatistics):
    r"""Scales rewards so that the discounted returns have approximately unit variance.

    One set of running statistics (``return_rms``) is shared by all
    sub-environments; each keeps its discounted return in
    ``accumulated_reward`` (float32, as Gymnasium). Each step, with the
    autoreset mode read from ``env.metadata["autoreset_mode"]`` (NEXT_STEP if
    absent):

    .. math::
      a_i &= \begin{cases} 1 & \text{SAME\_STEP} \\
             \lnot\,\text{done}^{t-1}_i & \text{NEXT\_STEP, DISABLED} \end{cases} \\
      G_i &\leftarrow \gamma\, G_i\, (1 - \text{terminated}_i) + r_i
             \quad \text{for every } i \text{ with } a_i \\
      (\mu, \sigma^2, n) &\leftarrow \operatorname{merge}\big((\mu, \sigma^2, n),
             \{G_i : a_i\}\big) \\
      G_i &\leftarrow 0 \quad \text{where done}_i \text{ (SAME\_STEP only)} \\
      \tilde r_i &= r_i / \sqrt{\sigma^2 + \epsilon}

    so the reset-only steps of NEXT_STEP (and, under DISABLED, steps of an
    environment that ended and has not been reset) never enter the return or
    the statistics, while under SAME_STEP every step is a real one and a new
    episode starts from zero. ``reset`` (with or without ``reset_mask``)
    zeroes the reset environments' returns and marks them active, so the
    first step after a manual reset is a real one. This is Gymnasium 1.4.0's
    :class:`gymnasium.wrappers.vector.NormalizeReward`;
    under NEXT_STEP it equals 1.3.0's to float64 rounding.

    The property ``update_running_mean`` freezes (``False``) or continues
    (``True``, default) the statistics; rewards are still scaled and the
    returns keep accumulating while frozen. ``save(path)`` and ``load(path)``
    write and restore the statistics, the tracked returns and the pending
    autoreset flags (as SB3's ``VecNormalize.save`` / ``load``; msgpack, never
    pickle), so a restored wrapper continues bit for bit.

    Note:
        ``reset()`` zeroes every return; ``reset(options={"reset_mask": m})``
        zeroes only the returns of the environments it resets (Gymnasium 1.3.0
        and 1.4.0 zero them all, a known bug).

    Note:
        The statistics are a :class:`~rewardnorm_jax.gymnasium.RunningMeanStd`
        with Gymnasium's interface; save and restore them with
        ``envs.return_rms.get_state()`` / ``set_state(state)`` (bit-exact),
        pickle them, or convert them with ``to_running_stats()`` for the JAX
        core. NaN or infinite rewards are passed through unchanged but kept
        out of the returns and the statistics. An invalid ``gamma`` or
        ``epsilon`` raises :class:`gymnasium.error.InvalidBound` (Gymnasium 1.4.0).

    Note:
        The scaling depends on past trajectories: rewards are not scaled well
        right after the wrapper is created or the policy changes.

    Example without the normalize reward wrapper:
        >>> import gymnasium as gym
        >>> import numpy as np
        >>> envs = gym.make_vec("MountainCarContinuous-v0", 3)
        >>> _ = envs.reset(seed=123)
        >>> _ = envs.action_space.seed(123)
        >>> episode_rewards = []
        >>> for _ in range(100):
        ...     observation, reward, *_ = envs.step(envs.action_space.sample())
        ...     episode_rewards.append(reward)
        ...
        >>> envs.close()
        >>> np.mean(episode_rewards)
        np.float64(-0.03359492141887935)
        >>> np.std(episode_rewards)
        np.float64(0.029028230434438706)

    Example with the normalize reward wrapper:
        >>> import gymnasium as gym
        >>> import numpy as np
        >>> from rewardnorm_jax.gymnasium.vector import NormalizeReward
        >>> envs = gym.make_vec("MountainCarContinuous-v0", 3)
        >>> envs = NormalizeReward(envs)
        >>> _ = envs.reset(seed=123)
        >>> _ = envs.action_space.seed(123)
        >>> episode_rewards = []
        >>> for _ in range(100):
        ...     observation, reward, *_ = envs.step(envs.action_space.sample())
        ...     episode_rewards.append(reward)
        ...
        >>> envs.close()
        >>> np.mean(episode_rewards)
        np.float64(-0.1598639409552856)
        >>> np.std(episode_rewards)
        np.float64(0.2780030923586878)

    Change logs:
     * v0.1.0 - Initially added, matching Gymnasium 1.4.0 (SAME_STEP autoreset,
       ``InvalidBound`` checks); partial resets zero only the reset
       environments' returns; non-finite rewards kept out of the statistics.
    """

    _checkpointed = (
        ("accumulated_reward", "_accumulated_reward"),
        ("prev_dones", "_prev_dones"),
    )

    def __init__(self, env: VectorEnv, gamma: base.Real = 0.99, epsilon: base.Real = 1e-8):
        """Wraps ``env`` so that its rewards are scaled by the running std of the returns.

        Args:
            env: The vector environment to apply the wrapper.
            gamma: The discount factor of the tracked returns, in [0, 1].
            epsilon: A stability parameter added to the variance, > 0.

        Raises:
            InvalidBound: If ``gamma`` is outside [0, 1] or ``epsilon`` is not
                strictly positive and finite.
            ValueError: If ``gamma`` or ``epsilon`` is not a real number.
        """
        SavesStatistics.__init__(self, gamma, epsilon)
        gym.utils.RecordConstructorArgs.__init__(self, gamma=gamma, epsilon=epsilon)
        VectorWrapper.__init__(self, env)

        self.return_rms = RunningMeanStd()
        self._accumulated_reward = np.zeros((self.num_envs,), dtype=np.float32)
        self._prev_dones = np.zeros((self.num_envs,), dtype=bool)
        mode = AutoresetMode(self.env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP))
        self._same_step = mode == AutoresetMode.SAME_STEP
        self._semantics = sem_lib.GYMNASIUM_SAME_STEP if self._same_step else sem_lib.GYMNASIUM

    @property
    def accumulated_reward(self) -> np.ndarray:
        """The tracked discounted returns: Gymnasium's float32 array of shape ``(num_envs,)``.

        The wrapper's own array, so in-place writes take effect; assigning a
        number or an array copies it in (rounded to float32, as the returns are
        carried).
        """
        return self._accumulated_reward

    @accumulated_reward.setter
    def accumulated_reward(self, value) -> None:
        self._accumulated_reward[...] = check_returns(
            "accumulated_reward", value, self._accumulated_reward.shape
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
        reward = np.asarray(reward, dtype=np.float64)
        if reward.shape != self._accumulated_reward.shape:
            raise ValueError(
                f"the environment returned rewards of shape {reward.shape}; expected "
                f"({self.num_envs},), one per sub-environment."
            )
        terminated_flags = np.asarray(terminated, dtype=bool)
        truncated_flags = np.asarray(truncated, dtype=bool)
        active = None if self._same_step else ~self._prev_dones
        valid = np.isfinite(reward) if active is None else active & np.isfinite(reward)
        ret, _ = formulas.return_step(
            np,
            self._accumulated_reward,
            self.return_rms,
            reward,
            terminated_flags,
            truncated_flags,
            self._update_running_mean,
            valid,
            active,
            gamma=self.gamma,
            semantics=self._semantics,
            merge=self._merge,
        )
        self._accumulated_reward[...] = ret
        self._prev_dones = terminated_flags | truncated_flags
        # Without a clip, r / s leaves NaN and +-inf rewards as they are: no
        # pass-through select is needed.
        scaled = formulas.scale_by_std(
            np, reward, float(self.return_rms.var), self.epsilon, None, False
        )
        return obs, scaled, terminated, truncated, info

    def normalize(self, reward) -> np.ndarray:
        """Gymnasium 1.3's helper, kept for code that calls it: ``step`` does not.

        Merges the current discounted return of every environment (finite
        ones) into the statistics if they are learning, then returns
        ``reward / sqrt(var + epsilon)``.
        """
        returns = self._accumulated_reward
        self._merge(self.return_rms, returns, np.isfinite(returns) & self._update_running_mean)
        return formulas.scale_by_std(
            np,
            np.asarray(reward, np.float64),
            float(self.return_rms.var),
            self.epsilon,
            None,
            False,
        )

    def _merge(self, rms, returns: np.ndarray, selected: np.ndarray):
        """Merges the selected returns, as carried (float32), into ``rms``."""
        # The moments of the selected returns alone, as Gymnasium's np.mean /
        # np.var of acc[active]: from 8 environments on, NumPy's pairwise sums
        # of a where-masked full array round differently (up to 7e-8 relative).
        batch = np.asarray(returns[selected], self._accumulated_reward.dtype)
        if batch.size:
            batch_mean, batch_var = formulas.batch_moments(batch)
            rms.update_from_moments(batch_mean, batch_var, batch.size)
        return rms


class TransformReward(VectorRewardWrapper, gym.utils.RecordConstructorArgs):
    """Applies a function to the rewards of a vector environment (the whole array at once).

    Same as :class:`gymnasium.wrappers.vector.TransformReward`.

    Example:
        >>> import gymnasium as gym
        >>> from rewardnorm_jax.gymnasium.vector import TransformReward
        >>> envs = gym.make_vec("CartPole-v1", num_envs=3)
        >>> envs = TransformReward(envs, lambda r: 2 * r + 1)
        >>> _ = envs.reset(seed=123)
        >>> _, rew, _, _, _ = envs.step(envs.action_space.sample())
        >>> rew.tolist()
        [3.0, 3.0, 3.0]
        >>> envs.close()

    Change logs:
     * v0.1.0 - Initially added; a non-callable ``func`` raises ``ValueError``.
    """

    def __init__(self, env: VectorEnv, func: Callable[[np.ndarray], np.ndarray]):
        """Initialize the TransformReward wrapper.

        Args:
            env: The vector environment to wrap.
            func: The function to apply to the array of rewards.

        Raises:
            ValueError: If ``func`` is not callable.
        """
        if not callable(func):
            raise ValueError(f"func should be callable, got {func!r}.")
        gym.utils.RecordConstructorArgs.__init__(self, func=func)
        VectorRewardWrapper.__init__(self, env)
        self.func = func

    # Gymnasium annotates VectorRewardWrapper.rewards with a type variable its class does not bind.
    def rewards(self, reward: np.ndarray) -> np.ndarray:  # type: ignore[override, unused-ignore]
        """Applies ``func`` to the rewards."""
        return self.func(reward)


class ClipReward(TransformReward, gym.utils.RecordConstructorArgs):
    """Clips the rewards of a vector environment between a lower and an upper bound.

    The values of :class:`gymnasium.wrappers.vector.ClipReward`, computed with
    one ``numpy.clip`` over the whole array (Gymnasium clips environment by
    environment in a Python loop, overwriting the inner environment's array).

    Example:
        >>> import numpy as np
        >>> import gymnasium as gym
        >>> from rewardnorm_jax.gymnasium.vector import ClipReward
        >>> envs = gym.make_vec("MountainCarContinuous-v0", num_envs=3)
        >>> envs = ClipReward(envs, 0.0, 2.0)
        >>> _ = envs.action_space.seed(123)
        >>> obs, info = envs.reset(seed=123)
        >>> for _ in range(10):
        ...     obs, rew, term, trunc, info = envs.step(0.5 * np.ones((3, 1)))
        ...
        >>> envs.close()
        >>> rew
        array([0., 0., 0.])

    Change logs:
     * v0.1.0 - Initially added; the environment's reward array is not modified.
    """

    def __init__(self, env: VectorEnv, min_reward=None, max_reward=None):
        """Initialize the ClipReward wrapper.

        Args:
            env: The vector environment to wrap.
            min_reward: The lower bound (a number, an array or ``None``).
            max_reward: The upper bound (a number, an array or ``None``).

        Raises:
            InvalidBound: If both bounds are ``None`` or ``min_reward > max_reward``.
        """
        clip = clip_function(min_reward, max_reward)
        gym.utils.RecordConstructorArgs.__init__(self, min_reward=min_reward, max_reward=max_reward)
        TransformReward.__init__(self, env, clip)
