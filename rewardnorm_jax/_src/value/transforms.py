r"""Invertible elementwise compressions of rewards and value targets.

Each function squashes large magnitudes while keeping the sign, and comes with
its exact inverse, so a network can be trained on transformed targets
:math:`f(G)` and its predictions read back as :math:`f^{-1}(\hat y)`:

* :func:`symlog` :math:`\operatorname{sign}(x)\log(1+|x|)`, inverse :func:`symexp`;
* :func:`signed_hyperbolic`
  :math:`\operatorname{sign}(x)(\sqrt{|x|+1}-1)+\varepsilon x`, inverse
  :func:`signed_parabolic`.

Inputs of any real dtype are accepted: floating inputs keep their dtype,
integer and boolean inputs are computed in JAX's default float dtype
(float32, or float64 under x64). Complex inputs are refused (a TypeError).

The ``*_reward`` factories wrap the forward functions as stateless
:class:`~rewardnorm_jax.RewardTransform` objects for :func:`~rewardnorm_jax.chain`.
"""

import dataclasses
import math
from typing import ClassVar

import jax
import jax.numpy as jnp

from rewardnorm_jax._src.core import base, builder, checks


def _as_float(x: jax.typing.ArrayLike, name: str = "x") -> jax.Array:
    """``x`` as an array of a floating dtype: its own if floating, else the default float.

    Raises:
      TypeError: for complex values (no sign to keep) or anything but real numbers.
    """
    x = jnp.asarray(checks.check_reward(name, x))
    if jnp.issubdtype(x.dtype, jnp.inexact):
        return x
    return x.astype(jnp.result_type(float))


def symlog(x: jax.typing.ArrayLike) -> jax.Array:
    r"""Symmetric logarithm :math:`\operatorname{sign}(x) \log(1 + |x|)`; inverse of :func:`symexp`.

    Example:
      >>> round(float(symlog(-99.0)), 4)
      -4.6052

    References:
      Hafner et al., `Mastering Diverse Domains through World Models
      <https://arxiv.org/abs/2301.04104>`_, 2023 (DreamerV3); rlax ``signed_logp1``.
    """
    x = _as_float(x)
    return jnp.sign(x) * jnp.log1p(jnp.abs(x))


def symexp(x: jax.typing.ArrayLike) -> jax.Array:
    r"""Symmetric exponential :math:`\operatorname{sign}(x) (e^{|x|} - 1)`.

    The inverse of :func:`symlog`.

    Example:
      >>> round(float(symexp(symlog(-99.0))), 3)
      -99.0
    """
    x = _as_float(x)
    return jnp.sign(x) * jnp.expm1(jnp.abs(x))


def _check_eps(eps) -> float:
    # A negative eps makes h non-monotonic (no inverse); NaN or inf poisons every output.
    if not (checks.is_real(eps, "eps") and math.isfinite(eps) and eps >= 0):
        raise ValueError(f"eps should be a finite number >= 0, got eps={eps!r}.")
    return float(eps)


def signed_hyperbolic(x: jax.typing.ArrayLike, eps: base.Real = 1e-3) -> jax.Array:
    r"""Signed hyperbolic transform of MuZero / R2D2; inverse of :func:`signed_parabolic`.

    .. math::
      h(x) = \operatorname{sign}(x)\left(\sqrt{|x| + 1} - 1\right) + \varepsilon x

    It grows like :math:`\sqrt{|x|}` for large :math:`|x|`; the linear term
    :math:`\varepsilon x` keeps the inverse Lipschitz. Computed as
    :math:`x / (\sqrt{|x| + 1} + 1) + \varepsilon x` (the same value), which
    keeps full relative precision near 0 where :math:`\sqrt{|x| + 1} - 1`
    cancels.

    Args:
      x: values (rewards, returns, value targets).
      eps: the linear coefficient :math:`\varepsilon \ge 0` (1e-3 in rlax,
        MuZero and R2D2).

    Returns:
      :math:`h(x)`, same shape as ``x``.

    Raises:
      ValueError: if ``eps`` is negative or not finite.

    Example:
      >>> round(float(signed_hyperbolic(3.0)), 6)   # sqrt(4) - 1 + 0.003
      1.003

    References:
      Pohlen et al., `Observe and Look Further: Achieving Consistent
      Performance on Atari <https://arxiv.org/abs/1805.11593>`_, 2018;
      rlax ``rlax/_src/transforms.py`` (``signed_hyperbolic``).
    """
    eps = _check_eps(eps)
    x = _as_float(x)
    checks.check_fits("eps", eps, x.dtype, may_vanish=True)
    return x / (jnp.sqrt(jnp.abs(x) + 1.0) + 1.0) + eps * x


def signed_parabolic(y: jax.typing.ArrayLike, eps: base.Real = 1e-3) -> jax.Array:
    r"""Exact inverse of :func:`signed_hyperbolic`.

    With :math:`u = \sqrt{|x| + 1} - 1 \ge 0`, :math:`h = |y|` solves
    :math:`\varepsilon u^2 + (1 + 2\varepsilon) u = h`, so

    .. math::
      u = \frac{2h}{(1 + 2\varepsilon) + \sqrt{(1 + 2\varepsilon)^2 + 4 \varepsilon h}},
      \qquad h^{-1}(y) = \operatorname{sign}(y)\, u\,(u + 2)

    the same root as rlax's ``signed_parabolic``
    (:math:`\frac{\sqrt{1 + 4\varepsilon(\varepsilon + 1 + |y|)} - 1}{2\varepsilon}
    = u + 1`), written without the cancellation of that form (which loses
    about four digits in float32 at :math:`\varepsilon = 10^{-3}`) and valid at
    :math:`\varepsilon = 0` too.

    Args:
      y: transformed values.
      eps: the :math:`\varepsilon` used by :func:`signed_hyperbolic`.

    Example:
      >>> round(float(signed_parabolic(signed_hyperbolic(-50.0))), 3)
      -50.0
    """
    eps = _check_eps(eps)
    y = _as_float(y, "y")
    checks.check_fits("eps", eps, y.dtype, may_vanish=True)
    h = jnp.abs(y)
    b = 1.0 + 2.0 * eps
    u = 2.0 * h / (b + jnp.sqrt(b * b + 4.0 * eps * h))
    return jnp.sign(y) * (u * (u + 2.0))


def symlog_reward() -> base.RewardTransform:
    """Compresses rewards with :func:`symlog` (DreamerV3).

    Example:
      >>> t = symlog_reward()
      >>> round(float(t.apply(t.init(), -99.0)), 4)
      -4.6052
    """
    return builder.stateless(symlog, SymlogRewardConfig())


def signed_hyperbolic_reward(eps: base.Real = 1e-3) -> base.RewardTransform:
    """Compresses rewards with :func:`signed_hyperbolic` (R2D2, MuZero).

    Raises:
      ValueError: if ``eps`` is negative or not finite.

    Example:
      >>> t = signed_hyperbolic_reward()
      >>> round(float(t.apply(t.init(), 8.0)), 6)   # sqrt(9) - 1 + 0.008
      2.008
    """
    config = SignedHyperbolicRewardConfig.checked(eps)
    return builder.stateless(lambda reward: signed_hyperbolic(reward, config.eps), config)


@dataclasses.dataclass(frozen=True)
class SymlogRewardConfig(base.Config):
    """:func:`symlog_reward` takes no option."""

    name: ClassVar[str] = "symlog_reward"


@dataclasses.dataclass(frozen=True)
class SignedHyperbolicRewardConfig(base.Config):
    """The ``eps`` of :func:`signed_hyperbolic_reward`: finite, >= 0."""

    name: ClassVar[str] = "signed_hyperbolic_reward"
    eps: float = 1e-3

    def __post_init__(self):
        object.__setattr__(self, "eps", _check_eps(self.eps))
