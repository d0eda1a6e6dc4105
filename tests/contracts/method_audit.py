"""The empirical audit of one registered method on the contract suites' neighbouring pair.

Used by ``tests/contracts/test_method_contracts.py`` (default run, few runs) and by the slow
``tests/audit`` suite (``pytest -m audit``, many runs).  The claim audited is the method's own
privacy curve: the run composes its whole planned event into a caller PLD accountant, and the
accountant's ε at :data:`AUDIT_DELTA` is what the mechanism promises at that δ.  The outputs are
1-D, so the auditor's threshold tests on the released θ are the natural statistic.
"""

from __future__ import annotations

import warnings

import numpy as np
from contract_helpers import AUDIT_BUDGET, AUDIT_DELTA, audit_problem, method_options

from dpopt.accounting import make_accountant
from dpopt.audit import AuditResult, audit
from dpopt.exceptions import PrivacyClaimWarning
from dpopt.solvers.minimize import method_spec, minimize

#: planned iterations in the audits: few steps, each carrying the full sensitivity
AUDIT_ITER = 2


def claimed_epsilon(name: str) -> float:
    """The ε the method claims at ``AUDIT_DELTA`` for the audit problem (from its committed event)."""
    spec = method_spec(name)
    problem, X, y0, _ = audit_problem(spec)
    acct = make_accountant("pld", neighbouring="replace_one")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyClaimWarning)
        res = minimize(
            problem, X, y0, method=name, budget=AUDIT_BUDGET, rng=0, accountant=acct,
            **method_options(spec, AUDIT_ITER),
        )  # fmt: skip
    assert res.privacy.epsilon <= AUDIT_BUDGET.epsilon * 1.001
    return float(acct.epsilon(delta=AUDIT_DELTA))


def audit_method(name: str, *, n_runs: int, generator: type[np.random.Generator], seed: int) -> AuditResult:
    """Audit ``name`` on the neighbouring pair, drawing through ``generator`` (the planted bug or not)."""
    spec = method_spec(name)
    problem, X, y0, y1 = audit_problem(spec)
    opts = method_options(spec, AUDIT_ITER)

    def mechanism(y: np.ndarray, rng: np.random.Generator) -> float:
        g = generator(np.random.PCG64(rng.bit_generator.seed_seq))  # same stream, maybe bugged
        res = minimize(problem, X, y, method=name, budget=AUDIT_BUDGET, rng=g, **opts)
        return float(res.solution[0])

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyClaimWarning)
        return audit(mechanism, y0, y1, n_runs=n_runs, delta=AUDIT_DELTA, rng=seed, tests="threshold")
