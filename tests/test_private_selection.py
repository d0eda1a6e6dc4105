"""Paid private selection (issue 13): one committed plan, checked releases, an audited selection."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from dpopt import Budget, minimize
from dpopt.accounting import ComposedEvent, GaussianEvent, ReportNoisyMinEvent, commit, make_accountant
from dpopt.accounting.commit import plan_of, prepaid
from dpopt.audit import audit
from dpopt.estimators import AUTO_LINEAR_SELECT, DPLinearRegression
from dpopt.exceptions import BudgetExceededError, DPOptError
from dpopt.problems import DataBounds, ERMProblem, L1Ball
from dpopt.solvers._result import OptimizeResult
from dpopt.solvers.private_selection import (
    Candidate,
    clipped_squared_error,
    plan_selection,
    private_selection,
    squared_error_sensitivity,
)

N, D = 2000, 300  # with the intercept column: d = 301 >= 300, ε·n/√d = 2000/√301 = 115 >= 100 at ε = 1


def _data(n: int = N, d: int = D, seed: int = 2) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, (n, d))
    w = np.zeros(d)
    w[:3] = [0.3, -0.2, 0.1]
    y = np.clip(X @ w + 0.05 * rng.normal(size=n), -1, 1)
    return X, y


KW: dict[str, Any] = {"feature_norm": 1.0, "norm": "linf", "label_bound": 1.0, "rng": 0}


@pytest.mark.parametrize("relation", ["replace_one", "add_remove"])
def test_the_planned_event_is_what_is_charged(relation: str) -> None:
    """One ledger entry: the candidates' planned events and the selection, composed; spent ≈ ε."""
    X, y = _data()
    eps = 1.0  # the selection band (see N, D)
    acct = make_accountant("pld", budget=Budget(3.0, 1e-4), neighbouring=relation)
    extra = {"neighbouring": relation, "declared_size": N} if relation == "add_remove" else {}
    m = DPLinearRegression(epsilon=eps, accountant=acct, **KW, **extra).fit(X, y)
    assert m.solver_ == AUTO_LINEAR_SELECT
    p = m.result_.parameters
    assert p["selected"] in ("dp_frank_wolfe", "dp_mag") and m.result_.method == AUTO_LINEAR_SELECT
    assert len(acct.ledger) == 1
    event = acct.ledger[0].event
    assert isinstance(event, ComposedEvent) and len(event.events) == 3
    sel = event.events[2]
    assert isinstance(sel, ReportNoisyMinEvent) and sel.scale == pytest.approx(p["selection_noise_scale"])
    assert sel.monotone == (relation == "add_remove")
    assert sel.sensitivity == pytest.approx(squared_error_sensitivity(1.0, 0.5))
    # the candidates' events are exactly what each solver plans for its recorded budget share
    Xa = np.hstack([X, np.ones((N, 1))])
    (b_fw, b_mag) = (Budget(*b) for b in p["candidate_budgets"])
    from dpopt.problems import L2Ball

    bounds = DataBounds(1.0, "linf", 1.0)
    fw_kw = {"neighbouring": "add_remove", "declared_size": N} if relation == "add_remove" else {}
    mag_kw = (
        {"neighbouring": "add_remove", "sampling_rate": 1.0, "batch_size": N}
        if relation == "add_remove"
        else {}
    )
    fw = plan_of(
        lambda: minimize(
            ERMProblem("squared", bounds, L1Ball(D + 1, 1.0)),
            Xa,
            y,
            method="dp_frank_wolfe",
            budget=b_fw,
            rng=0,
            **fw_kw,
        )
    )
    mag = plan_of(
        lambda: minimize(
            ERMProblem("squared", bounds, L2Ball(D + 1, 1.0)),
            Xa,
            y,
            method="dp_mag",
            budget=b_mag,
            rng=0,
            **mag_kw,
        )
    )
    assert event.events[:2] == (fw.event, mag.event)
    # the shares were scaled up: each candidate gets more than 45 % of ε, and the whole plan spends ε
    assert b_fw.epsilon > 0.45 * eps and p["share_scale"] > 1.0
    assert 0.97 * eps <= m.privacy_spent_.epsilon <= eps * (1 + 1e-9)
    assert acct.epsilon(1e-5) == pytest.approx(m.privacy_spent_.epsilon)
    assert m.privacy_spent_.neighbouring == relation
    if relation == "add_remove":  # the whole plan reads the declared size only, never the data's
        other = make_accountant("pld", budget=Budget(3.0, 1e-4), neighbouring=relation)
        DPLinearRegression(epsilon=eps, accountant=other, **KW, **extra).fit(X[:-1], y[:-1])
        assert other.ledger[0].event == event


def test_prepaid_refuses_a_release_outside_the_plan_and_planning_charges_nothing() -> None:
    X, y = _data(400, 3)
    prob = ERMProblem("squared", DataBounds(1.0, "linf", 1.0), L1Ball(3, 1.0))
    acct = make_accountant("pld", budget=Budget(3.0, 1e-4), neighbouring="replace_one")

    def run(b: Budget) -> OptimizeResult:
        return minimize(prob, X, y, method="dp_frank_wolfe", budget=b, rng=0, accountant=acct)

    planned = plan_of(lambda: run(Budget(0.5, 1e-6)))
    assert len(acct.ledger) == 0  # planning composes nothing into any accountant
    with prepaid([planned]):
        run(Budget(0.5, 1e-6))  # the planned release: checked, not charged again
    assert len(acct.ledger) == 0
    with pytest.raises(DPOptError, match="already consumed"), prepaid([planned]):
        run(Budget(0.5, 1e-6))  # planted: the plan paid for once, run a second time
    planned = plan_of(lambda: run(Budget(0.5, 1e-6)))
    with prepaid([planned]), pytest.raises(DPOptError, match="not part of the committed plan"):
        run(Budget(0.6, 1e-6))  # planted: a larger release than the one paid for
    with pytest.raises(DPOptError, match="without committing"):
        plan_of(lambda: None)
    # outside the blocks commits pay again, as before
    run(Budget(0.5, 1e-6))
    assert len(acct.ledger) == 1


def _fixed(theta: np.ndarray) -> Any:
    """A candidate that releases a fixed θ after committing a negligible Gaussian event."""

    def run(b: Budget, rng: Any) -> OptimizeResult:
        spent = commit(GaussianEvent(1e6), budget=b, neighbouring="replace_one")
        return OptimizeResult(theta, spent, "completed", 1, "fixed", "tight")

    return run


def test_selection_plan_fits_and_refuses_a_budget_it_cannot_meet() -> None:
    cands = [
        Candidate("a", _fixed(np.array([0.5])), 0.45, 0.5),
        Candidate("b", _fixed(np.array([-0.5])), 0.45, 0.5),
    ]
    plan = plan_selection(
        cands, Budget(1.0, 1e-5), score_sensitivity=0.25, neighbouring="replace_one", selection_share=0.1
    )
    # negligible candidates: the common scale-up stops at 1/max(share) = 1/0.45
    assert plan.share_scale == pytest.approx(1 / 0.45, rel=0.02)
    assert plan.selection_epsilon == pytest.approx(plan.share_scale * 0.1, rel=1e-9)
    with pytest.raises(DPOptError, match="sum to <= 1"):
        plan_selection(
            cands, Budget(1.0, 1e-5), score_sensitivity=0.25, neighbouring="replace_one", selection_share=0.2
        )
    with pytest.raises(BudgetExceededError):
        ledger = make_accountant("pld", budget=Budget(0.1, 1e-5), neighbouring="replace_one")
        private_selection(
            cands,
            lambda r: 0.0,
            budget=Budget(1.0, 1e-5),
            score_sensitivity=0.25,
            neighbouring="replace_one",
            rng=0,
            accountant=ledger,
        )


@pytest.mark.parametrize("relation", ["replace_one", "add_remove"])
def test_selection_audit_and_planted_understated_sensitivity(relation: str) -> None:
    """Two fixed candidates and a worst-case neighbouring pair for the clipped score.

    Replace-one: one record (x = 1) is fitted exactly by A in d0 and by B in d1, so A's score rises
    by τ² and B's falls by τ².  Add/remove: d1 adds a record fitted by A.  The selection as planned
    (Laplace scale from the declared score sensitivity τ²) is not refuted at its claimed ε; the same
    selection told a 4x understated sensitivity is refuted.
    """
    tau, Y = 0.5, 1.0
    theta = {"a": np.array([0.5]), "b": np.array([-0.5])}
    cands = [Candidate(k, _fixed(v), 0.45, 0.5) for k, v in theta.items()]
    base_X, base_y = np.array([[0.2], [-0.3]]), np.array([0.1, 0.0])
    if relation == "replace_one":
        d0 = (np.vstack([base_X, [[1.0]]]), np.append(base_y, 0.5))
        d1 = (np.vstack([base_X, [[1.0]]]), np.append(base_y, -0.5))
    else:
        d0 = (base_X, base_y)
        d1 = (np.vstack([base_X, [[1.0]]]), np.append(base_y, 0.5))

    def scores(d: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        return np.array([clipped_squared_error(d[0] @ theta[k], d[1], Y, tau) for k in theta])

    sens = squared_error_sensitivity(Y, tau)
    assert sens == pytest.approx(tau**2)
    assert np.max(np.abs(scores(d0) - scores(d1))) == pytest.approx(sens)  # the pair attains the bound
    claimed = 1.0
    results = {}
    for name, told in (("sound", sens), ("planted", sens / 4)):
        plan = plan_selection(
            cands,
            Budget(claimed / 0.1 / 2.2222, 1e-5),
            score_sensitivity=told,
            neighbouring=relation,
            selection_share=0.1,
        )
        sel = plan.selection
        results[name] = (
            audit(
                lambda d, rng, sel=sel: sel.release(scores(d), rng=rng),
                d0,
                d1,
                n_runs=10_000,
                rng=1,
                tests="equality",
            ),
            plan.selection_epsilon,
        )
    sound, eps_sound = results["sound"]
    planted, eps_planted = results["planted"]
    assert eps_sound == pytest.approx(eps_planted) and eps_sound == pytest.approx(claimed, rel=0.03)
    assert not sound.refutes(eps_sound), str(sound)
    assert planted.refutes(eps_planted), str(planted)


def test_private_selection_releases_the_better_candidate_and_reports_it() -> None:
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, (2000, 1))
    y = np.clip(0.5 * X[:, 0] + 0.05 * rng.normal(size=2000), -1, 1)
    cands = [
        Candidate("good", _fixed(np.array([0.5])), 0.45, 0.5),
        Candidate("bad", _fixed(np.array([-0.5])), 0.45, 0.5),
    ]
    res = private_selection(
        cands,
        lambda r: clipped_squared_error(X @ r.solution, y, 1.0, 0.5),
        budget=Budget(1.0, 1e-5),
        score_sensitivity=squared_error_sensitivity(1.0, 0.5),
        neighbouring="replace_one",
        rng=3,
    )
    assert res.parameters["selected"] == "good" and res.method == "select(good,bad)"
    assert res.privacy.epsilon <= 1.0 + 1e-9
    assert dataclasses.asdict(res.privacy)["neighbouring"] == "replace_one"


def test_the_band_explicit_solvers_and_solver_options() -> None:
    X, y = _data()
    a = DPLinearRegression(epsilon=1.0, solver="dp_mag", **KW).fit(X, y)
    assert a.solver_ == "dp_mag" and "selected" not in a.result_.parameters
    with pytest.raises(DPOptError, match="private selection"):
        DPLinearRegression(epsilon=1.0, solver_options={"iterations": 10}, **KW).fit(X, y)
    # below the band: ε·n/√d < 100 (Frank-Wolfe here), or d < 200 (dp_mag alone, as before)
    assert DPLinearRegression(epsilon=0.5, **KW).fit(X, y).solver_ == "dp_frank_wolfe"
    assert DPLinearRegression(epsilon=1.0, **KW).fit(X[:, :50], y).solver_ == "dp_mag"
    assert DPLinearRegression(epsilon=1.0, delta=0.0, **KW).fit(X, y).solver_ == "dp_frank_wolfe"
