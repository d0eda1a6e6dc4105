"""DAWA (Li, Hay, Miklau, Wang 2014): privacy accounting, utility on piecewise-constant data, audit."""

from __future__ import annotations

import numpy as np
import pytest

from dpopt.accounting import Budget, LaplaceEvent, make_accountant
from dpopt.audit import audit
from dpopt.exceptions import BudgetExceededError, InvalidParameterError
from dpopt.linear_queries import workloads
from dpopt.linear_queries.dawa import DawaResult, dawa

N = 256
# a few large uniform blocks (block lengths deliberately not powers of two)
BLOCKY = np.repeat([50.0, 10.0, 80.0, 0.0, 30.0], [40, 70, 26, 60, 60])


def test_privacy_spent_equals_epsilon_and_result_shape() -> None:
    W = workloads.prefix(N)
    res = dawa(W, BLOCKY, epsilon=0.7, rng=1)
    assert isinstance(res, DawaResult)
    assert res.privacy.epsilon == pytest.approx(0.7, rel=1e-12)
    assert res.privacy.epsilon <= 0.7 * (1 + 1e-12)
    assert res.privacy.delta == 0.0 and res.privacy.n_events == 2
    assert res.answers.shape == (N,) and res.estimate.shape == (N,)
    assert res.partition[0] == 0 and res.partition[-1] == N and np.all(np.diff(res.partition) > 0)

    acct = make_accountant("basic", budget=Budget(2.0))
    dawa(W, BLOCKY, epsilon=0.5, rng=2, ratio=0.4, accountant=acct)
    assert acct.epsilon() == pytest.approx(0.5)
    assert [e.label for e in acct.ledger] == ["dawa/partition", "dawa/measure"]
    eps = [e.event.pure_epsilon() for e in acct.ledger if isinstance(e.event, LaplaceEvent)]
    assert eps == pytest.approx([0.2, 0.3])


def test_beats_identity_laplace_on_piecewise_constant_data() -> None:
    W = workloads.prefix(N)
    truth = W.answer(BLOCKY)
    eps = 1.0
    err_dawa, err_id = [], []
    for seed in range(20):
        res = dawa(W, BLOCKY, epsilon=eps, rng=seed)
        err_dawa.append(np.mean((res.answers - truth) ** 2))
        noisy = BLOCKY + np.random.default_rng(10_000 + seed).laplace(0.0, 1.0 / eps, N)
        err_id.append(np.mean((W.answer(noisy) - truth) ** 2))
    # measured ≈ 56 vs ≈ 290 (5x); require a clear 2.5x
    assert np.mean(err_dawa) * 2.5 < np.mean(err_id)


def test_ranges_workload_and_branching() -> None:
    W = workloads.random_ranges(64, N, rng=3)
    res = dawa(W, BLOCKY, epsilon=1.0, rng=4, branching=4)
    assert res.answers.shape == (64,)
    assert np.all(np.isfinite(res.answers))


def test_refused_budget_leaves_accountant_unchanged_and_draws_nothing() -> None:
    W = workloads.prefix(16)
    x = np.arange(16.0)
    acct = make_accountant("basic", budget=Budget(1.0))
    acct.compose(LaplaceEvent(scale=1.0 / 0.8), label="earlier")
    gen = np.random.default_rng(5)
    state = gen.bit_generator.state
    with pytest.raises(BudgetExceededError):
        dawa(W, x, epsilon=0.5, rng=gen, accountant=acct)  # stage 1 alone (0.125) would fit
    assert len(acct.ledger) == 1 and acct.epsilon() == pytest.approx(0.8)
    assert gen.bit_generator.state == state


def test_same_seed_same_result() -> None:
    W = workloads.prefix(N)
    a = dawa(W, BLOCKY, epsilon=0.5, rng=7)
    b = dawa(W, BLOCKY, epsilon=0.5, rng=7)
    c = dawa(W, BLOCKY, epsilon=0.5, rng=8)
    np.testing.assert_array_equal(a.answers, b.answers)
    np.testing.assert_array_equal(a.partition, b.partition)
    assert not np.array_equal(a.answers, c.answers)


@pytest.mark.parametrize(
    ("hist", "match"),
    [
        (np.array([1.0, np.nan, 2.0, 3.0]), "NaN"),
        (np.array([1.0, -7.5, 2.0, 3.0]), "non-negative"),
        (np.array([1.0, 2.0, 3.0]), "length 4"),
        (np.ones((2, 2)), "1-d"),
    ],
)
def test_validation_never_echoes_data(hist: np.ndarray, match: str) -> None:
    with pytest.raises(InvalidParameterError, match=match) as info:
        dawa(workloads.prefix(4), hist, epsilon=1.0, rng=0)
    assert "7.5" not in str(info.value)


@pytest.mark.parametrize("kwargs", [{"epsilon": 0.0}, {"epsilon": np.inf}, {"ratio": 1.0}, {"ratio": 0.0}])
def test_bad_parameters(kwargs: dict[str, float]) -> None:
    args = {"epsilon": 1.0, **kwargs}
    with pytest.raises(InvalidParameterError):
        dawa(workloads.prefix(4), np.ones(4), rng=0, **args)  # type: ignore[arg-type]


def test_audit_finds_no_violation() -> None:
    W = workloads.prefix(4)
    d0 = np.array([3.0, 1.0, 0.0, 2.0])
    d1 = d0 + np.array([0.0, 1.0, 0.0, 0.0])  # one extra record

    def mech(data: np.ndarray, rng: np.random.Generator) -> float:
        # verify=False: skip the PLD cross-check of the ledger (pure Laplace events; speed only)
        acct = make_accountant("basic", budget=Budget(1.0), verify=False)
        return float(dawa(W, data, epsilon=1.0, rng=rng, accountant=acct).answers.sum())

    result = audit(mech, d0, d1, n_runs=2_000, rng=11)
    assert not result.refutes(1.0), str(result)
    assert result.epsilon_lower > 0.1, str(result)  # the audit has power (measured ≈ 0.45)
