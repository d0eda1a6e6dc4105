"""The LMI rate certificate of DP-GDwS (kuru-fig4.1, spec §3.8): validated against known rates."""

from __future__ import annotations

import importlib
import sys

import numpy as np
import pytest

pytest.importorskip("cvxpy")

from dpopt.exceptions import InvalidParameterError
from dpopt.experiments import kuru_lmi
from dpopt.experiments.kuru_lmi import certified_rate, quadratic_rate

HB_CASES = [(0.1, 0.1, 1 / 13.5), (0.5, 0.5, 0.01), (0.3, 0.3, 0.1), (0.0164, 0.1, 1 / 13.5)]


@pytest.mark.parametrize(("a", "kappa"), [(0.5, 10.0), (1.0, 10.0), (0.01, 100.0), (1.5, 4.0)])
def test_gradient_descent_rate_is_recovered(a: float, kappa: float) -> None:
    """β = 1 is gradient descent with step a/L: the known rate max(|1 - a/κ|, |1 - a|)."""
    known = max(abs(1 - a / kappa), abs(1 - a))
    cert = certified_rate(a, 1.0, 1 / kappa, tolerance=1e-4)
    assert cert.quadratic_rate == pytest.approx(known, abs=1e-12)
    # the certificate is tight for GD: 1 - ρ² within the bisection's relative tolerance
    assert 1 - cert.rate**2 == pytest.approx(1 - known**2, rel=2e-4)
    assert cert.min_eigenvalue >= -1e-9


@pytest.mark.parametrize(("a", "beta", "m"), HB_CASES)
def test_certificate_never_beats_quadratics(a: float, beta: float, m: float) -> None:
    cert = certified_rate(a, beta, m)
    assert np.isfinite(cert.rate)
    assert cert.rate >= cert.quadratic_rate - 1e-9
    # the certificate is checked: P ⪰ 0 and the LMI matrix ⪰ 0 at the returned ρ
    P = np.array(cert.P)
    assert np.linalg.eigvalsh(P).min() >= -1e-9 and cert.c0 >= 0


def test_planted_sign_error_is_exposed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Power: with the strong-convexity multiplier's sign flipped, the 'certificate' beats quadratics."""
    right = [certified_rate(*case).rate for case in HB_CASES[:3]]
    original = kuru_lmi.lmi_matrices

    def flipped(a: float, beta: float, m: float) -> dict[str, np.ndarray]:
        mats = dict(original(a, beta, m))
        mats["X2"] = -mats["X2"]
        return mats

    monkeypatch.setattr(kuru_lmi, "lmi_matrices", flipped)
    wrong = [certified_rate(*case) for case in HB_CASES[:3]]
    assert all(w.rate < w.quadratic_rate - 1e-3 for w in wrong)
    assert all(r > w.rate for r, w in zip(right, wrong, strict=True))


def test_quadratic_rate_matches_eigenvalues() -> None:
    a, beta, m = 0.3, 0.2, 0.05
    qs = np.linspace(m, 1.0, 301)
    radii = [
        np.abs(np.linalg.eigvals(np.array([[2 - beta - a * q, -(1 - beta)], [1.0, 0.0]]))).max() for q in qs
    ]
    assert quadratic_rate(a, beta, m) == pytest.approx(max(radii), abs=1e-6)


def test_unstable_iteration_is_not_certified() -> None:
    """Heavy ball with step 1/L and momentum 0.9 at κ = 100 has no certificate (Lessard et al.)."""
    cert = certified_rate(1.0, 0.1, 0.01)
    assert np.isnan(cert.rate)


@pytest.mark.parametrize(
    ("kwargs", "word"),
    [({"step_L": 0.0}, "step_L"), ({"smoothing": 1.5}, "smoothing"), ({"mu_over_L": 2.0}, "mu_over_L")],
)
def test_bad_arguments_are_refused(kwargs: dict[str, float], word: str) -> None:
    args = {"step_L": 0.1, "smoothing": 0.5, "mu_over_L": 0.1, **kwargs}
    with pytest.raises(InvalidParameterError, match=word):
        certified_rate(**args)


def test_module_says_which_extra_it_needs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cvxpy", None)  # makes 'import cvxpy' fail
    monkeypatch.delitem(sys.modules, "dpopt.experiments.kuru_lmi")
    skipped: list[tuple[str, str]] = []
    monkeypatch.setattr(
        "dpopt.experiments.registry.skip_module", lambda module, *, missing: skipped.append((module, missing))
    )
    module = importlib.import_module("dpopt.experiments.kuru_lmi")  # imports (doctest collection works)
    assert skipped == [("dpopt.experiments.kuru_lmi", "cvxpy")]  # the registry says why it is skipped
    with pytest.raises(ModuleNotFoundError, match=r"dpopt\[repro\]") as info:
        module.certified_rate(step_L=0.1, smoothing=0.5, mu_over_L=0.1)
    assert info.value.name == "cvxpy"
