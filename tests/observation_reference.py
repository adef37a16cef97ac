"""Float64 NumPy transcriptions of the observation normalizers users have, for the tests.

Each follows its project's code line by line, in float64:

* ``GymnasiumReference``: ``gymnasium.wrappers.utils.RunningMeanStd`` (count
  1e-4, mean 0, variance 1; Chan's merge) with ``NormalizeObservation``'s
  ``(obs - mean) / sqrt(var + epsilon)``, updated before normalizing;
  Stable-Baselines3's ``VecNormalize`` is the same with ``np.clip(..., -10, 10)``;
* ``PureJaxRLReference``: purejaxrl ``wrappers.py`` ``NormalizeVecObservation``,
  whose mean and variance have the batch's shape ``(num_envs, *obs)``: every
  row is the same, and the statistics restart at every ``reset``;
* ``BraxReference``: ``brax/training/acme/running_statistics.py`` in Welford
  mode: count 0, mean 0, summed variance 0, std 1; the batch update
  ``mean += sum(x - mean) / count``, ``M += sum((x - old) * (x - new))``,
  ``std = clip(sqrt(M / count + std_eps), 1e-6, 1e6)``; ``normalize`` is
  ``(x - mean) / std``, clipped to ``max_abs_value`` if given.
* ``RslRlReference``: rsl_rl's ``EmpiricalNormalization``
  (github.com/leggedrobotics/rsl_rl, ``rsl_rl/modules/normalization.py`` at
  commit c281c32e5746e75570c1a29bfa78bca0200cc5ff): mean 0, variance 1, std 1,
  count 0; ``update`` returns at once if ``count >= until``, else
  ``count += b``, ``rate = b / count`` and the batch's mean and (biased)
  variance move the running ones by ``rate``; ``forward`` is
  ``(x - mean) / (std + eps)``, ``inverse`` ``y * (std + eps) + mean``.
  Its ``update`` comes before ``forward`` on every environment step
  (``rsl_rl/algorithms/ppo.py``, ``process_env_step``), as in ``step`` here.
"""

import numpy as np


class GymnasiumReference:
    """Gymnasium's RunningMeanStd and NormalizeObservation (SB3's VecNormalize with clip)."""

    def __init__(self, shape, epsilon=1e-8, clip=None):
        self.mean = np.zeros(shape, np.float64)
        self.var = np.ones(shape, np.float64)
        self.count = 1e-4
        self.epsilon, self.clip = epsilon, clip

    def update(self, batch):
        batch = np.asarray(batch, np.float64)
        batch_mean, batch_var, batch_count = batch.mean(0), batch.var(0), batch.shape[0]
        delta = batch_mean - self.mean
        total = self.count + batch_count
        new_mean = self.mean + delta * batch_count / total
        m2 = (
            self.var * self.count
            + batch_var * batch_count
            + delta**2 * self.count * batch_count / total
        )
        self.mean, self.var, self.count = new_mean, m2 / total, total

    def normalize(self, batch):
        out = (np.asarray(batch, np.float64) - self.mean) / np.sqrt(self.var + self.epsilon)
        return out if self.clip is None else np.clip(out, -self.clip, self.clip)

    def step(self, batch):
        self.update(batch)
        return self.normalize(batch)


class PureJaxRLReference:
    """purejaxrl's NormalizeVecObservation: statistics of the batch's shape, reset at reset."""

    def reset(self, obs):
        obs = np.asarray(obs, np.float64)
        self.mean, self.var, self.count = np.zeros_like(obs), np.ones_like(obs), 1e-4
        return self.step(obs)

    def step(self, obs):
        obs = np.asarray(obs, np.float64)
        batch_mean, batch_var, batch_count = obs.mean(axis=0), obs.var(axis=0), obs.shape[0]
        delta = batch_mean - self.mean
        tot_count = self.count + batch_count
        new_mean = self.mean + delta * batch_count / tot_count
        m_a = self.var * self.count
        m_b = batch_var * batch_count
        m2 = m_a + m_b + np.square(delta) * self.count * batch_count / tot_count
        self.mean, self.var, self.count = new_mean, m2 / tot_count, tot_count
        return (obs - self.mean) / np.sqrt(self.var + 1e-8)


class BraxReference:
    """Brax's running_statistics in Welford mode, float64."""

    def __init__(self, shape, std_eps=0.0, std_min=1e-6, std_max=1e6):
        self.count = 0
        self.mean = np.zeros(shape, np.float64)
        self.summed_variance = np.zeros(shape, np.float64)
        self.std = np.ones(shape, np.float64)
        self.std_eps, self.std_min, self.std_max = std_eps, std_min, std_max

    def update(self, batch):
        batch = np.asarray(batch, np.float64)
        axes = tuple(range(batch.ndim - self.mean.ndim))
        self.count += int(np.prod(batch.shape[: len(axes)]))
        diff_to_old_mean = batch - self.mean
        self.mean = self.mean + diff_to_old_mean.sum(axes) / self.count
        diff_to_new_mean = batch - self.mean
        self.summed_variance = self.summed_variance + (diff_to_old_mean * diff_to_new_mean).sum(
            axes
        )
        summed = np.maximum(self.summed_variance, 0)
        self.std = np.clip(np.sqrt(summed / self.count + self.std_eps), self.std_min, self.std_max)

    def normalize(self, batch, max_abs_value=None):
        out = (np.asarray(batch, np.float64) - self.mean) / self.std
        return out if max_abs_value is None else np.clip(out, -max_abs_value, max_abs_value)


class RslRlReference:
    """rsl_rl's EmpiricalNormalization, float64: ``step`` updates, then normalizes (FastTD3's)."""

    def __init__(self, shape, eps=1e-2, until=None):
        self.mean = np.zeros(shape, np.float64)
        self.var = np.ones(shape, np.float64)
        self.std = np.ones(shape, np.float64)
        self.count = 0
        self.eps, self.until = eps, until

    def update(self, x):
        if self.until is not None and self.count >= self.until:
            return
        x = np.asarray(x, np.float64)
        count_x = x.shape[0]
        self.count += count_x
        rate = count_x / self.count
        var_x = np.var(x, axis=0)
        mean_x = np.mean(x, axis=0)
        delta_mean = mean_x - self.mean
        self.mean = self.mean + rate * delta_mean
        self.var = self.var + rate * (var_x - self.var + delta_mean * (mean_x - self.mean))
        self.std = np.sqrt(self.var)

    def normalize(self, x):
        return (np.asarray(x, np.float64) - self.mean) / (self.std + self.eps)

    def inverse(self, y):
        return np.asarray(y, np.float64) * (self.std + self.eps) + self.mean

    def step(self, x):
        self.update(x)
        return self.normalize(x)
