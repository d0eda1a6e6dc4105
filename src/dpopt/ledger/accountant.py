""":class:`LedgerAccountant`: an :class:`~dpopt.accounting.Accountant` whose ledger is a database.

It satisfies the accountant interface, so it goes wherever dpopt takes ``accountant=``; every
release reaches it through :func:`dpopt.accounting.commit` / :func:`~dpopt.accounting.charge`,
which call :meth:`LedgerAccountant.compose` before any noise is drawn.  ``compose`` is one
transaction: lock the dataset, bring the in-memory accountant up to date with the releases other
processes recorded, compose the new event, refuse when over the dataset's total budget, record.

The in-memory accountant (of the dataset's kind, without a budget: stored releases are history
and are always replayed) is a cache of the database: reads (:meth:`epsilon`, :meth:`spent`,
:attr:`ledger`) first replay the releases recorded since, so they show the dataset's true total.
"""

from __future__ import annotations

import math
import threading
import warnings
from typing import TYPE_CHECKING, Any

from dpopt.accounting import Accountant, Budget, LedgerEntry, PrivacyEvent, PrivacySpent, make_accountant
from dpopt.accounting.accountants import _REL_TOL, InfoNote
from dpopt.exceptions import BudgetExceededError, DPOptError, PrivacyClaimWarning
from dpopt.ledger.backend import Transaction
from dpopt.ledger.errors import LedgerError, LedgerSchemaError, UnknownDatasetError
from dpopt.ledger.serialize import event_from_json, event_to_json

if TYPE_CHECKING:
    from dpopt.ledger.store import Ledger
from dpopt.ledger.records import RELEASE_COLUMNS, Dataset, default_actor, now

__all__ = ["LedgerAccountant"]


class LedgerAccountant(Accountant):
    """The accountant of one dataset in a :class:`~dpopt.ledger.Ledger` (from :meth:`Ledger.accountant`).

    Its ``budget`` is the dataset's total budget, its ``neighbouring`` the dataset's relation, and
    it composes with the dataset's accountant kind.  Copies (``copy.deepcopy``, scikit-learn's
    ``clone``) are the same object; a pickled copy (e.g. sent to a worker process) reconnects by
    URL and records into the same database.

    Privacy
    -------
    :meth:`compose` refuses (``BudgetExceededError``, nothing recorded) when the dataset's
    releases -- by any process, at any time -- together with the new one would exceed the budget;
    otherwise the release is committed to the database before ``compose`` returns, i.e. before
    the caller draws noise.  A crash after that leaves the spend recorded.

    Examples
    --------
    >>> import os, tempfile
    >>> from dpopt.accounting import Budget
    >>> from dpopt.ledger import Ledger
    >>> from dpopt.mechanisms import GaussianMechanism
    >>> ledger = Ledger("sqlite:///" + os.path.join(tempfile.mkdtemp(), "l.db"), create=True)
    >>> _ = ledger.add_dataset("visits", budget=Budget(1.0, 1e-6), neighbouring="replace_one")
    >>> acct = ledger.accountant("visits", note="weekly report")
    >>> mech = GaussianMechanism.calibrate(Budget(0.5, 1e-7), sensitivity=2.0)
    >>> _ = mech.release([120.0, 80.0], rng=0, accountant=acct)
    >>> _ = mech.release([130.0, 70.0], rng=1, accountant=acct)
    >>> round(acct.epsilon(), 3), acct.recorded[-1][0]      # composed tightly, not 0.5 + 0.5
    (0.644, 2)
    """

    kind = "ledger"

    def __init__(self, ledger: Ledger, dataset: Dataset, *, note: str = "") -> None:
        # duck-typed: the Ledger (store) imports this module, so this one does not import it
        if getattr(ledger, "_backend", None) is None or not isinstance(dataset, Dataset):
            raise LedgerError("LedgerAccountant: create it with Ledger.accountant(name)")
        self.dataset = dataset.name
        self.note = str(note)[:1000]
        self.accountant_kind = dataset.accountant
        self._db = ledger
        self._inner = make_accountant(dataset.accountant, neighbouring=dataset.neighbouring)
        self._seq = 0  # releases replayed into _inner
        self._lock = threading.RLock()  # threads sharing this object update the cache one at a time
        self._recorded: list[tuple[int, float]] = []
        super().__init__(budget=dataset.budget, neighbouring=dataset.neighbouring)

    # --- the abstract interface (delegated to the dataset's accountant kind) -----------------------
    def _empty_state(self) -> Any:
        return None

    def _extend(self, state: Any, event: PrivacyEvent, count: int) -> tuple[Any, list[str]]:
        return self._inner._extend(self._inner._state if state is None else state, event, count)

    def _epsilon(self, state: Any, delta: float) -> float:
        return self._inner._epsilon(self._inner._state if state is None else state, delta)

    # --- keeping the cache in step with the database ----------------------------------------------
    def _reset(self) -> None:
        self._inner = self._inner.fresh()
        self._seq = 0

    def _replay(self, rows: list[tuple[Any, ...]]) -> None:
        with warnings.catch_warnings():  # each release's notes were warned when it was recorded
            warnings.simplefilter("ignore", PrivacyClaimWarning)
            for seq, text, count, label in rows:
                if int(seq) != self._seq + 1:  # never skip a release
                    self._reset()
                    raise LedgerError(
                        f"dataset {self.dataset!r}: the release history is not contiguous (release "
                        f"{self._seq + 1} is missing); the ledger database was altered"
                    )
                try:
                    event = event_from_json(text)
                except DPOptError as exc:
                    self._reset()
                    raise LedgerSchemaError(
                        f"dataset {self.dataset!r}: release {seq} is unreadable ({exc}); the ledger "
                        "database was altered or written by a newer dpopt"
                    ) from None
                try:
                    self._inner.compose(event, int(count), label=str(label))
                except Exception:
                    self._reset()
                    raise
                self._seq += 1

    def _new_rows(self, tx: Transaction) -> list[tuple[Any, ...]]:
        return tx.query(
            "SELECT seq, event, count, label FROM dpopt_releases WHERE dataset = ? AND seq > ? ORDER BY seq",
            (self.dataset, self._seq),
        )

    def sync(self) -> LedgerAccountant:
        """Replay the releases recorded (by any process) since the last call; return ``self``."""
        with self._lock:
            with self._db._backend.transaction(write=False) as tx:
                rows = self._new_rows(tx)
            self._replay(rows)
        return self

    # --- the accountant interface ----------------------------------------------------------------
    @property
    def ledger(self) -> tuple[LedgerEntry, ...]:
        """Every release recorded on the dataset, in order (from the database)."""
        return self.sync()._inner.ledger

    @property
    def n_events(self) -> int:
        """Number of elementary releases recorded on the dataset."""
        return self.sync()._inner.n_events

    def would_spend(self, event: PrivacyEvent, count: int = 1, delta: float | None = None) -> float:
        """ε (at ``delta``, default the dataset's δ) the dataset would spend with ``event`` added."""
        count = self._check_event(event, count)
        return self.sync()._inner.would_spend(event, count, self._delta_or_budget(delta))

    def epsilon(self, delta: float | None = None) -> float:
        """ε spent on the dataset so far (all processes) at ``delta`` (default the dataset's δ)."""
        return self.sync()._inner.epsilon(self._delta_or_budget(delta))

    def spent(self, delta: float | None = None) -> PrivacySpent:
        """A :class:`PrivacySpent` of everything recorded on the dataset."""
        return self.sync()._inner.spent(self._delta_or_budget(delta))

    @property
    def recorded(self) -> tuple[tuple[int, float], ...]:
        """``(seq, ε added)`` of each release this object (in this process) recorded, in order."""
        return tuple(self._recorded)

    def remaining(self) -> float:
        """The ε still available at the dataset's δ (>= 0)."""
        assert self.budget is not None
        return max(0.0, self.budget.epsilon - self.epsilon())

    def compose(self, event: PrivacyEvent, count: int = 1, *, label: str = "") -> None:
        """Check ``event`` against the dataset's total budget and record it, in one transaction.

        Raises
        ------
        BudgetExceededError
            If the dataset's releases with this one would exceed its budget; nothing is recorded.
        UnsupportedEventError
            If the dataset's accountant cannot analyse the event; nothing is recorded.
        LedgerError
            If the database cannot be written (read-only, busy past the timeout, connection lost,
            dataset removed); nothing is recorded.
        """
        count = self._check_event(event, count)
        text = event_to_json(event)  # an unrecordable event fails before anything is locked
        budget: Budget = self.budget  # type: ignore[assignment]
        label = str(label)[:200]
        be = self._db._backend
        with self._lock:
            self._record(be, event, count, label, text, budget)

    def _record(
        self, be: Any, event: PrivacyEvent, count: int, label: str, text: str, budget: Budget
    ) -> None:
        with be.transaction(write=True) as tx:
            if be.lock_dataset(tx, self.dataset) is None:
                raise UnknownDatasetError(
                    f"dataset {self.dataset!r} is no longer in the ledger {be.display_url}"
                )
            self._replay(self._new_rows(tx))
            inner = self._inner
            before = inner.epsilon(budget.delta)
            # what Accountant.compose does, split around the commit: extend once, record, then apply
            state, notes = inner._extend(inner._state, event, count)
            after = inner._epsilon(state, budget.delta)
            if not after <= budget.epsilon * (1 + _REL_TOL) + 1e-12:
                what = (
                    "a non-private release (ε = ∞)"
                    if math.isinf(after) and after > before
                    else "this release"
                )
                raise BudgetExceededError(
                    f"dataset {self.dataset!r}: {what} would bring its total to ε={after:.4g} at "
                    f"δ={budget.delta:g}, over its budget ε={budget.epsilon:g} ({self.accountant_kind} "
                    f"accountant; {before:.4g} spent by {self._seq} earlier release(s)); nothing was "
                    "recorded or drawn",
                    requested=after,
                    budget=budget.epsilon,
                    remaining=max(0.0, budget.epsilon - before),
                    delta=budget.delta,
                )
            seq = self._seq + 1
            tx.run(
                f"INSERT INTO dpopt_releases ({RELEASE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    self.dataset,
                    seq,
                    now(),
                    default_actor(),
                    label,
                    self.note,
                    text,
                    count,
                    max(0.0, after - before),
                    after,
                ),
            )
            tx.run("UPDATE dpopt_datasets SET n_releases = ? WHERE name = ?", (seq, self.dataset))
        # committed: the spend is recorded whatever happens next
        inner._state = state
        inner._notes.extend(notes)
        inner._ledger.append(LedgerEntry(event, count, label))
        self._seq = seq
        self._recorded.append((seq, max(0.0, after - before)))
        for note in notes:  # as Accountant.compose: warn what is not mere information
            if not isinstance(note, InfoNote):
                warnings.warn(note, PrivacyClaimWarning, stacklevel=4)

    def fresh(self) -> Accountant:
        """An empty in-memory accountant of the dataset's kind, relation and budget (not persisted)."""
        return make_accountant(self.accountant_kind, budget=self.budget, neighbouring=self.neighbouring)

    def _verify(self, delta: float) -> float | None:
        return self._inner._verify(delta)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_inner"] = self._inner.fresh()  # replayed from the database on the other side
        state["_seq"] = 0
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.RLock()

    def __repr__(self) -> str:
        return (
            f"LedgerAccountant(dataset={self.dataset!r}, ledger={self._db.url!r}, budget={self.budget}, "
            f"neighbouring={self.neighbouring!r}, accountant={self.accountant_kind!r})"
        )
