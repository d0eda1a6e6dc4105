"""Privacy accountants: one interface, paper-rule and tight implementations.

Every accountant composes events in two phases: it first computes what the ledger would spend with
the new event, refuses with :class:`~dpopt.exceptions.BudgetExceededError` (state unchanged) if that
exceeds its budget, and only then records the event.  Callers compose *before* drawing noise.

Paper-rule accountants (``"basic"``, ``"advanced"``) reproduce the arithmetic of the seed documents
(sequential composition, Dwork-Rothblum-Vadhan strong composition, amplification-by-subsampling
lemmas with their preconditions checked).  Tight accountants (``"rdp"``, ``"pld"``) analyse the same
events with Rényi DP or privacy-loss distributions through Google's ``dp-accounting``; that library
is wrapped here and not exposed to the rest of dpopt.

The implementation is split by concern: :mod:`dpopt.accounting._base` (budgets, the
:class:`Accountant` interface), :mod:`dpopt.accounting._paper` (paper rules) and
:mod:`dpopt.accounting._tight` (PLD, RDP); each analyses an event by a function dispatched on the
event's type.  Every name is importable from here.
"""

from __future__ import annotations

from typing import Any, Literal

from dpopt.accounting._base import _REL_TOL as _REL_TOL  # used by dpopt.ledger
from dpopt.accounting._base import (
    MAX_EPSILON,
    Accountant,
    Budget,
    InfoNote,
    LedgerEntry,
    PrivacySpent,
    amplified_epsilon,
)
from dpopt.accounting._paper import AdvancedCompositionAccountant, BasicAccountant, SubsamplingRule
from dpopt.accounting._tight import (
    PLD_MAX_DISCRETIZATION,
    PLD_MAX_POINTS,
    PLD_MAX_ROUNDING,
    PLD_MAX_SUPPORT,
    PLD_MIN_DELTA,
    PldAccountant,
    RdpAccountant,
)
from dpopt.accounting.events import Neighbouring
from dpopt.exceptions import InvalidParameterError

__all__ = [
    "MAX_EPSILON",
    "PLD_MAX_DISCRETIZATION",
    "PLD_MAX_POINTS",
    "PLD_MAX_ROUNDING",
    "PLD_MAX_SUPPORT",
    "PLD_MIN_DELTA",
    "Accountant",
    "AdvancedCompositionAccountant",
    "BasicAccountant",
    "Budget",
    "InfoNote",
    "LedgerEntry",
    "PldAccountant",
    "PrivacySpent",
    "RdpAccountant",
    "SubsamplingRule",
    "amplified_epsilon",
    "available_accountants",
    "make_accountant",
]


AccountantKind = Literal["basic", "advanced", "rdp", "pld"]  #: kinds of :func:`make_accountant`
_KINDS: dict[str, type[Accountant]] = {
    "basic": BasicAccountant,
    "advanced": AdvancedCompositionAccountant,
    "rdp": RdpAccountant,
    "pld": PldAccountant,
}


def make_accountant(
    kind: AccountantKind | str = "pld",
    *,
    budget: Budget | None = None,
    neighbouring: Neighbouring = "add_remove",
    **options: Any,
) -> Accountant:
    """Create an accountant by name: ``"basic"``, ``"advanced"`` (paper rules), ``"rdp"``, ``"pld"`` (tight).

    ``"paper"`` is an alias of ``"basic"`` and ``"tight"`` of ``"pld"``.

    Examples
    --------
    >>> from dpopt.accounting import GaussianEvent, PoissonSampledEvent
    >>> step = PoissonSampledEvent(GaussianEvent(sigma=1.0), rate=0.01)
    >>> for kind in ("rdp", "pld"):                  # 1000 DP-SGD steps, two tight accountants
    ...     acct = make_accountant(kind)
    ...     acct.compose(step, count=1000)
    ...     print(kind, round(acct.spent(delta=1e-5).epsilon, 1))
    rdp 2.1
    pld 1.8
    """
    name = {"paper": "basic", "tight": "pld"}.get(kind, kind)
    if name not in _KINDS:
        raise InvalidParameterError(
            f"accountant: unknown kind; choose one of {sorted(_KINDS)} (or 'paper' / 'tight')"
        )
    return _KINDS[name](budget=budget, neighbouring=neighbouring, **options)


def available_accountants() -> list[str]:
    """Kinds accepted by :func:`make_accountant` (without the aliases ``"paper"``/``"tight"``)."""
    return sorted(_KINDS)
