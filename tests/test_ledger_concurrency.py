"""Several real processes against one ledger budget, crashes, lost connections: SQLite and PostgreSQL.

The PostgreSQL server is started once per session by :func:`pg_server` with ``initdb``/``pg_ctl``
from Debian's ``postgresql`` package, in a temporary directory on a free port (as the
``postgres`` user when the tests run as root).  The PostgreSQL tests are skipped, with the reason,
only where no server can be started (binaries or psycopg missing).
"""

from __future__ import annotations

import glob
import multiprocessing as mp
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from dpopt.accounting import Budget, LaplaceEvent
from dpopt.exceptions import BudgetExceededError
from dpopt.ledger import (
    Ledger,
    LedgerConnectionError,
    LedgerReadOnlyError,
    LedgerSchemaError,
    UnknownDatasetError,
)
from dpopt.mechanisms import LaplaceMechanism

STEP = 0.125  # ε per release: exactly 8 fit a budget of 1 (binary fractions: no rounding)
N_PROCS = 4
TRIES = 5
WAIT = 120  # seconds: every wait in these tests is bounded

_fork = mp.get_context("fork")


# ------------------------------------------------------------------------------- PostgreSQL


def _pg_bindir() -> str | None:
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda d: int(d.split("/")[-2]))
    for d in reversed(dirs):
        if os.path.exists(os.path.join(d, "initdb")) and os.path.exists(os.path.join(d, "pg_ctl")):
            return d
    found = shutil.which("initdb")
    return os.path.dirname(found) if found and shutil.which("pg_ctl") else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """URL of a PostgreSQL server (database ``postgres``, superuser ``dpopt``) for this session."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.skip("psycopg is not installed (pip install 'dpopt[postgres]')")
    bindir = _pg_bindir()
    if bindir is None:
        pytest.skip("no PostgreSQL server binaries (initdb, pg_ctl): apt-get install postgresql")
    prefix: list[str] = []
    base = tempfile.mkdtemp(prefix="dpopt-pg-")
    if os.geteuid() == 0:  # the server refuses to run as root
        try:
            user = pwd.getpwnam("postgres")
        except KeyError:
            shutil.rmtree(base, ignore_errors=True)
            pytest.skip("running as root and there is no 'postgres' user to run the server as")
        if shutil.which("runuser") is None:
            shutil.rmtree(base, ignore_errors=True)
            pytest.skip("running as root and 'runuser' is not available to run the server as 'postgres'")
        os.chown(base, user.pw_uid, user.pw_gid)
        prefix = ["runuser", "-u", "postgres", "--"]
    data, log = os.path.join(base, "data"), os.path.join(base, "server.log")
    port = _free_port()

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*prefix, *args], capture_output=True, text=True, timeout=90, check=False)

    init = run(
        os.path.join(bindir, "initdb"), "-D", data, "-U", "dpopt", "-A", "trust", "-E", "UTF8", "--no-sync"
    )
    if init.returncode != 0:
        shutil.rmtree(base, ignore_errors=True)
        pytest.skip(f"initdb failed: {init.stderr.strip()[-300:]}")
    opts = f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=40"
    start = run(os.path.join(bindir, "pg_ctl"), "-D", data, "-l", log, "-w", "-t", "60", "-o", opts, "start")
    if start.returncode != 0:
        tail = open(log).read()[-300:] if os.path.exists(log) else start.stderr
        shutil.rmtree(base, ignore_errors=True)
        pytest.skip(f"the PostgreSQL server did not start: {tail.strip()}")
    try:
        yield f"postgresql://dpopt@127.0.0.1:{port}/postgres"
    finally:
        run(os.path.join(bindir, "pg_ctl"), "-D", data, "-m", "immediate", "-w", "-t", "60", "stop")
        shutil.rmtree(base, ignore_errors=True)


def _admin(url: str) -> Any:
    import psycopg

    return psycopg.connect(url, autocommit=True, connect_timeout=10)


@pytest.fixture
def pg_url(pg_server: str) -> Iterator[str]:
    """A fresh, empty database on the session's server."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    with _admin(pg_server) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    yield pg_server.rsplit("/", 1)[0] + f"/{name}"
    with _admin(pg_server) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'ledger.db'}"
    return str(request.getfixturevalue("pg_url"))


def _new_ledger(url: str) -> Ledger:
    led = Ledger(url, create=True)
    led.add_dataset("shared", budget=Budget(1.0))
    led.close()  # no connection is inherited by the forked processes
    return led


# ------------------------------------------------------------------------------- processes


def _racer(url: str, barrier: Any, queue: Any) -> None:
    try:
        acct = Ledger(url).accountant("shared", note="racer")
        barrier.wait(timeout=WAIT)
        ok = refused = 0
        for i in range(TRIES):
            try:
                LaplaceMechanism.calibrate(STEP).release(0.0, rng=i, accountant=acct)
                ok += 1
            except BudgetExceededError:
                refused += 1
        queue.put((ok, refused, ""))
    except BaseException as exc:  # reported to the parent, which fails the test
        queue.put((0, 0, repr(exc)))


def _crash_after_record(url: str) -> None:
    import dpopt.ledger.accountant as la

    recorded = la.LedgerAccountant.compose

    def compose_then_die(self: Any, *args: Any, **kwargs: Any) -> None:
        recorded(self, *args, **kwargs)
        os.kill(os.getpid(), signal.SIGKILL)  # after the commit, before the mechanism draws noise

    la.LedgerAccountant.compose = compose_then_die  # type: ignore[method-assign]
    acct = Ledger(url).accountant("shared")
    LaplaceMechanism.calibrate(STEP).release(0.0, rng=0, accountant=acct)
    os._exit(3)  # not reached: noise was drawn after a crash


def _crash_before_commit(url: str) -> None:
    from dpopt.ledger import backend

    run = backend.Transaction.run

    def run_then_die(self: Any, sql: str, params: Any = ()) -> int:
        n = run(self, sql, params)
        if sql.startswith("UPDATE dpopt_datasets SET n_releases"):
            os.kill(os.getpid(), signal.SIGKILL)  # the release row is written but not committed
        return n

    backend.Transaction.run = run_then_die  # type: ignore[method-assign]
    acct = Ledger(url).accountant("shared")
    LaplaceMechanism.calibrate(STEP).release(0.0, rng=0, accountant=acct)
    os._exit(3)


def _run_and_wait(target: Any, *args: Any) -> int:
    p = _fork.Process(target=target, args=args)
    p.start()
    p.join(WAIT)
    if p.is_alive():
        p.kill()
        p.join(10)
        pytest.fail("the child process hung")
    assert p.exitcode is not None
    return p.exitcode


# ------------------------------------------------------------------------------- tests


def test_racing_processes_never_overspend(url: str) -> None:
    led = _new_ledger(url)
    barrier, queue = _fork.Barrier(N_PROCS), _fork.Queue()
    procs = [_fork.Process(target=_racer, args=(url, barrier, queue)) for _ in range(N_PROCS)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=WAIT) for _ in procs]
    for p in procs:
        p.join(WAIT)
    assert all(p.exitcode == 0 for p in procs)
    assert [err for *_, err in results if err] == []
    ok = sum(r[0] for r in results)
    refused = sum(r[1] for r in results)
    assert (ok, refused) == (8, N_PROCS * TRIES - 8)  # exactly the budget, by whoever got there first
    history = led.history("shared")
    assert [r.seq for r in history] == list(range(1, 9))
    assert history[-1].epsilon_total == pytest.approx(1.0)
    assert all(r.epsilon_total <= 1.0 + 1e-9 for r in history)
    assert led.spent("shared").epsilon == pytest.approx(1.0)
    assert len({r.actor for r in history}) >= 1 and all("racer" == r.note for r in history)


def _inherited_racer(acct: Any, queue: Any) -> None:
    try:
        ok = 0
        for i in range(3):
            try:
                LaplaceMechanism.calibrate(STEP).release(0.0, rng=i, accountant=acct)
                ok += 1
            except BudgetExceededError:
                pass
        queue.put((ok, ""))
    except BaseException as exc:
        queue.put((0, repr(exc)))


def test_accountant_inherited_through_fork_reconnects(url: str) -> None:
    led = _new_ledger(url)
    acct = led.accountant("shared")
    acct.compose(LaplaceEvent(1 / STEP))  # the parent's connection is open while it forks
    queue = _fork.Queue()
    procs = [_fork.Process(target=_inherited_racer, args=(acct, queue)) for _ in range(3)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=WAIT) for _ in procs]
    for p in procs:
        p.join(WAIT)
    assert [err for _, err in results if err] == []
    assert sum(ok for ok, _ in results) == 7  # 8 fit; the parent took one
    assert acct.epsilon() == pytest.approx(1.0)  # and the parent's connection still works
    with pytest.raises(BudgetExceededError):
        acct.compose(LaplaceEvent(1 / STEP))


def test_crash_after_record_leaves_the_spend_recorded(url: str) -> None:
    led = _new_ledger(url)
    assert _run_and_wait(_crash_after_record, url) == -signal.SIGKILL
    (release,) = led.history("shared")
    assert release.event == LaplaceEvent(1 / STEP)
    assert led.spent("shared").epsilon == pytest.approx(STEP)  # fail safe: paid, though never drawn


def test_crash_inside_the_transaction_writes_nothing(url: str) -> None:
    led = _new_ledger(url)
    assert _run_and_wait(_crash_before_commit, url) == -signal.SIGKILL
    reopened = Ledger(url)  # SQLite rolls the hot journal back; PostgreSQL the dead session
    assert reopened.history("shared") == () and reopened.dataset("shared").n_releases == 0
    acct = reopened.accountant("shared")
    acct.compose(LaplaceEvent(1 / STEP))  # and the ledger is usable
    assert [r.seq for r in led.history("shared")] == [1]


def test_unknown_dataset_and_newer_schema(url: str) -> None:
    led = _new_ledger(url)
    with pytest.raises(UnknownDatasetError, match="shared"):
        led.accountant("other")
    be = led._backend
    with be.transaction(write=True) as tx:
        tx.run("UPDATE dpopt_ledger_meta SET value = ? WHERE key = 'schema_version'", ("7",))
    with pytest.raises(LedgerSchemaError, match="newer dpopt"):
        Ledger(url)


def test_pg_lost_connection_is_reported_and_recovered(pg_url: str) -> None:
    led = _new_ledger(pg_url)
    acct = led.accountant("shared")
    acct.compose(LaplaceEvent(8.0))
    with _admin(pg_url) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    with pytest.raises(LedgerConnectionError, match=r"lost.*nothing was recorded"):
        LaplaceMechanism.calibrate(STEP).release(0.0, rng=0, accountant=acct)
    assert [r.seq for r in Ledger(pg_url).history("shared")] == [1]
    acct.compose(LaplaceEvent(8.0))  # the next call reconnects
    assert acct.epsilon() == pytest.approx(0.25)


def test_pg_read_only_role_cannot_record(pg_url: str) -> None:
    led = _new_ledger(pg_url)
    role = f"reader_{uuid.uuid4().hex[:8]}"
    with _admin(pg_url) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN")
        admin.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}")
    try:
        reader = Ledger(pg_url.replace("//dpopt@", f"//{role}@"))
        assert reader.spent("shared").epsilon == 0
        with pytest.raises(LedgerReadOnlyError, match="nothing was recorded"):
            reader.accountant("shared").compose(LaplaceEvent(8.0))
        reader.close()
    finally:
        with _admin(pg_url) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,)
            )
            admin.execute(f"DROP OWNED BY {role}")
            admin.execute(f"DROP ROLE {role}")
    assert led.history("shared") == ()


def test_pg_unreachable_server_is_a_clear_error() -> None:
    pytest.importorskip("psycopg", reason="psycopg is not installed (pip install 'dpopt[postgres]')")
    port = _free_port()  # nothing listens there
    with pytest.raises(LedgerConnectionError, match=r"connection.*failed"):
        Ledger(f"postgresql://nobody@127.0.0.1:{port}/none", timeout=5)
