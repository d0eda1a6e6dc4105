"""Every mechanism of dpopt.mechanisms passes an empirical audit; broken ones are caught."""

from __future__ import annotations

import numpy as np
import pytest

from dpopt.audit import audit
from dpopt.experiments.tour import D0, D1, TourConfig, _audited_mechanisms
from dpopt.mechanisms import LaplaceMechanism

CFG = TourConfig(n_runs=20_000, n_runs_selection=3_000)
CASES = {name: (claimed, delta, mech) for name, claimed, delta, mech, _ in _audited_mechanisms(CFG)}


@pytest.mark.parametrize("name", sorted(CASES))
def test_audit_matches_claim(name: str) -> None:
    claimed, delta, mech = CASES[name]
    n_runs = CFG.n_runs_selection if ("noisy" in name or "exponential" in name) else CFG.n_runs
    result = audit(mech, D0, D1, n_runs=n_runs, delta=delta, rng=2024, vectorized=True)
    if name.startswith("BROKEN"):
        # true ε is 2: the audit must refute the claim ε = 1
        assert result.refutes(claimed), str(result)
        assert result.epsilon_lower <= 2.0
    else:
        assert not result.refutes(claimed), str(result)
        assert result.epsilon_lower > 0.1  # the audit has power: it sees some privacy loss


def test_secure_laplace_passes_audit_and_broken_secure_is_caught() -> None:
    good = LaplaceMechanism.calibrate(1.0)
    bad = LaplaceMechanism(scale=good.scale / 2)

    def run(mech: LaplaceMechanism):  # type: ignore[no-untyped-def]
        return lambda data, rng, n: np.asarray(mech.release(np.full(n, data.sum()), rng=rng))

    ok = audit(run(good), D0, D1, n_runs=20_000, rng="secure", vectorized=True)
    assert not ok.refutes(1.0)
    assert ok.epsilon_lower > 0.7
    broken = audit(run(bad), D0, D1, n_runs=20_000, rng="secure", vectorized=True)
    assert broken.refutes(1.0)


@pytest.mark.parametrize("kind", ["exponential", "report-noisy-max"])
def test_secure_selection_mechanisms_pass_audit_and_planted_bug_is_caught(kind: str) -> None:
    # the exact grid samplers of rng="secure" (issue 12 §3), driven by seeded integers for
    # reproducibility; the planted bug claims ε = 1 for a mechanism run at ε = 3
    import random

    from dpopt.mechanisms import ExponentialMechanism, ReportNoisyMin
    from dpopt.randomness import SecureRNG

    def make(eps: float):  # type: ignore[no-untyped-def]
        if kind == "exponential":
            mech = ExponentialMechanism(eps, monotone=True)
        else:
            mech = ReportNoisyMin.calibrate(eps, monotone=True, maximize=True)

        def run(data: np.ndarray, rng: np.random.Generator, n: int) -> np.ndarray:
            g = SecureRNG(randbelow=random.Random(int(rng.integers(2**62))).randrange)
            scores = np.array([data.sum(), 9.5])  # monotone: only candidate 0 depends on the data
            return np.array([mech.release(scores, rng=g) for _ in range(n)], dtype=float)

        return run

    ok = audit(make(1.0), D0, D1, n_runs=3_000, rng=2025, vectorized=True)
    assert not ok.refutes(1.0), str(ok)
    assert ok.epsilon_lower > 0.1
    broken = audit(make(3.0), D0, D1, n_runs=3_000, rng=2025, vectorized=True)
    assert broken.refutes(1.0), str(broken)
