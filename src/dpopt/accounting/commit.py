"""The one place where a planned release is paid for, before any noise is drawn.

Every private path of dpopt -- the mechanisms, linear-query answering, the ERM solvers, the DP
gradient methods and private ADMM -- describes what it is about to release as one
:class:`~dpopt.accounting.PrivacyEvent` (the *whole* planned run: all steps, all rounds) and calls
:func:`commit` with it.  :func:`commit`

1. checks the caller's accountant (type, neighbouring relation),
2. composes the event into a fresh accountant of the requested kind that holds the run's own
   ``budget`` (which raises :class:`~dpopt.exceptions.BudgetExceededError` when the plan does not fit),
3. composes the same event into the caller's ``accountant`` (which raises when over *its* budget;
   nothing has been drawn yet, so a refusal costs nothing),
4. warns with :class:`~dpopt.exceptions.PrivacyClaimWarning` when a paper-rule claim is unsound, and
5. returns what the run spends (:class:`~dpopt.accounting.PrivacySpent`).

Only after :func:`commit` returns may the caller draw noise.  :func:`charge` is the budget-less form
used by single mechanisms (``Mechanism.release(..., accountant=...)``): it only composes into the
caller's accountant.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from dpopt.accounting.accountants import Accountant, Budget, InfoNote, PrivacySpent, make_accountant
from dpopt.accounting.events import Neighbouring, NonPrivateEvent, PrivacyEvent, check_neighbouring
from dpopt.exceptions import DPOptError, InvalidParameterError, PrivacyClaimWarning

__all__ = [
    "PlannedRelease",
    "charge",
    "charging",
    "check_caller_accountant",
    "commit",
    "non_private_spent",
    "plan_of",
    "prepaid",
]

#: accountants that every release of this process is also charged to (see :func:`charging`)
_CHARGING: list[Accountant] = []
_CHARGING_LOCK = threading.Lock()
#: per-thread mode of :func:`commit` / :func:`charge`: None (pay), "plan" (:func:`plan_of`) or a
#: list of releases already paid for as part of a larger plan (:func:`prepaid`)
_MODE = threading.local()


class _Use:
    """Whether a :class:`PlannedRelease` was handed to a :func:`prepaid` block (mutable, shared)."""

    __slots__ = ("used",)

    def __init__(self) -> None:
        self.used = False


@dataclasses.dataclass(frozen=True)
class PlannedRelease:
    """What a run would pay for, captured by :func:`plan_of` before anything is drawn.

    A planned release is paid for once (by the caller's one :func:`commit` of the larger plan) and
    may run once: handing it to a second :func:`prepaid` block raises.
    """

    event: PrivacyEvent
    budget: Budget | None  # None: a single mechanism's charge (no budget of its own)
    neighbouring: Neighbouring | None  # None: charged without an accountant
    kind: str
    _use: _Use = dataclasses.field(default_factory=_Use, compare=False, repr=False)


class _PlanCaptured(BaseException):
    """Raised by :func:`commit` in planning mode (a BaseException: solvers' ``except Exception``
    handlers must not swallow it)."""

    def __init__(self, planned: PlannedRelease) -> None:
        super().__init__("plan captured")
        self.planned = planned


def plan_of(run: Callable[[], Any]) -> PlannedRelease:
    """The release ``run()`` would commit, without paying for it or drawing any noise.

    ``run`` is called with :func:`commit` in planning mode: its first commit checks the plan against
    the run's own budget (:class:`~dpopt.exceptions.BudgetExceededError` if it does not fit),
    records it and stops the run there, before any noise is drawn.  Nothing is composed into any
    accountant.  Used to compose several runs into one plan paid for once (see :func:`prepaid`).
    """
    if getattr(_MODE, "value", None) is not None:
        raise DPOptError("internal error: nested planning/prepaid blocks are not supported")
    _MODE.value = "plan"
    try:
        run()
    except _PlanCaptured as captured:
        return captured.planned
    finally:
        _MODE.value = None
    raise DPOptError("internal error: the run finished without committing a release")


@contextlib.contextmanager
def prepaid(releases: Sequence[PlannedRelease]) -> Iterator[None]:
    """Within the block (this thread), each release must be the next of ``releases``, already paid for.

    A caller first composes a larger plan containing these releases (from :func:`plan_of`) into the
    accountants with one :func:`commit`, then runs them inside this block: each commit (or
    :func:`charge`) of the runs is checked against the next planned release -- same event, budget,
    relation and accountant kind -- and is not charged a second time.  A release that is not the
    next planned one raises :class:`~dpopt.exceptions.DPOptError` before its noise is drawn.

    The releases are consumed on entry, whether or not the block runs them all: a plan paid for
    once cannot run in a second block (that would draw noise again for one ledger entry), so
    passing a release that already entered a block raises :class:`~dpopt.exceptions.DPOptError`
    before anything runs.  Plan and commit again to run again.
    """
    if getattr(_MODE, "value", None) is not None:
        raise DPOptError("internal error: nested planning/prepaid blocks are not supported")
    pending = list(releases)
    if not all(isinstance(r, PlannedRelease) for r in pending):
        raise InvalidParameterError("releases: expected PlannedRelease objects (from plan_of)")
    if any(r._use.used for r in pending):
        raise DPOptError(
            "prepaid: a planned release was already consumed by an earlier prepaid block; a plan is paid "
            "for once and runs once (refused before any noise was drawn): plan it again with plan_of() "
            "and commit the new plan"
        )
    for r in pending:
        r._use.used = True
    _MODE.value = pending
    try:
        yield
    finally:
        _MODE.value = None


def _consume_prepaid(release: PlannedRelease) -> None:
    pending = _MODE.value
    if not pending or pending[0] != release:
        raise DPOptError(
            "internal error: a release that is not part of the committed plan was attempted (refused before "
            "any noise was drawn); please report this bug"
        )
    pending.pop(0)


@contextlib.contextmanager
def charging(accountant: Accountant) -> Iterator[Accountant]:
    """Within the block, every release paid through :func:`commit` or :func:`charge` in this
    process (any thread) is also composed into ``accountant``, before its noise is drawn.

    This is how ``dpopt reproduce --ledger URL --dataset NAME`` charges every release of an
    experiment to a persistent ledger without each experiment passing ``accountant=`` along.
    A release refused by ``accountant`` (over its budget) raises and is not drawn.  Releases
    analysed under a neighbouring relation other than the accountant's are refused.

    Examples
    --------
    >>> from dpopt.accounting import Budget, make_accountant
    >>> from dpopt.mechanisms import LaplaceMechanism
    >>> total = make_accountant("basic", budget=Budget(1.0))
    >>> with charging(total):
    ...     _ = LaplaceMechanism.calibrate(0.25).release(3.0, rng=0)   # no accountant= passed
    ...     _ = LaplaceMechanism.calibrate(0.25).release(5.0, rng=1)
    >>> total.epsilon()
    0.5
    """
    acct = check_caller_accountant(accountant)
    if acct is None:
        raise InvalidParameterError("accountant: expected a dpopt.accounting.Accountant")
    with _CHARGING_LOCK:
        _CHARGING.append(acct)
    try:
        yield acct
    finally:
        with _CHARGING_LOCK:
            _CHARGING.remove(acct)


def _charge_ambient(
    event: PrivacyEvent, label: str, neighbouring: Neighbouring | None, already: Accountant | None
) -> None:
    with _CHARGING_LOCK:
        extra = [a for a in _CHARGING if a is not already]
    for acct in extra:
        check_caller_accountant(acct, neighbouring, who=label or "this release")
        acct.compose(event, label=label)


def non_private_spent(neighbouring: Neighbouring = "replace_one") -> PrivacySpent:
    """The :class:`PrivacySpent` of a run without noise (ε = ∞)."""
    return PrivacySpent(
        epsilon=math.inf,
        delta=0.0,
        neighbouring=neighbouring,
        accountant="none",
        n_events=1,
        notes=("no noise was added: the output is not private",),
    )


def check_caller_accountant(
    accountant: Any, neighbouring: Neighbouring | None = None, *, who: str = "this release"
) -> Accountant | None:
    """``accountant`` checked: ``None`` or an :class:`Accountant` under ``neighbouring`` (if given)."""
    if accountant is None:
        return None
    if not isinstance(accountant, Accountant):
        raise InvalidParameterError(
            "accountant: expected a dpopt.accounting.Accountant (e.g. make_accountant('pld', budget=...)) "
            "or None"
        )
    if neighbouring is not None and accountant.neighbouring != neighbouring:
        raise InvalidParameterError(
            f"accountant: {who} is analysed under {neighbouring} neighbours but the accountant was created "
            f"with neighbouring={accountant.neighbouring!r}; create it with neighbouring={neighbouring!r}"
        )
    return accountant


def charge(accountant: Accountant | None, event: PrivacyEvent, label: str = "") -> None:
    """Compose ``event`` into the caller's ``accountant`` (if any) before a mechanism draws noise."""
    acct = check_caller_accountant(accountant)
    mode = getattr(_MODE, "value", None)
    if mode is not None:
        release = PlannedRelease(event, None, acct.neighbouring if acct is not None else None, "")
        if mode == "plan":
            raise _PlanCaptured(release)
        _consume_prepaid(release)
        return
    if acct is not None:
        acct.compose(event, label=label)
    if _CHARGING:
        _charge_ambient(event, label, acct.neighbouring if acct is not None else None, acct)


def commit(
    event: PrivacyEvent | None,
    *,
    budget: Budget | None,
    neighbouring: Neighbouring,
    kind: str = "pld",
    accountant: Accountant | None = None,
    label: str = "",
    options: Mapping[str, Any] | None = None,
    warn: bool = True,
) -> PrivacySpent:
    """Pay for the whole planned ``event`` before any noise is drawn; return what it spends.

    Parameters
    ----------
    event : PrivacyEvent or None
        The whole planned release.  ``None`` (or ``budget=None``) is a run without noise: the
        caller's accountant records a :class:`~dpopt.accounting.NonPrivateEvent` (ε = ∞).
    budget : Budget or None
        The run's own budget; the event must fit it (checked by a fresh ``kind`` accountant).
    neighbouring : {"add_remove", "replace_one"}
        The relation the event's sensitivities were derived under; the caller's accountant must
        use the same one.
    kind : str, default "pld"
        Accountant that certifies the plan (``"pld"``, ``"rdp"``, ``"basic"``, ``"advanced"``).
    accountant : Accountant, optional
        The caller's ledger; receives the same event and refuses when over its own budget.
    label : str
        Ledger label.
    options : mapping, optional
        Extra keyword arguments of :func:`make_accountant` for the run's own accountant.
    warn : bool, default True
        Issue a :class:`PrivacyClaimWarning` when the accountant's claim is unsound (paper rules).

    Returns
    -------
    PrivacySpent

    Privacy
    -------
    This function is where the guarantee is established: nothing may be drawn before it returns.
    It refuses (``BudgetExceededError``) when the plan does not fit ``budget`` or the caller's
    budget, and leaves the caller's accountant unchanged in that case.

    Examples
    --------
    A method that will add Gaussian noise 20 times pays for the whole plan first:

    >>> from dpopt.accounting import Budget, GaussianEvent, RepeatedEvent, make_accountant
    >>> ledger = make_accountant("pld", budget=Budget(2.0, 1e-5), neighbouring="replace_one")
    >>> plan = RepeatedEvent(GaussianEvent(sigma=20.0), 20)
    >>> spent = commit(plan, budget=Budget(1.0, 1e-5), neighbouring="replace_one",
    ...                accountant=ledger, label="my method")
    >>> print(spent)
    (ε=0.8197, δ=1e-05)-DP [pld, replace_one]
    >>> len(ledger.ledger)
    1
    """
    rel = check_neighbouring(neighbouring)
    acct = check_caller_accountant(accountant, rel)
    if event is None or budget is None:
        if getattr(_MODE, "value", None) is not None:
            raise DPOptError("internal error: a run without noise inside a composed private plan")
        if acct is not None:
            acct.compose(NonPrivateEvent("noise switched off"), label=label)
        if _CHARGING:
            _charge_ambient(NonPrivateEvent("noise switched off"), label, rel, acct)
        return non_private_spent(rel)
    if not isinstance(budget, Budget):
        raise InvalidParameterError("budget: expected a dpopt.accounting.Budget")
    opts = tuple(sorted((options or {}).items()))
    spent = _planned_spend(event, budget, kind, rel, opts)  # raises BudgetExceededError when over
    mode = getattr(_MODE, "value", None)
    if mode is not None:  # plan_of / prepaid: the release is (or will be) paid by an enclosing plan
        release = PlannedRelease(event, budget, rel, kind)
        if mode == "plan":
            raise _PlanCaptured(release)
        _consume_prepaid(release)
        return spent
    for note in spent.notes:  # a lemma applied outside its preconditions, etc. (every call, even cached)
        if not isinstance(note, InfoNote):  # InfoNote: which bound the accountant used (recorded, not warned)
            warnings.warn(note, PrivacyClaimWarning, stacklevel=3)
    if acct is not None:
        acct.compose(event, label=label)
    if _CHARGING:
        _charge_ambient(event, label, rel, acct)
    if warn and not spent.sound:
        warnings.warn(
            f"{label or 'release'}: the paper's calibration claims ε={spent.epsilon:.4g} but the mechanism "
            f"is only (ε={spent.true_epsilon:.4g}, δ={spent.delta:g})-DP under {rel} neighbours; the "
            "result reports the true figure. Use the default calibration for a sound guarantee.",
            PrivacyClaimWarning,
            stacklevel=3,
        )
    return spent


@functools.lru_cache(maxsize=512)
def _planned_spend(
    event: PrivacyEvent, budget: Budget, kind: str, neighbouring: Neighbouring, options: tuple[Any, ...]
) -> PrivacySpent:
    """What ``event`` spends in a fresh ``kind`` accountant holding ``budget`` (cached: events are
    immutable, and a refusal raises, which is not cached)."""
    own = make_accountant(kind, budget=budget, neighbouring=neighbouring, **dict(options))
    with warnings.catch_warnings():  # its notes are re-issued by commit() on every call
        warnings.simplefilter("ignore", PrivacyClaimWarning)
        own.compose(event)
    return own.spent()
