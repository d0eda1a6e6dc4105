"""Empirical privacy auditing: a statistically valid *lower* bound on ε from neighbouring runs.

A mechanism ``M`` is (ε, δ)-DP only if, for every pair of neighbouring datasets ``d0, d1`` and every
set of outputs ``S``,

.. math:: \\Pr[M(d_a) \\in S] \\le e^{ε} \\Pr[M(d_b) \\in S] + δ \\qquad (a, b) \\in \\{(0, 1), (1, 0)\\}.

:func:`audit` runs the mechanism many times on ``d0`` and on ``d1``, and for a test set ``S``
bounds the two probabilities with one-sided Clopper-Pearson intervals, which gives

.. math:: ε \\ge \\ln\\frac{\\underline{p}_a - δ}{\\overline{p}_b}

with the stated confidence.  A bound above the claimed ε *refutes* the claim (the mechanism, its
calibration or the claimed sensitivity is wrong); a bound below it proves nothing (auditing can
only find violations, never certify privacy).

How the test set is chosen (and why the bound is valid)
-------------------------------------------------------
The runs of each dataset are split at random (a fixed, data-independent permutation) into a
*selection* part (``select_fraction``, default 30%) and a held-out *evaluation* part.  The
candidates are: statistics (the output itself, or for vector outputs the projection on the
difference of the selection means and, for up to 16 coordinates, each coordinate), thresholds
``s > t`` and ``s <= t`` on a grid of at most 1024 selection quantiles, equalities ``s == k`` and
``s != k`` for integer-valued outputs, and both directions (d0 over d1, d1 over d0).  On the
selection part only, each candidate is scored by the ε bound it gives there with Bonferroni-
corrected Clopper-Pearson bounds over all candidates (a bound valid for all of them at once, which
keeps the choice away from extreme thresholds whose apparent advantage is luck), and the best one
is kept.  That single test is then evaluated on the held-out runs, which are independent of the
choice, so its two one-sided Clopper-Pearson bounds (each at level ``(1 - confidence) / 2``,
joined by a union bound) hold with probability at least ``confidence``.  No multiple-comparison
correction is needed for the reported bound because only one test ever touches the held-out runs.

Finite samples cap what can be shown: with ``m`` held-out runs per dataset even a mechanism with no
noise at all yields at most about ``ln(m / ln(2 / (1 - confidence))))``; the result reports this
ceiling as :attr:`AuditResult.epsilon_ceiling`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import numpy as np
from numpy.typing import NDArray
from scipy import stats

from dpopt._validation import check_int, check_probability
from dpopt.exceptions import InvalidParameterError
from dpopt.randomness import RNGLike, SecureRNG, spawn

__all__ = ["AuditResult", "audit", "audit_outputs"]

D = TypeVar("D")

_TEST_FAMILIES = ("threshold", "equality")
_MIN_RUNS = 100
_MAX_THRESHOLDS = 1024
_MAX_ATOMS = 1000
_MAX_COORDS = 16
_SPLIT_SEED = 0x5EED_A0D1  # seeds only the data-independent shuffle that splits the runs


@dataclass(frozen=True)
class AuditResult:
    """Outcome of an empirical privacy audit.

    Attributes
    ----------
    epsilon_lower : float
        Lower confidence bound on the ε of the mechanism at ``delta`` (0 if no violation of
        ε = 0 was detected).  With probability at least ``confidence`` the true ε is at least
        this large.
    delta : float
        The δ at which ε was bounded.
    confidence : float
        Confidence level of the bound.
    n_runs : int
        Runs per dataset (the smaller count if the two sample sets differ in size).
    best_test : str
        The chosen test: statistic, test set and direction, e.g. ``"x > 0.98 [d1 over d0]"``
        meaning ``Pr[M(d1) ∈ S] <= e^ε Pr[M(d0) ∈ S] + δ`` was violated for ``S = {x > 0.98}``.
    threshold : float
        The threshold (or the atom ``k`` of an equality test) of ``best_test``.
    rates : tuple of float
        Held-out empirical rates ``(Pr[M(d0) ∈ S], Pr[M(d1) ∈ S])`` of the chosen test set.
    n_eval : int
        Held-out runs per dataset used for the bound (the smaller count if they differ).
    epsilon_ceiling : float
        Largest bound these held-out run counts could show at all (reached by a mechanism without
        noise).  If ``epsilon_lower`` is at the ceiling, more runs can show a larger bound.
    """

    epsilon_lower: float
    delta: float
    confidence: float
    n_runs: int
    best_test: str
    threshold: float
    rates: tuple[float, float]
    n_eval: int = 0
    epsilon_ceiling: float = math.inf

    def refutes(self, claimed_epsilon: float) -> bool:
        """Whether the audit refutes the claim "(``claimed_epsilon``, ``delta``)-DP".

        Parameters
        ----------
        claimed_epsilon : float
            The ε claimed for the mechanism (at this result's ``delta``), ``>= 0``.

        Returns
        -------
        bool
            ``epsilon_lower > claimed_epsilon``.  ``False`` does not certify the claim.
        """
        if isinstance(claimed_epsilon, bool) or not isinstance(
            claimed_epsilon, int | float | np.integer | np.floating
        ):
            raise InvalidParameterError("claimed_epsilon: expected a real number")
        c = float(claimed_epsilon)
        if math.isnan(c) or c < 0:
            raise InvalidParameterError("claimed_epsilon: must be a number >= 0")
        return self.epsilon_lower > c

    def __str__(self) -> str:
        pct = f"{100 * self.confidence:g}%"
        return (
            f"Privacy audit: epsilon >= {self.epsilon_lower:.4g} at delta={self.delta:g} "
            f"with {pct} confidence\n"
            f"  runs per dataset: {self.n_runs} ({self.n_eval} held out for the bound)\n"
            f"  best test: {self.best_test}; held-out rates d0={self.rates[0]:.4g}, "
            f"d1={self.rates[1]:.4g}\n"
            f"  largest bound these runs can show: {self.epsilon_ceiling:.4g}"
        )


# ---------------------------------------------------------------------------------------------
# Clopper-Pearson bounds and the per-test ε bound


def _cp_lower(k: NDArray[Any], n: int, alpha: float) -> NDArray[np.float64]:
    """One-sided Clopper-Pearson lower bound of level ``1 - alpha`` for ``k`` successes in ``n``."""
    k = np.asarray(k, dtype=float)
    with np.errstate(all="ignore"):
        lo = stats.beta.ppf(alpha, k, n - k + 1)
    return np.where(k <= 0, 0.0, lo)


def _cp_upper(k: NDArray[Any], n: int, alpha: float) -> NDArray[np.float64]:
    """One-sided Clopper-Pearson upper bound of level ``1 - alpha`` for ``k`` successes in ``n``."""
    k = np.asarray(k, dtype=float)
    with np.errstate(all="ignore"):
        hi = stats.beta.ppf(1 - alpha, k + 1, n - k)
    return np.where(k >= n, 1.0, hi)


def _eps_bound(
    k_a: NDArray[Any], n_a: int, k_b: NDArray[Any], n_b: int, delta: float, alpha: float
) -> NDArray[np.float64]:
    """``ln((lower(p_a) - delta) / upper(p_b))``, each bound at level ``alpha / 2`` (``-inf`` if vacuous)."""
    lo = _cp_lower(k_a, n_a, alpha / 2) - delta
    hi = _cp_upper(k_b, n_b, alpha / 2)
    with np.errstate(divide="ignore", invalid="ignore"):
        eps = np.log(np.where(lo > 0, lo, np.nan) / hi)
    return np.where(np.isnan(eps), -np.inf, eps)


# ---------------------------------------------------------------------------------------------
# Candidate tests


@dataclass(frozen=True)
class _Stat:
    name: str
    weights: NDArray[np.float64] | None  # None: the scalar itself; else projection weights


@dataclass(frozen=True)
class _Test:
    stat: _Stat
    op: str  # ">", "<=", "==", "!="
    t: float
    a: int  # numerator dataset (0 or 1)
    score: float


def _apply(stat: _Stat, x: NDArray[np.float64]) -> NDArray[np.float64]:
    if stat.weights is None:
        return x if x.ndim == 1 else x[:, 0]
    return np.asarray(x @ stat.weights, dtype=float)


def _counts(sorted_s: NDArray[np.float64], op: str, t: NDArray[np.float64]) -> NDArray[np.int64]:
    n = sorted_s.shape[0]
    right = np.searchsorted(sorted_s, t, side="right")
    if op == ">":
        return n - right
    if op == "<=":
        return right
    eq = right - np.searchsorted(sorted_s, t, side="left")
    return eq if op == "==" else n - eq


def _is_integer_valued(s: NDArray[np.float64]) -> bool:
    return bool(np.all(s == np.round(s)))


def _candidate_stats(x0: NDArray[np.float64], x1: NDArray[np.float64], custom: bool) -> list[_Stat]:
    if x0.ndim == 1:
        return [_Stat("statistic" if custom else "x", None)]
    dim = x0.shape[1]
    out: list[_Stat] = []
    diff = x1.mean(axis=0) - x0.mean(axis=0)
    norm = float(np.linalg.norm(diff))
    if norm > 0 and np.isfinite(norm):
        out.append(_Stat("projection on mean difference", diff / norm))
    if dim <= _MAX_COORDS or not out:
        for j in range(min(dim, _MAX_COORDS)):
            w = np.zeros(dim)
            w[j] = 1.0
            out.append(_Stat(f"x[{j}]", w))
    return out


def _select(
    x0: NDArray[np.float64],
    x1: NDArray[np.float64],
    families: tuple[str, ...],
    explicit: bool,
    delta: float,
    alpha: float,
    custom: bool,
) -> _Test:
    """Best test on the selection runs.

    Every candidate is scored by the ε bound it gives on the selection runs with Bonferroni-
    corrected Clopper-Pearson bounds (level ``alpha / K`` over all ``K`` candidate tests and
    directions), i.e. by a bound that holds for all candidates at once.  This penalises tests whose
    apparent advantage rests on a handful of runs (extreme thresholds), the "winner's curse" of
    picking the maximum of many noisy scores, and makes the chosen test hold up on the held-out runs.
    The correction only affects which test is chosen; the reported bound comes from held-out runs.
    """
    n0, n1 = x0.shape[0], x1.shape[0]
    cands: list[tuple[_Stat, str, NDArray[np.float64], NDArray[np.int64], NDArray[np.int64]]] = []
    for stat in _candidate_stats(x0, x1, custom):
        s0 = np.sort(_apply(stat, x0))
        s1 = np.sort(_apply(stat, x1))
        pooled = np.concatenate([s0, s1])
        grids: list[tuple[str, NDArray[np.float64]]] = []
        if "threshold" in families:
            u = np.unique(pooled)
            if u.size > _MAX_THRESHOLDS:
                levels = np.linspace(0, 1, _MAX_THRESHOLDS)
                u = np.unique(np.quantile(pooled, levels, method="inverted_cdf"))
            grids += [(">", u), ("<=", u)]
        if "equality" in families:
            atoms = np.unique(pooled)
            if _is_integer_valued(pooled) and atoms.size <= _MAX_ATOMS:
                grids += [("==", atoms), ("!=", atoms)]
            elif explicit:
                raise InvalidParameterError(
                    "tests: 'equality' needs integer-valued outputs (or statistic values) with at "
                    f"most {_MAX_ATOMS} distinct values; use 'threshold' or pass a statistic"
                )
        cands += [(stat, op, t, _counts(s0, op, t), _counts(s1, op, t)) for op, t in grids]
    if not cands:
        raise InvalidParameterError("tests: no candidate test could be formed for these outputs")
    alpha_sel = alpha / (2 * sum(t.size for _, _, t, _, _ in cands))
    best: _Test | None = None
    for stat, op, t, c0, c1 in cands:
        for a, scores in (
            (0, _eps_bound(c0, n0, c1, n1, delta, alpha_sel)),
            (1, _eps_bound(c1, n1, c0, n0, delta, alpha_sel)),
        ):
            i = int(np.argmax(scores))
            if best is None or scores[i] > best.score:
                best = _Test(stat, op, float(t[i]), a, float(scores[i]))
    assert best is not None
    return best


# ---------------------------------------------------------------------------------------------
# Output handling


def _to_array(samples: Any, name: str, statistic: Callable[[Any], float] | None) -> NDArray[np.float64]:
    """Samples (one per run) as a float array of shape (n,) or (n, dim)."""
    if statistic is not None:
        try:
            items = list(samples)
        except TypeError:
            raise InvalidParameterError(f"{name}: expected a sequence of mechanism outputs") from None
        vals = [statistic(o) for o in items]
        try:
            arr = np.asarray(vals, dtype=float)
        except (TypeError, ValueError):
            raise InvalidParameterError("statistic: must return one real number per output") from None
        if arr.ndim != 1:
            raise InvalidParameterError("statistic: must return one real number per output")
    else:
        try:
            arr = np.asarray(samples, dtype=float)
        except (TypeError, ValueError):
            raise InvalidParameterError(
                f"{name}: outputs are not numeric arrays of one fixed shape; pass statistic= to map "
                "each output to a real number"
            ) from None
        if arr.ndim == 0:
            raise InvalidParameterError(f"{name}: expected one output per run, got a scalar")
        if arr.ndim > 2:
            arr = arr.reshape(arr.shape[0], -1)
        if arr.ndim == 2 and arr.shape[1] == 1:
            arr = arr[:, 0]
    if arr.shape[0] < _MIN_RUNS:
        raise InvalidParameterError(f"{name}: need at least {_MIN_RUNS} runs, got {arr.shape[0]}")
    if not np.all(np.isfinite(arr)):
        raise InvalidParameterError(
            f"{name}: outputs (or statistic values) contain NaN or infinite entries; map them to "
            "finite numbers with statistic="
        )
    return arr


def _check_families(tests: str | Sequence[str]) -> tuple[tuple[str, ...], bool]:
    if isinstance(tests, str):
        if tests == "auto":
            return _TEST_FAMILIES, False
        tests = [tests]
    if not isinstance(tests, Sequence) or len(tests) == 0:
        raise InvalidParameterError(
            "tests: expected 'auto' or a non-empty sequence of 'threshold'/'equality'"
        )
    fams = []
    for t in tests:
        if not isinstance(t, str) or t not in _TEST_FAMILIES:
            raise InvalidParameterError(f"tests: each entry must be one of {_TEST_FAMILIES}")
        fams.append(t)
    return tuple(dict.fromkeys(fams)), True


def _split(n: int, fraction: float) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    perm = np.random.default_rng(_SPLIT_SEED).permutation(n)
    n_sel = min(max(round(fraction * n), 1), n - 1)
    return perm[:n_sel], perm[n_sel:]


def audit_outputs(
    samples0: Any,
    samples1: Any,
    *,
    delta: float = 0.0,
    confidence: float = 0.95,
    statistic: Callable[[Any], float] | None = None,
    tests: str | Sequence[str] = "auto",
    select_fraction: float = 0.3,
) -> AuditResult:
    """Lower-bound ε from outputs already drawn on two neighbouring datasets.

    Parameters
    ----------
    samples0, samples1 : array_like or sequence
        Independent outputs of the mechanism on ``d0`` and on ``d1``, one per run (at least 100
        each), in any order (the split is a fixed random permutation, so even sorted samples are
        split fairly).  Scalars give an array of shape ``(n,)``; vector outputs an array of shape
        ``(n, ...)`` with the same trailing shape for both sets.  Outputs of any other kind need
        ``statistic``.
    delta : float, default 0
        The δ of the claim to audit, ``0 <= delta < 1``.
    confidence : float, default 0.95
        Confidence level of the lower bound, ``0 < confidence < 1``.
    statistic : callable, optional
        Maps one output to a real number; the tests are then run on that number.  Without it,
        scalar outputs are used as they are and vector outputs are reduced by the candidate
        statistics described in the module docstring.
    tests : {"auto", "threshold", "equality"} or sequence of them, default "auto"
        Test families.  ``"threshold"``: ``s > t`` and ``s <= t``.  ``"equality"``: ``s == k`` and
        ``s != k`` (integer-valued ``s`` only).  ``"auto"`` uses thresholds always and equalities
        when ``s`` is integer-valued with at most 1000 distinct values.
    select_fraction : float, default 0.3
        Fraction of each sample set used to choose the test; the rest gives the bound.

    Returns
    -------
    AuditResult

    Raises
    ------
    InvalidParameterError
        On a bad parameter, fewer than 100 samples per set, non-numeric or non-finite outputs
        without a suitable ``statistic``, or outputs of different shapes on the two datasets.

    Examples
    --------
    Outputs drawn elsewhere (here: a count released with Laplace noise of scale 0.5, i.e. ε = 2,
    audited against a claim of ε = 1):

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> on_d0 = 10 + rng.laplace(0.0, 0.5, size=20_000)
    >>> on_d1 = 11 + rng.laplace(0.0, 0.5, size=20_000)
    >>> result = audit_outputs(on_d0, on_d1)
    >>> result.refutes(1.0)
    True
    """
    delta = check_probability(delta, "delta")
    confidence = check_probability(confidence, "confidence", open_left=True)
    select_fraction = check_probability(select_fraction, "select_fraction", open_left=True)
    if statistic is not None and not callable(statistic):
        raise InvalidParameterError("statistic: expected a callable mapping one output to a real number")
    families, explicit = _check_families(tests)
    x0 = _to_array(samples0, "samples0 (outputs on d0)", statistic)
    x1 = _to_array(samples1, "samples1 (outputs on d1)", statistic)
    if x0.shape[1:] != x1.shape[1:]:
        raise InvalidParameterError(
            f"samples0 and samples1: outputs differ in shape ({x0.shape[1:]} vs {x1.shape[1:]}); "
            "the mechanism must return outputs of one structure on both datasets"
        )
    alpha = 1.0 - confidence
    sel0, ev0 = _split(x0.shape[0], select_fraction)
    sel1, ev1 = _split(x1.shape[0], select_fraction)
    test = _select(x0[sel0], x1[sel1], families, explicit, delta, alpha, statistic is not None)

    s0 = np.sort(_apply(test.stat, x0[ev0]))
    s1 = np.sort(_apply(test.stat, x1[ev1]))
    m0, m1 = s0.shape[0], s1.shape[0]
    t = np.array([test.t])
    c = (int(_counts(s0, test.op, t)[0]), int(_counts(s1, test.op, t)[0]))
    m = (m0, m1)
    a, b = test.a, 1 - test.a
    eps = float(_eps_bound(np.array([c[a]]), m[a], np.array([c[b]]), m[b], delta, alpha)[0])
    ceiling = max(
        float(_eps_bound(np.array([m0]), m0, np.array([0]), m1, delta, alpha)[0]),
        float(_eps_bound(np.array([m1]), m1, np.array([0]), m0, delta, alpha)[0]),
    )
    return AuditResult(
        epsilon_lower=max(0.0, eps),
        delta=delta,
        confidence=confidence,
        n_runs=min(x0.shape[0], x1.shape[0]),
        best_test=f"{test.stat.name} {test.op} {test.t:.6g} [d{a} over d{b}]",
        threshold=test.t,
        rates=(c[0] / m0, c[1] / m1),
        n_eval=min(m0, m1),
        epsilon_ceiling=max(0.0, ceiling),
    )


def _run(
    mechanism: Callable[[Any, Any], Any] | Callable[[Any, Any, int], Any],
    data: Any,
    rng: np.random.Generator | SecureRNG,
    n_runs: int,
    vectorized: bool,
) -> Any:
    if vectorized:
        out = cast(Callable[[Any, Any, int], Any], mechanism)(data, rng, n_runs)
        if isinstance(out, np.ndarray | list | tuple) and len(out) == n_runs:
            return out
        raise InvalidParameterError(
            f"mechanism: with vectorized=True it must return a sequence of n_runs={n_runs} outputs"
        )
    mech = cast(Callable[[Any, Any], Any], mechanism)
    if isinstance(rng, SecureRNG):
        return [mech(data, SecureRNG()) for _ in range(n_runs)]
    return [mech(data, child) for child in rng.spawn(n_runs)]


def audit(
    mechanism: Callable[[D, Any], Any] | Callable[[D, Any, int], Any],
    d0: D,
    d1: D,
    *,
    n_runs: int = 10_000,
    delta: float = 0.0,
    confidence: float = 0.95,
    statistic: Callable[[Any], float] | None = None,
    rng: RNGLike = None,
    tests: str | Sequence[str] = "auto",
    vectorized: bool = False,
    select_fraction: float = 0.3,
) -> AuditResult:
    """Empirically lower-bound the ε of ``mechanism`` on the neighbouring datasets ``d0`` and ``d1``.

    Parameters
    ----------
    mechanism : callable
        ``mechanism(data, rng)`` returns one output, drawing all its randomness from ``rng`` (a
        :class:`numpy.random.Generator`; a :class:`~dpopt.randomness.SecureRNG` when
        ``rng="secure"``).  With ``vectorized=True``, ``mechanism(data, rng, n)`` returns ``n``
        independent outputs (an array whose first axis has length ``n``), which is much faster for
        cheap mechanisms.
    d0, d1 : object
        Neighbouring datasets (under the relation the privacy claim is about).
    n_runs : int, default 10000
        Runs per dataset, at least 100.  ``select_fraction`` of them choose the test, the rest
        give the bound; the largest bound that can be shown grows like ``ln(n_runs)``.
    delta : float, default 0
        The δ of the claim to audit, ``0 <= delta < 1``.
    confidence : float, default 0.95
        Confidence level of the lower bound, ``0 < confidence < 1``.
    statistic : callable, optional
        Maps one output to a real number (needed for outputs that are not numeric arrays).
    rng : int, Generator, SeedSequence, "secure" or None
        Randomness.  Each run gets an independent child stream (one child per dataset when
        ``vectorized``), so the same seed gives the same result.  With ``"secure"`` every run gets
        a fresh :class:`~dpopt.randomness.SecureRNG` (to audit the hardened samplers of
        :mod:`dpopt.mechanisms`; the mechanism must then accept a ``SecureRNG``).
    tests : {"auto", "threshold", "equality"} or sequence of them, default "auto"
        Test families, see :func:`audit_outputs`.
    vectorized : bool, default False
        Whether ``mechanism`` takes a third argument ``n`` and returns ``n`` outputs.
    select_fraction : float, default 0.3
        Fraction of the runs used to choose the test.

    Returns
    -------
    AuditResult
        ``result.refutes(claimed_epsilon)`` tells whether the claim is refuted.

    Raises
    ------
    InvalidParameterError
        On a bad parameter or mechanism outputs that cannot be compared (see :func:`audit_outputs`).

    Notes
    -----
    The bound is valid for the two given datasets only; a mechanism can be private on these and
    not on others, so choose ``d0, d1`` where a violation is most likely (e.g. a record at the
    declared bound).  Auditing never certifies privacy.

    Examples
    --------
    >>> import numpy as np
    >>> def laplace_count(data, rng, n):
    ...     return sum(data) + rng.laplace(0.0, 1.0, size=n)  # epsilon = 1 for a counting query
    >>> res = audit(laplace_count, [1] * 10, [1] * 11, n_runs=20_000, rng=0, vectorized=True)
    >>> res.refutes(1.0), res.epsilon_lower > 0.5
    (False, True)
    """
    if not callable(mechanism):
        raise InvalidParameterError("mechanism: expected a callable mechanism(data, rng)")
    n_runs = check_int(n_runs, "n_runs", minimum=_MIN_RUNS)
    delta = check_probability(delta, "delta")
    confidence = check_probability(confidence, "confidence", open_left=True)
    check_probability(select_fraction, "select_fraction", open_left=True)
    _check_families(tests)
    if statistic is not None and not callable(statistic):
        raise InvalidParameterError("statistic: expected a callable mapping one output to a real number")
    if not isinstance(vectorized, bool):
        raise InvalidParameterError("vectorized: expected True or False")
    g0, g1 = spawn(rng, ["audit/d0", "audit/d1"])
    out0 = _run(mechanism, d0, g0, n_runs, vectorized)
    out1 = _run(mechanism, d1, g1, n_runs, vectorized)
    return audit_outputs(
        out0,
        out1,
        delta=delta,
        confidence=confidence,
        statistic=statistic,
        tests=tests,
        select_fraction=select_fraction,
    )
