"""Exact discrete noise samplers for ``rng="secure"`` (hardened) mode.

Why
---
Textbook Laplace sampling on doubles, ``x + b * sign * log(U)`` with ``U`` a uniform double, is
not differentially private (Mironov, "On significance of the least significant bits for
differential privacy", CCS 2012).  ``U`` takes only finitely many values, ``log`` and the product are
rounded, and the set of doubles that ``x + noise`` can take depends on ``x``: the output
distribution has *holes* that differ between neighbouring inputs, so a single release can reveal
which input produced it (Mironov recovered whole databases this way).  Gaussian samplers built on
Box-Muller / ziggurat on doubles have the same problem.

The fix implemented here (following Mironov's "snapping" idea and Canonne, Kamath & Steinke,
"The Discrete Gaussian for Differential Privacy", NeurIPS 2020, "CKS" below):

1. Work on a public power-of-two grid ``g = 2**k``.  The mechanism snaps its (public-shape) query
   value to the grid with :func:`snap_to_grid`.
   Ties round upwards (see :func:`snap_to_grid` for why not half-to-even).
2. Draw *integer* noise exactly from the discrete Laplace / discrete Gaussian on Z, with the scale
   expressed in grid units as an exact :class:`fractions.Fraction`, using only integer arithmetic
   and uniform random integers (CKS Algorithms 1-3, :class:`ExactSampler`).
3. Release ``snapped_value + g * integer``.  Both terms are multiples of ``g`` and, while
   ``|snapped_value + g * integer| / g < 2**53``, the float sum is exact, so the released double
   has exactly the discrete mechanism's distribution: there are no floating-point holes.  Anything
   computed from the release afterwards is post-processing.

Randomness comes from a ``randbelow(n) -> int`` callable, by default :func:`secrets.randbelow`
(the OS CSPRNG).  Tests may inject ``random.Random(seed).randrange`` for reproducibility; that is
*not* secure and must not be used for releases.

Grid choice (default granularity)
---------------------------------
:func:`default_granularity` returns the largest power of two ``g`` with
``g <= scale / (2**10 * m)`` where ``m = n`` (number of noisy entries) for Laplace noise and
``m = sqrt(n)`` for Gaussian noise.  So the scale is between 1024*m and 2048*m grid units (the
samplers' cost does not grow with the scale: Python ints are arbitrary precision), the snapping
error is at most ``g / 2`` per entry, and the sensitivity inflation caused by snapping (below) is at
most ``scale / 1024`` in the norm the mechanism uses (L1 for Laplace, L2 for Gaussian).

Privacy on the grid (the caveats)
---------------------------------
* Sensitivity must be rounded up to the grid.  If ``|f(D) - f(D')| <= Delta`` then the snapped
  values differ by at most ``g * ceil(Delta / g)`` for a scalar, and by at most ``Delta + g * n``
  (L1) / ``Delta + g * sqrt(n)`` (L2) for ``n``-vectors (each coordinate moves by <= g/2).
  :func:`grid_sensitivity` computes these (rounded up).  With the grid sensitivity ``Delta_g``:

  - discrete Laplace of scale ``b`` gives pure ``epsilon = Delta_g / b`` (exactly as the
    continuous Laplace, since ``Delta_g / g`` is an integer);
  - discrete Gaussian of parameter ``sigma`` gives ``rho = Delta_g**2 / (2 sigma**2)``-zCDP
    (CKS Theorem 4 and its multivariate version): at least as good as the continuous Gaussian with
    the same ``sigma`` and sensitivity ``Delta_g``.

* The noise is *not* exactly the continuous law.  Its variance is slightly *smaller*:

  - ``secure_laplace``: ``Var = g**2 / (2 sinh(g / (2 b))**2) = 2 b**2 - g**2 / 6 + O(g**4 / b**2)``
    (:func:`discrete_laplace_variance`, in grid units ``2 q / (1 - q)**2`` with ``q = exp(-g/b)``);
  - ``secure_gaussian``: with ``s = sigma / g`` (Poisson summation),
    ``Var = g**2 * (s**2 - 8 pi**2 s**4 sum_{k>=1} k**2 e^{-2 pi**2 s**2 k**2}
    / (1 + 2 sum_{k>=1} e^{-2 pi**2 s**2 k**2}))`` which is ``< sigma**2`` (consistent with CKS,
    who bound the variance by ``sigma**2``); for the default ``s >= 1024`` the deficit is below
    ``exp(-2e7)``, i.e. zero in double precision (:func:`discrete_gaussian_variance`).

  Variance-based utility statements for the continuous noise therefore remain valid; tail
  bounds hold up to the lattice (e.g. Laplace: ``P[|noise| >= k g] = 2 q**k / (1 + q)`` against
  ``q**k`` for the continuous law).
* Timing: the samplers run in data-independent but *noise-dependent* time (loops whose length
  depends on the drawn value); an adversary timing a single release learns something about the
  noise.  Do not expose per-release timing to untrusted parties.
* Magnitudes: exactness of ``value + noise`` needs ``|value| / g < 2**53`` (:func:`snap_to_grid`
  raises otherwise).
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Callable
from fractions import Fraction
from numbers import Rational
from typing import Any

import numpy as np
from numpy.typing import NDArray

from dpopt._validation import check_array, check_int, check_nonneg, check_positive
from dpopt.exceptions import InvalidParameterError

__all__ = [
    "GRID_BITS",
    "ExactSampler",
    "default_granularity",
    "discrete_gaussian_variance",
    "discrete_laplace_variance",
    "grid_sensitivity",
    "power_of_two_grid",
    "secure_gaussian",
    "secure_laplace",
    "snap_to_grid",
]

GRID_BITS = 10
"""The default grid puts the noise scale between ``2**GRID_BITS`` and ``2**(GRID_BITS+1)`` grid units
(times ``n`` for Laplace, ``sqrt(n)`` for Gaussian noise on ``n`` entries)."""

_EXACT_LIMIT = 2.0**53

RandBelow = Callable[[int], int]


def _as_fraction(value: Any, name: str, *, allow_zero: bool = False) -> Fraction:
    """Exact rational value of an int / Fraction / finite float, checked > 0 (or >= 0)."""
    if isinstance(value, Rational) and not isinstance(value, bool):
        frac = Fraction(int(value)) if isinstance(value, np.integer) else Fraction(value)
        if frac < 0 or (frac == 0 and not allow_zero):
            raise InvalidParameterError(f"{name}: must be {'>= 0' if allow_zero else '> 0'}")
        return frac
    x = check_nonneg(value, name) if allow_zero else check_positive(value, name)
    return Fraction(x)


class ExactSampler:
    """Exact samplers of CKS (2020), driven by ``randbelow(n)`` (uniform integer in ``[0, n)``).

    Parameters
    ----------
    randbelow
        Source of uniform random integers; default :func:`secrets.randbelow` (OS CSPRNG).  For
        reproducible tests pass ``random.Random(seed).randrange`` (not secure).

    All arithmetic is on Python integers / :class:`~fractions.Fraction`; no floating point is used,
    so the output distributions are exactly the stated ones (given a perfect ``randbelow``).
    """

    __slots__ = ("_rb",)

    def __init__(self, randbelow: RandBelow = secrets.randbelow) -> None:
        if not callable(randbelow):
            raise InvalidParameterError("randbelow: expected a callable randbelow(n) -> int")
        self._rb = randbelow

    def __repr__(self) -> str:
        return f"ExactSampler(randbelow={getattr(self._rb, '__qualname__', self._rb)!r})"

    # -- integer-parameter kernels (no validation; hot loops) ---------------------------------

    def _bernoulli_exp1(self) -> bool:
        """Bernoulli(exp(-1)) (CKS Algorithm 1 with gamma = 1; the first draw Bernoulli(1) is skipped)."""
        rb = self._rb
        k = 2
        while rb(k) == 0:  # Bernoulli(1/k)
            k += 1
        return bool(k & 1)

    def _bernoulli_exp(self, n: int, d: int) -> bool:
        """Bernoulli(exp(-n/d)) for integers n >= 0, d >= 1 (CKS Algorithm 1)."""
        rb = self._rb
        while n > d:  # gamma > 1: exp(-gamma) = exp(-1) * exp(-(gamma - 1))
            if not self._bernoulli_exp1():
                return False
            n -= d
        # 0 <= gamma = n/d <= 1: von Neumann's trick, A_k ~ Bernoulli(gamma / k)
        k = 1
        while rb(d * k) < n:
            k += 1
        return bool(k & 1)

    def _discrete_laplace(self, s: int, t: int) -> int:
        """Discrete Laplace on Z with pmf proportional to exp(-|x| s / t) (CKS Algorithm 2)."""
        rb = self._rb
        while True:
            u = rb(t)
            if not self._bernoulli_exp(u, t):
                continue
            v = 0
            while self._bernoulli_exp1():
                v += 1
            y = (u + t * v) // s  # X = U + tV ~ Geometric(1 - e^{-1/t}); Y ~ Geometric(1 - e^{-s/t})
            negative = rb(2) == 1
            if negative and y == 0:
                continue
            return -y if negative else y

    def _discrete_gaussian(self, n: int, d: int) -> int:
        """Discrete Gaussian on Z with pmf proportional to exp(-x^2 d / (2 n)) (CKS Algorithm 3)."""
        t = math.isqrt(n // d) + 1  # floor(sigma) + 1
        two_n_d_t2 = 2 * n * d * t * t
        dt = d * t
        while True:
            y = self._discrete_laplace(1, t)
            # gamma = (|y| - sigma^2/t)^2 / (2 sigma^2) = (|y| d t - n)^2 / (2 n d t^2)
            a = abs(y) * dt - n
            if self._bernoulli_exp(a * a, two_n_d_t2):
                return y

    # -- public, validated API -----------------------------------------------------------------

    def bernoulli(self, p: Fraction | int | float) -> int:
        """One draw of Bernoulli(p) for rational ``p`` in [0, 1]."""
        frac = _as_fraction(p, "p", allow_zero=True)
        if frac > 1:
            raise InvalidParameterError("p: must lie in [0, 1]")
        return int(self._rb(frac.denominator) < frac.numerator)

    def bernoulli_exp(self, gamma: Fraction | int | float) -> int:
        """One draw of Bernoulli(exp(-gamma)) for rational ``gamma >= 0`` (CKS Algorithm 1)."""
        g = _as_fraction(gamma, "gamma", allow_zero=True)
        return int(self._bernoulli_exp(g.numerator, g.denominator))

    def discrete_laplace(self, scale: Fraction | int | float) -> int:
        """One draw of the discrete Laplace: ``P[X = x] ∝ exp(-|x| / scale)`` on Z (CKS Algorithm 2).

        ``scale = t/s`` in lowest terms; a float is converted exactly (it is a dyadic rational).
        """
        b = _as_fraction(scale, "scale")
        return self._discrete_laplace(b.denominator, b.numerator)

    def discrete_gaussian(self, sigma2: Fraction | int | float) -> int:
        """One draw of the discrete Gaussian: ``P[X = x] ∝ exp(-x² / (2 sigma2))`` on Z (CKS Alg. 3).

        ``sigma2`` is the rational parameter sigma² (not the variance, which is slightly smaller).
        """
        v = _as_fraction(sigma2, "sigma2")
        return self._discrete_gaussian(v.numerator, v.denominator)

    def exp_weights_index(self, numerators: list[int], denominator: int) -> int:
        """Index ``i`` drawn with probability ``∝ exp(-numerators[i] / denominator)``, exactly.

        Rejection sampling: propose ``i`` uniformly (``randbelow(m)``) and accept it with a
        Bernoulli(exp(-n_i/d)) (CKS Algorithm 1), so ``P[i] ∝ (1/m) exp(-n_i/d)``.  Needs integers
        ``n_i >= 0`` with ``min n_i = 0``: then a round accepts with probability ``>= 1/m`` and the
        expected number of rounds is ``<= m``.  Like the other samplers it runs in noise- and
        weight-dependent time.
        """
        m = len(numerators)
        if m == 0:
            raise InvalidParameterError("numerators: need at least one candidate")
        d = int(denominator)
        if d < 1 or min(numerators) != 0:
            raise InvalidParameterError(
                "numerators/denominator: need integers >= 0 with minimum 0 and d >= 1"
            )
        rb = self._rb
        while True:
            i = rb(m)
            if self._bernoulli_exp(int(numerators[i]), d):
                return i

    def discrete_laplace_list(self, scale: Fraction | int | float, count: int) -> list[int]:
        """``count`` independent discrete Laplace draws (see :meth:`discrete_laplace`)."""
        b = _as_fraction(scale, "scale")
        count = check_int(count, "count", minimum=0)
        s, t, draw = b.denominator, b.numerator, self._discrete_laplace
        return [draw(s, t) for _ in range(count)]

    def discrete_gaussian_list(self, sigma2: Fraction | int | float, count: int) -> list[int]:
        """``count`` independent discrete Gaussian draws (see :meth:`discrete_gaussian`)."""
        v = _as_fraction(sigma2, "sigma2")
        count = check_int(count, "count", minimum=0)
        n, d, draw = v.numerator, v.denominator, self._discrete_gaussian
        return [draw(n, d) for _ in range(count)]


# ----------------------------------------------------------------------------------------------
# Grid helpers
# ----------------------------------------------------------------------------------------------


def _largest_pow2_at_most(x: float, name: str) -> float:
    if not (x > 0.0 and math.isfinite(x)):
        raise InvalidParameterError(f"{name}: too small to define a grid; pass granularity explicitly")
    exponent = math.frexp(x)[1]  # x = mantissa * 2**exponent, mantissa in [0.5, 1)
    return math.ldexp(1.0, exponent - 1)


def _check_granularity(granularity: Any) -> float:
    g = check_positive(granularity, "granularity")
    if math.frexp(g)[0] != 0.5:
        raise InvalidParameterError(
            "granularity: must be a power of two (2**k, k may be negative) so grid arithmetic is exact"
        )
    return g


def _shape(size: Any) -> tuple[int, ...]:
    if isinstance(size, tuple | list):
        return tuple(check_int(s, "size", minimum=0) for s in size)
    return (check_int(size, "size", minimum=0),)


def power_of_two_grid(quantity: float, *, bits: int = GRID_BITS) -> float:
    """The largest power of two ``<= quantity / 2**bits`` (a public grid for snapping)."""
    return _largest_pow2_at_most(check_positive(quantity, "quantity") / 2.0**bits, "quantity")


def default_granularity(scale: float, size: int | tuple[int, ...] = 1, *, kind: str = "laplace") -> float:
    """Default grid ``g = 2**k`` for noise of scale ``scale`` on ``size`` entries (module docstring).

    ``g`` is the largest power of two ``<= scale / (2**GRID_BITS * m)`` with ``m = n`` for
    ``kind="laplace"`` (L1 sensitivity) and ``m = sqrt(n)`` for ``kind="gaussian"`` (L2), ``n`` the
    number of entries.  The grid depends only on public quantities.
    """
    b = check_positive(scale, "scale")
    n = max(math.prod(_shape(size)), 1)
    if kind == "laplace":
        m = float(n)
    elif kind == "gaussian":
        m = math.sqrt(n)
    else:
        raise InvalidParameterError("kind: must be 'laplace' or 'gaussian'")
    return _largest_pow2_at_most(b / (2.0**GRID_BITS * m), "scale")


def snap_to_grid(values: Any, granularity: float) -> NDArray[np.float64]:
    """Round ``values`` to the nearest multiple of ``granularity`` (a power of two), ties upward.

    Computes ``g * floor(x / g + 1/2)`` exactly (no double rounding: division and multiplication by
    a power of two, ``floor`` and ``u - floor(u)`` are exact in binary floating point).  Ties go
    towards +inf on purpose: ``x -> floor(x/g + 1/2)`` commutes with shifts, which is what makes
    :func:`grid_sensitivity` (``g * ceil(Delta / g)``) a valid bound; numpy's round-half-to-even
    would not be (``0.5 g -> 0`` but ``1.5 g -> 2 g``: distance ``g`` becomes ``2 g``).

    Raises :class:`InvalidParameterError` for NaN/inf entries, a non-power-of-two granularity, or
    entries with ``|value| / granularity >= 2**53`` (beyond which ``value + noise`` could no longer
    be computed exactly).
    """
    g = _check_granularity(granularity)
    arr = check_array(values, "values", dtype=float)
    units = arr / g
    if units.size and not np.all(np.abs(units) < _EXACT_LIMIT):
        raise InvalidParameterError(
            "values: too large for the grid (|value| / granularity must be < 2**53); use a coarser grid"
        )
    low = np.floor(units)
    return (low + (units - low >= 0.5)) * g


def grid_sensitivity(sensitivity: float, granularity: float, *, dim: int = 1, norm: float = 2) -> float:
    """Sensitivity of the snapped query, rounded up: what privacy accounting must use on the grid.

    For ``dim == 1`` (or ``norm=inf``): ``g * ceil(sensitivity / g)``.  For ``dim`` coordinates in
    the L1 / L2 norm: ``sensitivity + g * dim`` / ``sensitivity + g * sqrt(dim)`` (each snapped
    coordinate moves by at most ``g / 2``), rounded up to a float upper bound.
    """
    delta = check_positive(sensitivity, "sensitivity")
    g = _check_granularity(granularity)
    dim = check_int(dim, "dim", minimum=1)
    if not math.isfinite(delta / g):
        raise InvalidParameterError(
            "granularity: too fine for this sensitivity (sensitivity / granularity overflows)"
        )
    if dim == 1 or norm == math.inf:
        return g * math.ceil(delta / g)
    if norm == 1:
        extra = g * dim
    elif norm == 2:
        extra = math.nextafter(g * math.sqrt(dim), math.inf)
    else:
        raise InvalidParameterError("norm: must be 1, 2 or inf")
    return math.nextafter(delta + extra, math.inf)


def discrete_laplace_variance(scale: float) -> float:
    """Variance of the discrete Laplace with scale ``scale`` (in grid units).

    ``1 / (2 sinh²(1 / (2 scale)))``, equal to ``2 q / (1 - q)**2`` with ``q = exp(-1/scale)``;
    always ``< 2 scale**2`` (by about 1/6).
    """
    b = check_positive(scale, "scale")
    return 0.5 / math.sinh(0.5 / b) ** 2


def discrete_gaussian_variance(sigma2: float) -> float:
    """Variance of the discrete Gaussian with parameter ``sigma2`` (in grid units); ``< sigma2``.

    Uses ``sigma2 - 8 pi² sigma2² S2 / (1 + 2 S0)`` with ``S0 = sum_{k>=1} e^{-2 pi² sigma2 k²}``,
    ``S2 = sum_{k>=1} k² e^{-2 pi² sigma2 k²}`` (Poisson summation) for ``sigma2 >= 1``, and the
    direct sum over the support for smaller ``sigma2``.
    """
    v = check_positive(sigma2, "sigma2")
    if v < 1.0:
        xs = np.arange(-60, 61, dtype=float)
        w = np.exp(-(xs**2) / (2.0 * v))
        return float(np.sum(xs**2 * w) / np.sum(w))
    s0 = s2 = 0.0
    for k in range(1, 20):
        term = math.exp(-2.0 * math.pi**2 * v * k * k)
        if term == 0.0:
            break
        s0 += term
        s2 += k * k * term
    return v - 8.0 * math.pi**2 * v * v * s2 / (1.0 + 2.0 * s0)


# ----------------------------------------------------------------------------------------------
# Vectorised wrappers used by the mechanisms
# ----------------------------------------------------------------------------------------------


def _to_grid_array(ints: list[int], shape: tuple[int, ...], g: float) -> NDArray[np.float64]:
    if ints and max(abs(min(ints)), abs(max(ints))) >= _EXACT_LIMIT:  # pragma: no cover - astronomically rare
        raise InvalidParameterError("noise exceeds the exact float range of the grid; use a coarser grid")
    return np.asarray(ints, dtype=np.float64).reshape(shape) * g


def secure_laplace(
    scale: float,
    size: int | tuple[int, ...],
    *,
    granularity: float | None = None,
    sampler: ExactSampler | None = None,
) -> NDArray[np.float64]:
    """Laplace-like noise of scale ``scale`` on the grid ``granularity * Z``, sampled exactly.

    Returns ``g * X`` with ``X`` i.i.d. discrete Laplace of scale ``scale / g`` (an exact Fraction),
    ``P[noise = g x] ∝ exp(-|g x| / scale)``.  ``granularity`` defaults to
    ``default_granularity(scale, size, kind="laplace")``; the caller must snap the query value to
    the *same* grid (:func:`snap_to_grid`) and account with :func:`grid_sensitivity`, giving
    ``epsilon = grid_sensitivity / scale``.  Variance:
    ``g² * discrete_laplace_variance(scale / g) = 2 scale² - g²/6 + ...``.
    """
    b = check_positive(scale, "scale")
    shape = _shape(size)
    g = _check_granularity(granularity) if granularity is not None else default_granularity(b, shape)
    sampler = ExactSampler() if sampler is None else sampler
    if not isinstance(sampler, ExactSampler):
        raise InvalidParameterError("sampler: expected an ExactSampler or None")
    units = Fraction(b) / Fraction(g)
    return _to_grid_array(sampler.discrete_laplace_list(units, math.prod(shape)), shape, g)


def secure_gaussian(
    sigma: float,
    size: int | tuple[int, ...],
    *,
    granularity: float | None = None,
    sampler: ExactSampler | None = None,
) -> NDArray[np.float64]:
    """Gaussian-like noise of parameter ``sigma`` on the grid ``granularity * Z``, sampled exactly.

    Returns ``g * X`` with ``X`` i.i.d. discrete Gaussian with parameter ``(sigma / g)²`` (an exact
    Fraction), ``P[noise = g x] ∝ exp(-(g x)² / (2 sigma²))``.  ``granularity`` defaults to
    ``default_granularity(sigma, size, kind="gaussian")``; snap the query value to the same grid
    and account with the L2 :func:`grid_sensitivity` ``Delta_g``: ``rho = Delta_g² / (2 sigma²)``-zCDP.
    The variance is ``g² * discrete_gaussian_variance((sigma/g)²)`` ``< sigma²`` (equal in double
    precision for the default grid).
    """
    sd = check_positive(sigma, "sigma")
    shape = _shape(size)
    g = (
        _check_granularity(granularity)
        if granularity is not None
        else default_granularity(sd, shape, kind="gaussian")
    )
    sampler = ExactSampler() if sampler is None else sampler
    if not isinstance(sampler, ExactSampler):
        raise InvalidParameterError("sampler: expected an ExactSampler or None")
    units2 = (Fraction(sd) / Fraction(g)) ** 2
    return _to_grid_array(sampler.discrete_gaussian_list(units2, math.prod(shape)), shape, g)
