"""The persistent privacy ledger on SQLite: datasets, releases, the accountant interface, bad input.

Concurrency and crash tests (several real processes) are in ``test_ledger_concurrency.py``; the
same behaviour on a real PostgreSQL server is in ``test_ledger_postgres.py``.
"""

from __future__ import annotations

import copy
import os
import pickle
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from dpopt.accounting import (
    Accountant,
    Budget,
    ComposedEvent,
    EpsilonDeltaEvent,
    ExponentialEvent,
    GaussianEvent,
    L2LaplaceEvent,
    LaplaceEvent,
    NonPrivateEvent,
    PoissonSampledEvent,
    PrivacyEvent,
    RepeatedEvent,
    ReportNoisyMinEvent,
    SampledWithoutReplacementEvent,
    make_accountant,
)
from dpopt.accounting.commit import charging
from dpopt.exceptions import BudgetExceededError, InvalidParameterError
from dpopt.ledger import (
    Ledger,
    LedgerAccountant,
    LedgerError,
    LedgerReadOnlyError,
    LedgerSchemaError,
    UnknownDatasetError,
    event_from_json,
    event_to_json,
)
from dpopt.ledger import store as ledger_store
from dpopt.mechanisms import GaussianMechanism, LaplaceMechanism


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'ledger.db'}"


@pytest.fixture
def ledger(url: str) -> Ledger:
    led = Ledger(url, create=True)
    led.add_dataset("census", budget=Budget(1.0), neighbouring="add_remove")
    return led


def _rows(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute("SELECT COUNT(*) FROM dpopt_releases").fetchone()[0])


# ------------------------------------------------------------------------------- events as data


ALL_EVENTS: list[PrivacyEvent] = [
    LaplaceEvent(2.0, 0.5),
    GaussianEvent(3.0),
    EpsilonDeltaEvent(0.5, 1e-6, source=GaussianEvent(4.1, 1.0), rule="classic-gaussian"),
    EpsilonDeltaEvent(1e300, 0.0),
    ReportNoisyMinEvent(1.5, 1.0, monotone=True),
    ExponentialEvent(0.3),
    L2LaplaceEvent(0.7, 2.0),
    ComposedEvent((LaplaceEvent(1.0), GaussianEvent(2.0))),
    RepeatedEvent(PoissonSampledEvent(GaussianEvent(1.1, 2.0), 0.01), 1000),
    SampledWithoutReplacementEvent(LaplaceEvent(1.0), 10, 100),
    NonPrivateEvent("noise switched off"),
]


@pytest.mark.parametrize("event", ALL_EVENTS, ids=lambda e: type(e).__name__)
def test_every_event_round_trips_through_json(event: PrivacyEvent) -> None:
    text = event_to_json(event)
    assert "Infinity" not in text  # standard JSON
    assert event_from_json(text) == event


def test_tampered_or_foreign_event_records_are_refused() -> None:
    with pytest.raises(InvalidParameterError, match="unknown event type"):
        event_from_json('{"type": "MagicEvent"}')
    with pytest.raises(InvalidParameterError, match="scale"):
        event_from_json('{"type": "LaplaceEvent", "scale": -1.0, "sensitivity": 1.0}')
    with pytest.raises(InvalidParameterError, match="no field"):
        event_from_json('{"type": "LaplaceEvent", "scale": 1.0, "bogus": 1}')
    with pytest.raises(InvalidParameterError, match="not valid JSON"):
        event_from_json("{nope")

    @dataclass(frozen=True)
    class Custom(PrivacyEvent):
        epsilon: float = 1.0

    with pytest.raises(InvalidParameterError, match="not one of dpopt's event classes"):
        event_to_json(Custom())


# ------------------------------------------------------------------------------- ledger basics


def test_release_is_recorded_with_who_what_and_spend(ledger: Ledger, tmp_path: Path) -> None:
    acct = ledger.accountant("census", note="unit test")
    assert isinstance(acct, Accountant) and acct.budget == Budget(1.0)
    LaplaceMechanism.calibrate(0.25).release(3.0, rng=0, accountant=acct, label="count")
    acct.compose(LaplaceEvent(4.0), count=2, label="two more")
    (first, second) = ledger.history("census")
    assert (first.seq, first.label, first.note, first.count) == (1, "count", "unit test", 1)
    assert first.event == LaplaceEvent(4.0) and first.epsilon_spent == pytest.approx(0.25)
    assert str(os.getpid()) in first.actor
    assert (second.seq, second.count) == (2, 2)
    assert second.epsilon_spent == pytest.approx(0.5) and second.epsilon_total == pytest.approx(0.75)
    assert acct.epsilon() == pytest.approx(0.75) and acct.n_events == 3
    assert ledger.dataset("census").n_releases == 2
    # a new connection (another process would do the same) sees the same total
    again = Ledger(ledger._backend.url)
    assert again.spent("census").epsilon == pytest.approx(0.75)
    assert again.remaining("census") == pytest.approx(0.25)


def test_over_budget_is_refused_and_nothing_is_written(ledger: Ledger, tmp_path: Path) -> None:
    acct = ledger.accountant("census")
    mech = LaplaceMechanism.calibrate(0.4)
    mech.release(0.0, rng=0, accountant=acct)
    mech.release(0.0, rng=0, accountant=acct)
    gen = np.random.default_rng(5)
    state = gen.bit_generator.state
    with pytest.raises(BudgetExceededError, match=r"census.*ε=1.2.*nothing was recorded"):
        mech.release(0.0, rng=gen, accountant=acct)
    assert gen.bit_generator.state == state  # no noise drawn
    assert _rows(tmp_path / "ledger.db") == 2
    assert acct.epsilon() == pytest.approx(0.8)
    acct.compose(LaplaceEvent(5.0))  # ε = 0.2 still fits exactly
    assert acct.remaining() == pytest.approx(0.0, abs=1e-12)


def test_two_accountants_share_one_total(ledger: Ledger) -> None:
    a, b = ledger.accountant("census"), Ledger(ledger._backend.url).accountant("census")
    a.compose(LaplaceEvent(2.0))
    b.compose(LaplaceEvent(4.0))
    assert a.epsilon() == pytest.approx(0.75) and b.epsilon() == pytest.approx(0.75)
    assert a.would_spend(LaplaceEvent(4.0)) == pytest.approx(1.0)
    with pytest.raises(BudgetExceededError):
        a.compose(LaplaceEvent(2.0))


def test_dataset_accountant_kind_and_relation_are_used(url: str) -> None:
    led = Ledger(url, create=True)
    led.add_dataset("rows", budget=Budget(2.0, 1e-5), neighbouring="replace_one", accountant="rdp")
    acct = led.accountant("rows")
    assert acct.neighbouring == "replace_one"
    mech = GaussianMechanism.calibrate(Budget(0.5, 1e-6), 1.0)
    for _ in range(3):
        mech.release(0.0, rng=0, accountant=acct)
    rdp = make_accountant("rdp", neighbouring="replace_one")
    for _ in range(3):
        rdp.compose(mech.event)
    assert acct.epsilon() == pytest.approx(rdp.epsilon(1e-5), rel=1e-9)
    assert acct.spent().accountant == "rdp"
    # a release analysed under the other relation is refused before anything is recorded
    with pytest.raises(InvalidParameterError, match="replace_one"):
        from dpopt.accounting import commit

        commit(mech.event, budget=Budget(1.0, 1e-5), neighbouring="add_remove", accountant=acct)
    assert len(led.history("rows")) == 3


def test_copies_share_the_database_and_pickles_reconnect(ledger: Ledger) -> None:
    acct = ledger.accountant("census")
    assert copy.deepcopy(acct) is acct
    acct.compose(LaplaceEvent(4.0))
    clone = pickle.loads(pickle.dumps(acct))
    assert isinstance(clone, LedgerAccountant) and clone is not acct
    assert clone.epsilon() == pytest.approx(0.25)  # replayed from the database
    clone.compose(LaplaceEvent(4.0))
    assert acct.epsilon() == pytest.approx(0.5)
    assert isinstance(acct.fresh(), Accountant) and acct.fresh().epsilon() == 0


def test_charging_records_releases_made_without_an_accountant(ledger: Ledger) -> None:
    acct = ledger.accountant("census")
    own = make_accountant("pld")
    with charging(acct):
        LaplaceMechanism.calibrate(0.25).release(0.0, rng=0)  # no accountant= at all
        LaplaceMechanism.calibrate(0.25).release(0.0, rng=0, accountant=own)
        LaplaceMechanism.calibrate(0.25).release(0.0, rng=0, accountant=acct)  # charged once
        with pytest.raises(BudgetExceededError):
            LaplaceMechanism.calibrate(0.5).release(0.0, rng=0)
    LaplaceMechanism.calibrate(0.25).release(0.0, rng=0)  # outside: not charged
    assert [r.seq for r in ledger.history("census")] == [1, 2, 3]
    assert own.epsilon() == pytest.approx(0.25)


def test_estimator_fits_under_cross_validation_show_the_true_total(url: str) -> None:
    from sklearn.model_selection import GridSearchCV, cross_val_score

    from dpopt import DPLogisticRegression

    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, size=(120, 3))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    y = (X[:, 0] + 0.1 * rng.normal(size=120) > 0).astype(int)
    led = Ledger(url, create=True)
    led.add_dataset("clinic", budget=Budget(2.0, 1e-6), neighbouring="replace_one")
    acct = led.accountant("clinic")
    est = DPLogisticRegression(epsilon=0.1, delta=1e-8, accountant=acct, rng=0, feature_norm=1.0)
    cross_val_score(est, X, y, cv=3)
    assert len(led.history("clinic")) == 3
    grid = GridSearchCV(est, {"l2_penalty": [0.5, 1.0]}, cv=2)
    grid.fit(X, y)  # 2 x 2 fits + the refit
    assert len(led.history("clinic")) == 3 + 5
    total = acct.epsilon()
    replay = make_accountant("pld", neighbouring="replace_one")
    for r in led.history("clinic"):
        replay.compose(r.event, r.count)
    assert total == pytest.approx(replay.epsilon(1e-6), rel=1e-12)
    assert total > 2 * est.fit(X, y).privacy_spent_.epsilon  # not one fit's ε: all 9 fits compose
    # a fit whose own ε is the whole budget: with the 9 fits already composed it cannot fit
    big = DPLogisticRegression(epsilon=2.0, delta=1e-6, accountant=acct, rng=0, feature_norm=1.0)
    with pytest.raises(BudgetExceededError, match="clinic"):
        big.fit(X, y)
    assert len(led.history("clinic")) == 9


def test_minimize_charges_the_ledger(url: str) -> None:
    from dpopt import minimize
    from dpopt.problems import DataBounds, ERMProblem, LogisticLoss

    led = Ledger(url, create=True)
    led.add_dataset("erm", budget=Budget(1.0, 1e-6), neighbouring="replace_one")
    acct = led.accountant("erm")
    rng = np.random.default_rng(1)
    X = rng.uniform(-0.5, 0.5, size=(80, 2))
    y = np.where(X[:, 0] > 0, 1.0, -1.0)
    problem = ERMProblem(LogisticLoss(), DataBounds(feature_norm=1.0), None, l2_penalty=0.1)
    res = minimize(problem, X, y, budget=Budget(0.5, 1e-7), rng=0, accountant=acct)
    assert res.privacy is not None
    (release,) = led.history("erm")
    assert release.epsilon_total == pytest.approx(acct.epsilon())
    assert 0 < acct.epsilon() <= 0.5 + 1e-9


# ------------------------------------------------------------------------------- bad input


def test_missing_ledger_is_not_created_without_create(tmp_path: Path) -> None:
    with pytest.raises(LedgerError, match=r"no ledger at .*dpopt ledger init"):
        Ledger(f"sqlite:///{tmp_path / 'absent.db'}")
    assert not (tmp_path / "absent.db").exists()
    with pytest.raises(InvalidParameterError, match="unsupported URL scheme"):
        Ledger("mysql://somewhere/db")
    for bad in ("sqlite:///:memory:", "sqlite://", "sqlite://relative.db"):
        with pytest.raises(InvalidParameterError, match="SQLite URL"):
            Ledger(bad, create=True)
    with pytest.raises(InvalidParameterError, match="mode"):
        Ledger(f"sqlite:///{tmp_path / 'x.db'}?mode=rwx")


def test_unknown_dataset_and_bad_dataset_definitions(ledger: Ledger) -> None:
    with pytest.raises(UnknownDatasetError, match=r"no dataset 'nope'.*census"):
        ledger.accountant("nope")
    with pytest.raises(UnknownDatasetError):
        ledger.history("nope")
    with pytest.raises(LedgerError, match="already exists"):
        ledger.add_dataset("census", budget=Budget(1.0))
    with pytest.raises(InvalidParameterError, match="dataset name"):
        ledger.add_dataset("bad name; DROP TABLE", budget=Budget(1.0))
    with pytest.raises(InvalidParameterError, match="accountant"):
        ledger.add_dataset("x", budget=Budget(1.0), accountant="magic")
    with pytest.raises(InvalidParameterError, match="neighbouring"):
        ledger.add_dataset("x", budget=Budget(1.0), neighbouring="swap")
    with pytest.raises(InvalidParameterError, match="budget"):
        ledger.add_dataset("x", budget=1.0)  # type: ignore[arg-type]
    assert [d.name for d in ledger.datasets()] == ["census"]


def test_corrupt_and_foreign_files_are_refused_unchanged(tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not an sqlite database at all" * 200)
    before = junk.read_bytes()
    for create in (False, True):
        with pytest.raises(LedgerSchemaError, match="not a dpopt ledger"):
            Ledger(f"sqlite:///{junk}", create=create)
    assert junk.read_bytes() == before
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE patients (id INTEGER)")
    with pytest.raises(LedgerSchemaError, match="not a dpopt ledger"):
        Ledger(f"sqlite:///{other}", create=True)
    with sqlite3.connect(other) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert tables == {"patients"}


def test_newer_schema_is_refused(ledger: Ledger, tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    ledger.close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE dpopt_ledger_meta SET value = '99' WHERE key = 'schema_version'")
    before = path.read_bytes()
    with pytest.raises(LedgerSchemaError, match=r"newer dpopt.*schema 99"):
        Ledger(f"sqlite:///{path}")
    assert path.read_bytes() == before


def test_older_schema_is_migrated_in_one_transaction(
    ledger: Ledger, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger.accountant("census").compose(LaplaceEvent(4.0))
    ledger.close()
    v2 = {**ledger_store.MIGRATIONS, 2: ("ALTER TABLE dpopt_datasets ADD COLUMN owner TEXT",)}
    monkeypatch.setattr(ledger_store, "MIGRATIONS", v2)
    monkeypatch.setattr(ledger_store, "SCHEMA_VERSION", 2)
    path = tmp_path / "ledger.db"
    with pytest.raises(LedgerReadOnlyError):  # a read-only opening cannot migrate
        Ledger(f"sqlite:///{path}?mode=ro")
    migrated = Ledger(f"sqlite:///{path}")
    assert migrated.schema_version == 2
    assert migrated.spent("census").epsilon == pytest.approx(0.25)
    with sqlite3.connect(path) as conn:
        assert dict(conn.execute("SELECT key, value FROM dpopt_ledger_meta"))["schema_version"] == "2"
        assert "owner" in {r[1] for r in conn.execute("PRAGMA table_info(dpopt_datasets)")}
    # a failing migration leaves the file as it was
    v3 = {**v2, 3: ("ALTER TABLE dpopt_datasets ADD COLUMN team TEXT", "THIS IS NOT SQL")}
    monkeypatch.setattr(ledger_store, "MIGRATIONS", v3)
    monkeypatch.setattr(ledger_store, "SCHEMA_VERSION", 3)
    migrated.close()
    with pytest.raises(LedgerError):
        Ledger(f"sqlite:///{path}")
    with sqlite3.connect(path) as conn:
        assert dict(conn.execute("SELECT key, value FROM dpopt_ledger_meta"))["schema_version"] == "2"
        assert "team" not in {r[1] for r in conn.execute("PRAGMA table_info(dpopt_datasets)")}


def test_read_only_ledger_reads_but_never_writes(ledger: Ledger, tmp_path: Path) -> None:
    ledger.accountant("census").compose(LaplaceEvent(4.0))
    ro = Ledger(f"sqlite:///{tmp_path / 'ledger.db'}?mode=ro")
    assert ro.spent("census").epsilon == pytest.approx(0.25)
    acct = ro.accountant("census")
    gen = np.random.default_rng(0)
    state = gen.bit_generator.state
    with pytest.raises(LedgerReadOnlyError, match=r"read-only.*nothing was recorded"):
        LaplaceMechanism.calibrate(0.1).release(0.0, rng=gen, accountant=acct)
    assert gen.bit_generator.state == state
    with pytest.raises(LedgerReadOnlyError):
        ro.add_dataset("more", budget=Budget(1.0))
    assert _rows(tmp_path / "ledger.db") == 1


@pytest.mark.skipif(os.geteuid() == 0, reason="file permissions do not bind root (mode=ro is tested instead)")
def test_read_only_file_permissions(ledger: Ledger, tmp_path: Path) -> None:  # pragma: no cover - non-root
    ledger.close()
    path = tmp_path / "ledger.db"
    path.chmod(0o444)
    try:
        acct = Ledger(f"sqlite:///{path}").accountant("census")
        with pytest.raises(LedgerReadOnlyError):
            acct.compose(LaplaceEvent(4.0))
    finally:
        path.chmod(0o644)
    assert _rows(path) == 0


def test_altered_history_is_detected(ledger: Ledger, tmp_path: Path) -> None:
    acct = ledger.accountant("census")
    acct.compose(LaplaceEvent(8.0))
    acct.compose(LaplaceEvent(8.0))
    with sqlite3.connect(tmp_path / "ledger.db") as conn:
        conn.execute("DELETE FROM dpopt_releases WHERE seq = 1")
    with pytest.raises(LedgerError, match="not contiguous"):
        Ledger(ledger._backend.url).accountant("census").epsilon()


def test_tampered_release_is_reported_not_used(ledger: Ledger, tmp_path: Path) -> None:
    ledger.accountant("census").compose(LaplaceEvent(8.0))
    with sqlite3.connect(tmp_path / "ledger.db") as conn:
        conn.execute('UPDATE dpopt_releases SET event = \'{"type": "LaplaceEvent", "scale": -1}\'')
    fresh = Ledger(ledger._backend.url)
    with pytest.raises(LedgerSchemaError, match=r"release 1 is unreadable.*scale"):
        fresh.accountant("census").epsilon()
    with pytest.raises(LedgerSchemaError, match="release 1 is unreadable"):
        fresh.history("census")
    with pytest.raises(LedgerSchemaError):
        fresh.accountant("census").compose(LaplaceEvent(8.0))
    assert _rows(tmp_path / "ledger.db") == 1


def test_export_is_standard_json(ledger: Ledger) -> None:
    import json

    acct = ledger.accountant("census")
    acct.compose(RepeatedEvent(LaplaceEvent(40.0), 3), label="three")
    data = ledger.export()
    text = json.dumps(data, allow_nan=False)
    (ds,) = data["datasets"]
    assert ds["name"] == "census" and ds["budget"] == {"epsilon": 1.0, "delta": 0.0}
    assert ds["releases"][0]["event"]["type"] == "RepeatedEvent"
    assert ds["spent"]["epsilon"] == pytest.approx(0.075)
    assert "ledger.db" in text


def test_private_admm_run_charges_the_ledger(url: str) -> None:
    from dpopt.datasets import make_logistic
    from dpopt.distributed.admm import PrivateADMM
    from dpopt.distributed.topology import ring, split_rows

    ds = make_logistic(200, 4, rng=0)
    data = [(ds.X[p], ds.y[p]) for p in split_rows(200, 4, rng=1, min_size=10)]
    led = Ledger(url, create=True)
    led.add_dataset("sites", budget=Budget(50.0, 1e-5), neighbouring="replace_one", accountant="basic")
    acct = led.accountant("sites")
    res = PrivateADMM(ring(4), method="pp", noise_rate=3.0, max_iter=3, loss_weight=10.0).run(
        data, rng=0, accountant=acct
    )
    assert len(led.history("sites")) >= 1
    assert acct.epsilon() == pytest.approx(res.privacy.epsilon, rel=1e-9)


def test_urls_never_show_passwords() -> None:
    from dpopt.ledger.backend import redact_url

    assert redact_url("postgresql://ann:s3cret@db:5432/ledger") == "postgresql://ann:***@db:5432/ledger"
    assert redact_url("postgresql://ann@db/ledger") == "postgresql://ann@db/ledger"
    pytest.importorskip("psycopg")
    with pytest.raises(LedgerError) as info:
        Ledger("postgresql://ann:s3cret@127.0.0.1:1/ledger", timeout=2)
    assert "s3cret" not in str(info.value) and "***" in str(info.value)
