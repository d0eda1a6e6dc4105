"""Fixtures of the contract suites (the shared helpers are in ``contract_helpers.py``)."""

from __future__ import annotations

import functools
import sys
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from dpopt.accounting import Budget
from dpopt.exceptions import PrivacyClaimWarning

# ------------------------------------------------------------------------------------------------
# Speed: the noise calibration is deterministic in its inputs; memoise it during audits


@pytest.fixture
def memo_certify(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Memoise the noise calibration (``certify`` runs the PLD accountant, ~0.5 s per call;
    ``gaussian_sigma`` ~3 ms).

    ``certify(make_event, start, budget, ...)`` is a deterministic function of the event family,
    which ``make_event(start)`` (an immutable, hashable event) identifies for a fixed caller; the
    memo changes no released value, it only lets an audit run a solver thousands of times.
    """
    import dpopt.accounting.calibration as cal

    orig = cal.certify
    memo: dict[Any, float] = {}

    @functools.wraps(orig)
    def cached(make_event: Callable[[float], Any], start: float, budget: Budget, **kw: Any) -> float:
        key = (make_event(start), start, budget, tuple(sorted(kw.items())))
        if key not in memo:
            memo[key] = orig(make_event, start, budget, **kw)
        return memo[key]

    pure = {  # deterministic functions of hashable floats
        name: functools.lru_cache(maxsize=None)(getattr(cal, name))
        for name in ("gaussian_sigma", "laplace_scale")
    }
    originals = {orig: cached, **{getattr(cal, k): v for k, v in pure.items()}}
    for mod in list(sys.modules.values()):
        if not getattr(mod, "__name__", "").startswith("dpopt"):
            continue
        for attr in ("certify", *pure):
            fn = getattr(mod, attr, None)
            if fn is not None and fn in originals:
                monkeypatch.setattr(mod, attr, originals[fn])
    yield


@pytest.fixture
def quiet() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyClaimWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        yield
