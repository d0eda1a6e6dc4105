"""Tests of the exact discrete samplers (``dpopt._discrete``) used in ``rng="secure"`` mode.

All statistical tests use fixed seeds (``random.Random(seed).randrange`` injected into
:class:`ExactSampler`), so they are deterministic; the tolerances are nevertheless honest (4-5
standard errors, chi-square / KS p-values > 1e-3) so that they would pass for most seeds.
"""

from __future__ import annotations

import math
import random
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from dpopt._discrete import (
    GRID_BITS,
    ExactSampler,
    default_granularity,
    discrete_gaussian_variance,
    discrete_laplace_variance,
    grid_sensitivity,
    power_of_two_grid,
    secure_gaussian,
    secure_laplace,
    snap_to_grid,
)
from dpopt.exceptions import InvalidParameterError

P_MIN = 1e-3


def seeded(seed: int) -> ExactSampler:
    return ExactSampler(random.Random(seed).randrange)


# ------------------------------------------------------------------------------------------------
# helpers: exact pmfs and a chi-square test with pooled tails
# ------------------------------------------------------------------------------------------------


def laplace_pmf(scale: Fraction, xs: np.ndarray) -> np.ndarray:
    q = math.exp(-1.0 / float(scale))
    return (1 - q) / (1 + q) * q ** np.abs(xs)


def gaussian_pmf(sigma2: Fraction, xs: np.ndarray) -> np.ndarray:
    v = float(sigma2)
    support = np.arange(-int(60 * math.sqrt(v)) - 60, int(60 * math.sqrt(v)) + 61)
    norm = np.sum(np.exp(-(support.astype(float) ** 2) / (2 * v)))
    return np.exp(-(xs.astype(float) ** 2) / (2 * v)) / norm


def chisquare_pvalue(samples: list[int], pmf, min_expected: float = 5.0) -> float:
    """Chi-square goodness of fit of integer samples to a symmetric pmf on Z (tails pooled)."""
    n = len(samples)
    k = 0
    while n * pmf(np.array([k + 1]))[0] >= min_expected:
        k += 1
    xs = np.arange(-k, k + 1)
    centre = pmf(xs)
    tail = (1.0 - centre.sum()) / 2.0
    expected = n * np.concatenate([[tail], centre, [tail]])
    arr = np.asarray(samples)
    observed = np.concatenate([[np.sum(arr < -k)], [np.sum(arr == x) for x in xs], [np.sum(arr > k)]]).astype(
        float
    )
    if tail * n < min_expected:  # merge tiny tails into the outermost bins
        observed = np.concatenate(
            [[observed[0] + observed[1]], observed[2:-2], [observed[-2] + observed[-1]]]
        )
        expected = np.concatenate(
            [[expected[0] + expected[1]], expected[2:-2], [expected[-2] + expected[-1]]]
        )
    expected *= n / expected.sum()
    return float(stats.chisquare(observed, expected).pvalue)


def on_grid(x: np.ndarray, g: float) -> bool:
    units = x / g
    return bool(np.all(units == np.rint(units)))


# ------------------------------------------------------------------------------------------------
# Bernoulli(exp(-gamma)) (CKS Algorithm 1)
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "gamma", [Fraction(1, 7), Fraction(1, 2), Fraction(1), Fraction(5, 2), Fraction(3), Fraction(37, 10)]
)
def test_bernoulli_exp_frequency(gamma: Fraction) -> None:
    sampler = seeded(int(gamma * 1000))
    n = 20_000
    hits = sum(sampler.bernoulli_exp(gamma) for _ in range(n))
    p = math.exp(-float(gamma))
    se = math.sqrt(p * (1 - p) / n)
    assert abs(hits / n - p) <= 4 * se


def test_bernoulli_exp_edge_cases() -> None:
    sampler = seeded(1)
    assert all(sampler.bernoulli_exp(0) == 1 for _ in range(1000))
    assert sum(sampler.bernoulli_exp(Fraction(40)) for _ in range(2000)) == 0  # p = 4e-18
    # a float gamma is converted exactly; 0.25 = 1/4
    n = 20_000
    p = math.exp(-0.25)
    hits = sum(sampler.bernoulli_exp(0.25) for _ in range(n))
    assert abs(hits / n - p) <= 4 * math.sqrt(p * (1 - p) / n)


def test_bernoulli_rational() -> None:
    sampler = seeded(2)
    n = 20_000
    hits = sum(sampler.bernoulli(Fraction(2, 7)) for _ in range(n))
    assert abs(hits / n - 2 / 7) <= 4 * math.sqrt((2 / 7) * (5 / 7) / n)
    assert all(sampler.bernoulli(1) == 1 for _ in range(100))
    assert all(sampler.bernoulli(0) == 0 for _ in range(100))


def test_exp_weights_index_matches_exact_probabilities() -> None:
    # P[i] ∝ exp(-n_i / d): the exact law of the secure exponential mechanism
    nums, d = [0, 3, 7, 20, 1], 4
    sampler = seeded(3)
    n = 12_000
    counts = np.bincount([sampler.exp_weights_index(nums, d) for _ in range(n)], minlength=5)
    w = np.exp(-np.array(nums) / d)
    assert stats.chisquare(counts, w / w.sum() * n).pvalue > P_MIN
    # power: the law with the rate doubled (a planted factor-2 error) is rejected
    w_bad = np.exp(-2 * np.array(nums) / d)
    assert stats.chisquare(counts, w_bad / w_bad.sum() * n).pvalue < P_MIN
    assert seeded(4).exp_weights_index([0], 1) == 0
    with pytest.raises(InvalidParameterError, match="minimum 0"):
        sampler.exp_weights_index([1, 2], 1)
    with pytest.raises(InvalidParameterError, match="at least one"):
        sampler.exp_weights_index([], 1)


def test_power_of_two_grid() -> None:
    assert power_of_two_grid(1.0) == 2.0**-GRID_BITS
    assert power_of_two_grid(3.0) == 2.0 ** (1 - GRID_BITS)
    assert power_of_two_grid(0.7, bits=0) == 0.5
    with pytest.raises(InvalidParameterError):
        power_of_two_grid(0.0)


# ------------------------------------------------------------------------------------------------
# discrete Laplace (CKS Algorithm 2) and discrete Gaussian (CKS Algorithm 3)
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("scale", [Fraction(2, 5), Fraction(3, 2), Fraction(10)])
def test_discrete_laplace_chisquare(scale: Fraction) -> None:
    samples = seeded(11).discrete_laplace_list(scale, 20_000)
    assert chisquare_pvalue(samples, lambda xs: laplace_pmf(scale, xs)) > P_MIN
    # symmetric, variance = 2q/(1-q)^2
    arr = np.asarray(samples, dtype=float)
    var = discrete_laplace_variance(float(scale))
    q = math.exp(-1 / float(scale))
    assert var == pytest.approx(2 * q / (1 - q) ** 2, rel=1e-12)
    se_var = math.sqrt(np.mean(arr**4) - np.mean(arr**2) ** 2) / math.sqrt(arr.size)
    assert abs(np.mean(arr**2) - var) <= 5 * se_var


@pytest.mark.parametrize("sigma2", [Fraction(1, 4), Fraction(9, 4), Fraction(20)])
def test_discrete_gaussian_chisquare(sigma2: Fraction) -> None:
    samples = seeded(12).discrete_gaussian_list(sigma2, 20_000)
    assert chisquare_pvalue(samples, lambda xs: gaussian_pmf(sigma2, xs)) > P_MIN
    # second moment against the exact (discrete) variance, which is < sigma2
    arr = np.asarray(samples, dtype=float)
    var = discrete_gaussian_variance(float(sigma2))
    assert var <= float(sigma2)
    se_var = math.sqrt(np.mean(arr**4) - np.mean(arr**2) ** 2) / math.sqrt(arr.size)
    assert abs(np.mean(arr**2) - var) <= 5 * se_var


@pytest.mark.parametrize("param", [Fraction(2, 5), Fraction(7, 3), 3, 0.75])
def test_single_draw_methods_match_list_methods(param: Fraction | int | float) -> None:
    single, batch = seeded(14), seeded(14)
    assert [single.discrete_laplace(param) for _ in range(300)] == batch.discrete_laplace_list(param, 300)
    assert [single.discrete_gaussian(param) for _ in range(300)] == batch.discrete_gaussian_list(param, 300)


def test_discrete_gaussian_small_sigma_variance_is_below_sigma2() -> None:
    # sigma2 = 1/4: discrete variance ~0.2150, clearly below 0.25; the sampler must reproduce it
    arr = np.asarray(seeded(13).discrete_gaussian_list(Fraction(1, 4), 40_000), dtype=float)
    var = discrete_gaussian_variance(0.25)
    assert var == pytest.approx(0.2150, abs=1e-3)
    se_var = math.sqrt(np.mean(arr**4) - np.mean(arr**2) ** 2) / math.sqrt(arr.size)
    assert abs(np.mean(arr**2) - var) <= 5 * se_var
    assert abs(np.mean(arr**2) - 0.25) > 10 * se_var


@pytest.mark.parametrize("sigma2", [0.05, 0.3, 0.999, 1.0, 1.7, 4.0, 30.0])
def test_discrete_gaussian_variance_formula_matches_direct_sum(sigma2: float) -> None:
    xs = np.arange(-2000, 2001, dtype=float)
    w = np.exp(-(xs**2) / (2 * sigma2))
    direct = float(np.sum(xs**2 * w) / np.sum(w))
    assert discrete_gaussian_variance(sigma2) == pytest.approx(direct, rel=1e-12, abs=1e-300)
    assert discrete_gaussian_variance(sigma2) <= sigma2


@pytest.mark.parametrize("scale", [0.3, 1.0, 7.5])
def test_discrete_laplace_variance_matches_direct_sum(scale: float) -> None:
    xs = np.arange(-5000, 5001, dtype=float)
    w = np.exp(-np.abs(xs) / scale)
    direct = float(np.sum(xs**2 * w) / np.sum(w))
    assert discrete_laplace_variance(scale) == pytest.approx(direct, rel=1e-12)
    assert discrete_laplace_variance(scale) < 2 * scale**2


def test_reproducible_with_seed_and_sensitive_to_it() -> None:
    a = secure_gaussian(3.0, 50, sampler=seeded(5))
    b = secure_gaussian(3.0, 50, sampler=seeded(5))
    c = secure_gaussian(3.0, 50, sampler=seeded(6))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    assert seeded(7).discrete_laplace_list(4, 30) == seeded(7).discrete_laplace_list(4, 30)


def test_default_randomness_is_secrets() -> None:
    x = secure_laplace(2.0, 200)
    y = secure_gaussian(2.0, (10, 20))
    assert x.shape == (200,) and y.shape == (10, 20)
    assert on_grid(x, default_granularity(2.0, 200)) and len(np.unique(x)) > 50
    assert on_grid(y, default_granularity(2.0, 200, kind="gaussian"))


# ------------------------------------------------------------------------------------------------
# vectorised wrappers on the power-of-two grid
# ------------------------------------------------------------------------------------------------


def test_default_granularity_is_documented_power_of_two() -> None:
    for scale in [1e-6, 0.3, 1.0, 1000.0, 1024.0, 2047.9, 1e12]:
        g = default_granularity(scale)
        assert math.frexp(g)[0] == 0.5
        assert 2**GRID_BITS <= scale / g < 2 ** (GRID_BITS + 1)
        g_lap = default_granularity(scale, (10, 10))
        assert 2**GRID_BITS * 100 <= scale / g_lap < 2 ** (GRID_BITS + 1) * 100
        g_gauss = default_granularity(scale, 100, kind="gaussian")
        assert 2**GRID_BITS * 10 <= scale / g_gauss < 2 ** (GRID_BITS + 1) * 10
    assert default_granularity(1000.0) == 0.5


@pytest.mark.parametrize("scale", [0.37, 5.0, 1234.5])
def test_secure_laplace_grid_moments_and_ks(scale: float) -> None:
    n = 20_000
    g = default_granularity(scale, n)
    x = secure_laplace(scale, n, sampler=seeded(21))
    assert x.shape == (n,) and x.dtype == np.float64
    assert on_grid(x, g)
    var = 2 * scale**2
    assert abs(x.mean()) <= 4 * math.sqrt(var / n)
    # Var(sample variance) for Laplace = (mu4 - sigma^4)/n = 20 b^4 / n
    assert abs(x.var() - var) <= 5 * math.sqrt(20 / n) * scale**2
    ref = np.random.default_rng(21).laplace(0.0, scale, n)
    assert stats.ks_2samp(x, ref).pvalue > P_MIN


@pytest.mark.parametrize("sigma", [0.37, 5.0, 1234.5])
def test_secure_gaussian_grid_moments_and_ks(sigma: float) -> None:
    n = 20_000
    g = default_granularity(sigma, n, kind="gaussian")
    x = secure_gaussian(sigma, n, sampler=seeded(22))
    assert on_grid(x, g)
    assert abs(x.mean()) <= 4 * sigma / math.sqrt(n)
    assert abs(x.var() - sigma**2) <= 5 * math.sqrt(2 / n) * sigma**2
    ref = np.random.default_rng(22).normal(0.0, sigma, n)
    assert stats.ks_2samp(x, ref).pvalue > P_MIN


def test_wrong_scale_is_detected_by_ks() -> None:
    """Sanity check of the KS test's power: a factor-1.1 scale error must be rejected."""
    n = 20_000
    x = secure_gaussian(5.0, n, sampler=seeded(23))
    ref = np.random.default_rng(23).normal(0.0, 5.5, n)
    assert stats.ks_2samp(x, ref).pvalue < P_MIN


def test_explicit_coarse_grid_units_are_exact() -> None:
    """With granularity 1/2, noise/g must follow the integer law of scale (resp. sigma) / g."""
    n = 20_000
    lap = secure_laplace(1.0, n, granularity=0.5, sampler=seeded(31))
    units = np.rint(lap / 0.5).astype(int)
    np.testing.assert_array_equal(units * 0.5, lap)
    assert chisquare_pvalue(units.tolist(), lambda xs: laplace_pmf(Fraction(2), xs)) > P_MIN
    gau = secure_gaussian(1.5, n, granularity=0.5, sampler=seeded(32))
    units = np.rint(gau / 0.5).astype(int)
    np.testing.assert_array_equal(units * 0.5, gau)
    assert chisquare_pvalue(units.tolist(), lambda xs: gaussian_pmf(Fraction(9), xs)) > P_MIN
    # same stream, same integers: the wrapper is exactly g * (integer sampler)
    ints = seeded(33).discrete_laplace_list(Fraction(2), 100)
    np.testing.assert_array_equal(
        secure_laplace(1.0, 100, granularity=0.5, sampler=seeded(33)), 0.5 * np.array(ints)
    )


def test_sizes_and_shapes() -> None:
    s = seeded(3)
    assert secure_laplace(1.0, 0, sampler=s).shape == (0,)
    assert secure_laplace(1.0, (2, 3), sampler=s).shape == (2, 3)
    assert secure_gaussian(1.0, (4,), sampler=s).shape == (4,)
    assert secure_gaussian(1.0, np.int64(5), sampler=s).shape == (5,)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------------
# snapping and sensitivity on the grid
# ------------------------------------------------------------------------------------------------


def test_snap_to_grid_basic() -> None:
    g = 2.0**-3
    x = np.array([[0.0, 0.06, 0.0625, 0.07, -1.3], [1e6 + 0.01, -0.1875, 3.0, 1 / 3, -2.5e-5]])
    s = snap_to_grid(x, g)
    assert s.shape == x.shape
    assert on_grid(s, g)
    assert np.all(np.abs(s - x) <= g / 2)
    np.testing.assert_array_equal(snap_to_grid(s, g), s)
    # ties go up (not half-to-even, which would break the ceil sensitivity bound)
    np.testing.assert_array_equal(
        snap_to_grid([0.0625, 0.1875, -0.0625, -0.1875], g), [0.125, 0.25, 0.0, -0.125]
    )
    # no double rounding just below a tie (0.5 - 2^-54 units)
    below = (0.5 - 2.0**-54) * g
    assert snap_to_grid(below, g) == 0.0 and snap_to_grid(-below, g) == 0.0
    assert snap_to_grid(-2.5e-300, g) == 0.0


@settings(max_examples=200, deadline=None)
@given(
    i=st.integers(-(2**40), 2**40),
    j=st.integers(-(2**40), 2**40),
    k=st.integers(-30, 10),
)
def test_grid_sensitivity_bounds_snapped_difference_scalar(i: int, j: int, k: int) -> None:
    # x, x' on the dyadic grid 2^-20, so x - x' is exact
    x, xp = i * 2.0**-20, j * 2.0**-20
    delta = abs(x - xp)
    if delta == 0:
        return
    g = 2.0**k
    bound = grid_sensitivity(delta, g)
    assert bound >= delta and on_grid(np.array([bound]), g)
    assert abs(float(snap_to_grid(x, g)) - float(snap_to_grid(xp, g))) <= bound


def test_grid_sensitivity_vectors() -> None:
    rng = np.random.default_rng(0)
    g, d = 0.25, 50
    for _ in range(200):
        x = rng.normal(0, 3, d)
        xp = x + rng.normal(0, 0.2, d)
        diff = snap_to_grid(x, g) - snap_to_grid(xp, g)
        assert np.linalg.norm(diff) <= grid_sensitivity(float(np.linalg.norm(x - xp)), g, dim=d)
        assert np.abs(diff).sum() <= grid_sensitivity(float(np.abs(x - xp).sum()), g, dim=d, norm=1)
    # near worst case: every coordinate straddles a rounding boundary
    x = np.full(d, 0.5 * g - 1e-9)
    xp = np.full(d, 0.5 * g + 1e-9)
    diff = snap_to_grid(xp, g) - snap_to_grid(x, g)
    assert np.linalg.norm(diff) == pytest.approx(g * math.sqrt(d))
    assert np.linalg.norm(diff) <= grid_sensitivity(float(np.linalg.norm(xp - x)), g, dim=d)
    assert grid_sensitivity(1.0, 0.25) == 1.0
    assert grid_sensitivity(1.1, 0.25) == 1.25
    assert grid_sensitivity(1.0, 0.25, dim=4, norm=math.inf) == 1.0


# ------------------------------------------------------------------------------------------------
# argument validation
# ------------------------------------------------------------------------------------------------

BAD_POSITIVE = [0, 0.0, -1.0, -2, float("nan"), float("inf"), -float("inf"), True, "1", None]


@pytest.mark.parametrize("bad", BAD_POSITIVE)
def test_wrappers_reject_bad_scale(bad: object) -> None:
    with pytest.raises(InvalidParameterError):
        secure_laplace(bad, 3)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError):
        secure_gaussian(bad, 3)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError):
        default_granularity(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [*[b for b in BAD_POSITIVE if b is not None], 3.0, 0.3, 1.5])
def test_reject_bad_granularity(bad: object) -> None:
    with pytest.raises(InvalidParameterError):
        secure_laplace(1.0, 3, granularity=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError):
        secure_gaussian(1.0, 3, granularity=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError):
        snap_to_grid([1.0], bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), True, Fraction(-1, 2), "2"])
def test_exact_sampler_rejects_bad_parameters(bad: object) -> None:
    s = seeded(0)
    with pytest.raises(InvalidParameterError):
        s.discrete_laplace(bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError):
        s.discrete_gaussian(bad)  # type: ignore[arg-type]


def test_other_invalid_arguments() -> None:
    s = seeded(0)
    for bad in [-1, Fraction(-1, 3), float("nan"), float("inf")]:
        with pytest.raises(InvalidParameterError):
            s.bernoulli_exp(bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError):
        s.bernoulli(Fraction(3, 2))
    with pytest.raises(InvalidParameterError):
        ExactSampler(42)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError):
        secure_laplace(1.0, 3, sampler=random.Random(0))  # type: ignore[arg-type]
    for bad_size in [-1, 2.5, (2, -1), "3"]:
        with pytest.raises(InvalidParameterError):
            secure_gaussian(1.0, bad_size)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError):
        snap_to_grid([1.0, float("nan")], 0.5)
    with pytest.raises(InvalidParameterError):
        snap_to_grid([2.0**60], 2.0**-3)  # |x|/g >= 2^53: x + noise would not be exact
    with pytest.raises(InvalidParameterError):
        default_granularity(1.0, 10, kind="uniform")
    with pytest.raises(InvalidParameterError):
        default_granularity(5e-324)  # scale / 2^10 underflows to 0
    with pytest.raises(InvalidParameterError):
        grid_sensitivity(1.0, 0.5, dim=3, norm=3)
    with pytest.raises(InvalidParameterError):
        grid_sensitivity(0.0, 0.5)
