"""A real Flower federation on loopback: SuperLink + 3 SuperNodes with TLS and node authentication.

The parties use dpopt's command line: each site runs ``dpopt site serve --config siteK.toml``
(TLS root certificate, node key, loader, budget cap and ledger in its ``site.toml``) and the
coordinator ``dpopt admm run --federation fed --job ... --output ...`` to completion.

The run survives two crashes: the coordinator (``dpopt admm run`` and the ``flwr-serverapp``
process in which the SuperLink's SuperExec runs the ServerApp, i.e. the engine) is SIGKILLed after
its first checkpointed round and started again (the job resumes from its run directory), and in the
resumed run site1's ``dpopt site serve`` (SuperNode, SuperExec, ClientApp, worker) is SIGKILLed
mid-round and started again.

site2 keeps its own privacy schedule (``[privacy.schedule]`` in its ``site.toml``): the released
rounds equal the in-process engine's run given that schedule, and none of its values reaches the
coordinator's run directory or result.

The Flower guide (``docs/guides/flower.md``) runs here too, end to end as a user runs it: its
sections 1-5 in one ``bash``, shell blocks as they are and files written where the guide names
them (its own certificates, keys, SuperLink and SuperNodes); then a job the SuperLink cannot import
is submitted with ``dpopt admm run``, which must print the ServerApp's error.

Slow (Flower starts a process per message; minutes on a loaded 2-core machine) and needs the
``flower`` extra: skipped without ``flwr``.  Every wait has a time limit and every process the
fixture starts is killed (by process group) at teardown.  With ``DPOPT_FLOWER_TIMINGS=path`` the
run's timings are also written to ``path`` (``benchmarks/bench_flower_job.py --flower``).
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("flwr")

from dpopt.datasets import make_logistic
from dpopt.distributed import flower_engine as fe
from dpopt.distributed.sites import Site
from dpopt.distributed.topology import split_rows

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent
SRC = Path(__file__).resolve().parents[1] / "src"
N_SITES = 3
ROUNDS = 3
BUDGET = 5.0  # each site's per-node cap (the run's plan: P(T) = 0.38)
#: site2 keeps its own privacy schedule ([privacy.schedule] in its site.toml, never sent); all sites
#: have their own noise key file, here with the same secret so that the in-process reference (one
#: key) can draw the same noise
OWN_SCHEDULE = "penalty = 0.6\npenalty_ratio = 1.15\nepsilon = 0.9\nnoise_ratio = 1.03"
SITE_KEY = (424242424242, 171717171717)
#: Kill the coordinator after round 1 and resume it, then kill site1's SuperNode mid-run and restart
#: it (a few more minutes: the SuperLink accepts the restarted SuperNode only once the killed one's
#: heartbeat has expired); DPOPT_FLOWER_TEST_NO_KILL=1 skips both (e.g. to time the run alone).
KILL = os.environ.get("DPOPT_FLOWER_TEST_NO_KILL") != "1"
#: Also crash the SuperLink (the coordinator's whole machine: SuperLink, SuperExec, ServerApp) mid-run
#: and restart it (a few more minutes; not part of .ci/run): DPOPT_FLOWER_TEST_SUPERLINK_CRASH=1.
SUPERLINK_CRASH = os.environ.get("DPOPT_FLOWER_TEST_SUPERLINK_CRASH") == "1"

LOADER = '''
import os
import numpy as np

def load(name, path):
    """Refuses to run anywhere but in the site's own SuperNode (DPOPT_TEST_SITE set there)."""
    if os.environ.get("DPOPT_TEST_SITE") != name:
        raise RuntimeError("site loader called outside its site process")
    z = np.load(path)
    return z["X"], z["y"]
'''

JOB = """
from dpopt.distributed.admm import PrivateADMM, geometric
from dpopt.distributed.sites import Site
from dpopt.distributed.topology import ring

def make_admm():
    return PrivateADMM(ring(3), method="pp", penalty=geometric(0.5, 1.1), theta=0.5,
                       noise_rate=geometric(5.0, 1.05), max_iter={rounds})

def job():
    sites = [Site(f"site{{k}}", loader="held-by-the-site") for k in range(3)]
    return make_admm(), sites, {{"rng": 3, "record_models": True, "timeout": 45.0, "rejoin_timeout": 180.0,
                                 "checkpoint_dir": "{run_dir}", "resume": True, "checkpoint_every": 1}}
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.5)
    raise TimeoutError(f"port {port} not open after {timeout} s")


def _certificates(d: Path) -> tuple[Path, Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP384R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "dpopt test CA")])
    ca = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    key = ec.generate_private_key(ec.SECP384R1())
    cert = (
        x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                     x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    paths = d / "ca.crt", d / "server.pem", d / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return paths


def _node_key(d: Path, name: str) -> tuple[Path, Path]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP384R1())
    priv, pub = d / f"{name}.key", d / f"{name}.pub"
    priv.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
        )
    )
    pub.write_bytes(
        key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    )
    priv.chmod(0o600)
    return priv, pub


def _ppids() -> dict[int, int]:
    """Parent of every process (Linux /proc)."""
    out = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                out[int(d.name)] = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
    return out


def _alive(pid: int) -> bool:
    try:
        return (Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]) != "Z"
    except (OSError, IndexError):
        return False


def _descendants(pid: int) -> list[int]:
    """Processes below ``pid`` (the SuperLink's SuperExec runs in a session of its own, so not its group)."""
    parents = _ppids()
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parents.items() if pp == p]
        out += kids
        todo += kids
    return out


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _serverapps(superlink: int) -> list[int]:
    """The ``flwr-serverapp`` processes (ServerApps) the SuperLink's SuperExec started."""
    return [p for p in _descendants(superlink) if "flwr-serverapp" in _cmdline(p) and _alive(p)]


def _checkpoint_round(run_dir: Path) -> int:
    """The last round the coordinator checkpointed in its run directory (-1: none yet)."""
    with contextlib.suppress(OSError, ValueError):
        return int(json.loads((run_dir / "run.json").read_text()).get("checkpoint_round", -1))
    return -1


def _statuses(obj: Any) -> list[str]:
    if isinstance(obj, dict):
        return [str(v) for k, v in obj.items() if k == "status"] + [
            x for v in obj.values() for x in _statuses(v)
        ]
    if isinstance(obj, list):
        return [x for v in obj for x in _statuses(v)]
    return []


class Federation:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.logs: list[Any] = []
        self.superlink_args: list[str] = []
        self.home = root / "flwr-home"
        self.home.mkdir()
        self.port = _free_port()
        self.env = {
            **os.environ,
            "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYTHONPATH": os.pathsep.join([str(SRC), str(root)]),
            "FLWR_HOME": str(self.home),
            "TMPDIR": str(root),  # the sites' worker directories: removed with the test's files
            "OMP_NUM_THREADS": "1",
            "OPENBLAS_NUM_THREADS": "1",
        }

    def start(self, name: str, args: list[str], **env: str) -> subprocess.Popen[bytes]:
        log = open(self.root / f"{name}.log", "wb")
        self.logs.append(log)
        proc = subprocess.Popen(
            args,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**self.env, **env},
            cwd=self.root,
            start_new_session=True,
        )
        self.procs[name] = proc
        return proc

    def flwr(self, *args: str, timeout: float = 120) -> str:
        out = subprocess.run(
            [str(BIN / "flwr"), *args],
            env=self.env,
            cwd=self.root,
            capture_output=True,
            timeout=timeout,
            check=False,
        )
        text = out.stdout.decode(errors="replace") + out.stderr.decode(errors="replace")
        if out.returncode != 0:
            raise RuntimeError(f"flwr {' '.join(args)} failed: {text[-2000:]}")
        return text

    def serve_site(self, k: int, name: str = "") -> None:
        """``dpopt site serve --config siteK.toml`` (its own process group)."""
        self.start(name or f"site{k}", [sys.executable, "-m", "dpopt", "site", "serve", "--config",
                                        str(self.root / f"site{k}.toml")],
                   DPOPT_TEST_SITE=f"site{k}", DPOPT_FLOWER_TIMING="1")  # fmt: skip

    def kill(self, name: str) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.procs[name].pid, signal.SIGKILL)
        self.procs[name].wait(timeout=30)

    def log(self, name: str) -> str:
        return (self.root / f"{name}.log").read_text(errors="replace")

    def close(self) -> None:
        # the SuperLink starts its SuperExec (and the ServerApps under it) in a session of its own
        family = [p for proc in self.procs.values() if proc.poll() is None for p in _descendants(proc.pid)]
        for proc in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        for pid in family:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
        for log in self.logs:
            log.close()


@pytest.fixture(scope="module")
def federation(tmp_path_factory):
    root = tmp_path_factory.mktemp("federation")
    fed = Federation(root)
    try:
        ca, cert, key = _certificates(root)
        ds = make_logistic(150, 3, rng=0)
        (root / "flower_test_loader.py").write_text(LOADER)
        (root / "flower_test_job.py").write_text(JOB.format(rounds=ROUNDS, run_dir=root / "run"))
        for k, rows in enumerate(split_rows(150, N_SITES, rng=0)):
            np.savez(root / f"site{k}.npz", X=ds.X[rows], y=ds.y[rows])
        fed.superlink_args = [
            str(BIN / "flower-superlink"), "--ssl-ca-certfile", str(ca), "--ssl-certfile", str(cert),
            "--ssl-keyfile", str(key), "--enable-supernode-auth", "--disable-runtime-dependency-installation",
            "--port", str(fed.port), "--database", str(root / "state.db"),
        ]  # fmt: skip
        fed.start("superlink", fed.superlink_args)
        _wait_port(fed.port, 120)
        (fed.home / "config.toml").write_text(
            f'[superlink]\ndefault = "fed"\n\n[superlink.fed]\naddress = "127.0.0.1:{fed.port}"\n'
            f'root-certificates = "{ca}"\n'
        )
        for k in range(N_SITES + 1):
            priv, pub = _node_key(root, f"node{k}")
            if k == N_SITES:  # never registered: refused
                fed.start(
                    "intruder",
                    [str(BIN / "flower-supernode"), "--root-certificates", str(ca), "--superlink",
                     f"127.0.0.1:{fed.port}", "--auth-supernode-private-key", str(priv), "--port", str(_free_port()),
                     "--node-config", f"{fe.NODE_CONFIG_KEY}='{root / 'site0.toml'}'", "--max-retries", "3"],
                    DPOPT_TEST_SITE="site0",
                )  # fmt: skip
                continue
            fed.flwr("supernode", "register", str(pub), "fed")
            (root / f"site{k}.noise-key").write_text(f"{SITE_KEY[0]} {SITE_KEY[1]}\n")
            (root / f"site{k}.noise-key").chmod(0o600)
            (root / f"site{k}.toml").write_text(
                f'[supernode]\nsuperlink = "127.0.0.1:{fed.port}"\nroot_certificates = "ca.crt"\n'
                f'private_key = "{priv.name}"\nport = {_free_port()}\n\n'
                f'[privacy]\nbudget = {BUDGET}\nledger = "site{k}-ledger.db"\nnoise_key_file = "site{k}.noise-key"\n'
                + (f"[privacy.schedule]\n{OWN_SCHEDULE}\n" if k == 2 else "")
                + "\n"
                f'[[site]]\nname = "site{k}"\nloader = "flower_test_loader:load"\n'
                f'[site.kwargs]\nname = "site{k}"\npath = "{root / f"site{k}.npz"}"\n'
            )
            fed.serve_site(k)
        yield fed
    finally:
        fed.close()


def _site2_tables() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """η, α and β of the whole network as the sites run them (site2's own, the job's elsewhere)."""
    from flower_test_job import make_admm  # type: ignore[import-not-found]

    from dpopt.accounting import Budget
    from dpopt.distributed.admm import geometric
    from dpopt.distributed.admm_privacy import calibrate_noise_rate

    job = make_admm()
    sizes = np.array([len(r) for r in split_rows(150, N_SITES, rng=0)], dtype=float)
    eta = geometric([0.5, 0.5, 0.6], [1.1, 1.1, 1.15]).table(ROUNDS, 3)
    a1 = calibrate_noise_rate(Budget(0.9 / 1.01, 0.0), penalty=eta[:, [2]], degrees=[2.0], sizes=sizes[[2]], ratio=1.03,
                              reg_per_node=job.reg / 3, c1=job._consts.c1, lipschitz=job._consts.lipschitz)  # fmt: skip
    alpha = geometric([5.0, 5.0, a1], [1.05, 1.05, 1.03]).table(ROUNDS, 3)
    beta = _reference_job(eta, alpha)._inexact_rate_table(sizes, alpha)
    assert beta is not None
    return eta, alpha, beta


def _reference_job(eta: np.ndarray, alpha: np.ndarray) -> Any:
    from dpopt.distributed.admm import PrivateADMM
    from dpopt.distributed.topology import ring

    return PrivateADMM(ring(3), method="pp", penalty=eta, theta=0.5, noise_rate=alpha, max_iter=ROUNDS)


def _reference() -> np.lib.npyio.NpzFile | object:
    """The in-process engine given the schedules the sites ran and the sites' noise key."""
    from dpopt.distributed import admm as admm_mod

    ds = make_logistic(150, 3, rng=0)
    data = [(ds.X[r], ds.y[r]) for r in split_rows(150, N_SITES, rng=0)]
    eta, alpha, _ = _site2_tables()
    real = admm_mod._draw_key
    admm_mod._draw_key = lambda g: fe.derive_noise_key(SITE_KEY, real(g))
    try:
        return _reference_job(eta, alpha).run(data, rng=3, record_models=True)
    finally:
        admm_mod._draw_key = real


def _local_timings(root: Path) -> dict[str, float]:
    """Wall time of the same job on the in-process engine (the processes and Ray engines: see
    ``benchmarks/bench_flower_job.py``)."""
    from flower_test_job import make_admm  # type: ignore[import-not-found]

    sites = [Site(f"site{k}", loader=str(root / f"site{k}.npz")) for k in range(N_SITES)]
    out = {}
    for engine in ("inprocess",):
        began = time.perf_counter()
        make_admm().run(sites, rng=3, engine=engine)
        out[f"{engine}_run_s"] = time.perf_counter() - began
    return out


def test_flower_run_equals_inprocess(federation) -> None:
    """``dpopt admm run`` to completion through two crashes: the coordinator (``dpopt admm run`` and
    its ServerApp process) SIGKILLed after round 1 and resumed from its run directory, then site1's
    SuperNode SIGKILLed mid-round and restarted (``dpopt site serve`` again).  Every released round
    equals the in-process engine's, bit for bit; each site's ledger holds its own P_i(T), with the
    replayed rounds charged once; the killed ServerApp and its Flower run are gone."""
    from dpopt.ledger import Ledger

    out = federation.root / "result.npz"
    run_dir = federation.root / "run"
    superlink = federation.procs["superlink"].pid
    cmd = [sys.executable, "-m", "dpopt", "admm", "run", "--federation", "fed", "--job", "flower_test_job:job",
           "--output", str(out), "--app-dir", str(federation.root / "app"), "--timeout", "900",
           "--stop-previous"]  # fmt: skip

    def wait_round(coordinator: subprocess.Popen[bytes], name: str, above: int) -> int:
        deadline = time.monotonic() + 600
        while _checkpoint_round(run_dir) <= above and time.monotonic() < deadline:
            assert coordinator.poll() is None, federation.log(name)[-3000:]
            time.sleep(0.5)
        got = _checkpoint_round(run_dir)
        assert above < got < ROUNDS, (got, federation.log(name)[-3000:])  # mid-run, not finished
        return got

    began = time.perf_counter()
    killed_serverapps: list[int] = []
    name = "coordinator"
    coordinator = federation.start(name, cmd)
    if KILL:
        wait_round(coordinator, name, 0)  # round 1 released and checkpointed
        killed_serverapps = _serverapps(superlink)
        assert len(killed_serverapps) == 1, [_cmdline(p) for p in _descendants(superlink)]
        federation.kill(name)  # the command that submitted the run and waits for its result
        for pid in killed_serverapps:  # the ServerApp: the process that runs the engine
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while any(_alive(p) for p in killed_serverapps) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(_alive(p) for p in killed_serverapps)
        resumed_from = _checkpoint_round(run_dir)
        name = "coordinator-resumed"
        coordinator = federation.start(name, cmd)  # the same command: the job resumes from run_dir
        wait_round(coordinator, name, resumed_from)  # the resumed run released a round of its own
        federation.kill("site1")  # SuperNode, SuperExec, ClientApp and worker of site1, mid-round
        time.sleep(5)
        federation.serve_site(1, "site1-restarted")
    try:
        coordinator.wait(timeout=1000)
    finally:
        if coordinator.poll() is None:
            federation.kill(name)
    wall = time.perf_counter() - began
    assert coordinator.returncode == 0, (federation.log(name)[-2000:], federation.log("superlink")[-3000:])
    assert federation.log(name).strip().endswith("result.npz")
    sys.path.insert(0, str(federation.root))
    try:
        ref = _reference()
        local = _local_timings(federation.root)
        eta, alpha, beta = _site2_tables()
    finally:
        sys.path.remove(str(federation.root))
    got = np.load(out)
    logs = [federation.log(f"site{k}") for k in range(N_SITES)]
    handler = [
        float(m) for text in logs for m in re.findall(r"op=(?:init|step|call) handler=([0-9.]+) s", text)
    ]
    age = [
        float(m)
        for text in logs
        for m in re.findall(r"op=clientapp-start handler=\S+ s process_age=([0-9.]+) s", text)
    ]
    rounds = got["message_rounds"].tolist()
    timings = {"flower_run_s": float(got["seconds"]), "dpopt_admm_run_wall_s": wall, "rounds": ROUNDS, "killed": KILL,
               "resumed_run": KILL,
               "message_rounds": len(rounds), "message_round_s": rounds,
               "site_handler_s_median": float(np.median(handler)), "site_process_age_at_handler_s_median": float(np.median(age)),
               **local}  # fmt: skip
    (federation.root / "timings.json").write_text(json.dumps(timings))
    if os.environ.get("DPOPT_FLOWER_TIMINGS"):
        Path(os.environ["DPOPT_FLOWER_TIMINGS"]).write_text(json.dumps(timings, indent=1))
    print("timings (wall s, same job):", timings)
    assert np.array_equal(got["models"], ref.models)  # type: ignore[attr-defined]
    assert np.array_equal(got["models_history"], ref.models_history)  # type: ignore[attr-defined]
    assert float(got["epsilon"]) == pytest.approx(ref.privacy.epsilon, rel=1e-12)  # type: ignore[attr-defined]
    assert np.allclose(got["node_privacy_history"], ref.node_privacy_history, rtol=1e-12)  # type: ignore[attr-defined]
    # site2's schedule stayed on site2: none of its values is in the coordinator's run directory or result
    secret = [struct.pack(o, float(v)) for v in (*eta[:, 2], *alpha[:, 2], *beta[:, 2]) for o in ("<d", ">d")]
    stored = b"".join(p.read_bytes() for p in [*run_dir.rglob("*"), out] if p.is_file())
    assert len(stored) > 1000 and not [v for v in secret if v in stored]
    assert struct.pack("<d", float(got["models"][2, 0])) in stored  # the search sees the stored floats
    notes = "\n".join(got["notes"].tolist())
    if KILL:
        assert "op=step" in federation.log("site1-restarted")  # the restarted site ran the replayed rounds
        assert int(got["recoveries"]) >= 1
        assert f"resumed from the checkpoint of round {resumed_from}" in notes, notes
        assert not any(_alive(p) for p in killed_serverapps)
    # nothing left running: both runs finished on the SuperLink and no ServerApp process is left (the
    # resumed one exits after writing the result)
    deadline = time.monotonic() + 180
    while True:
        text = federation.flwr("ls", "fed", "--format", "json")
        runs = json.JSONDecoder().raw_decode(text[text.index("{") :])[0]
        statuses, left = _statuses(runs), _serverapps(superlink)
        if (all(st.startswith("finished") for st in statuses) and not left) or time.monotonic() > deadline:
            break
        time.sleep(5)
    # (--stop-previous stopped the killed run before the resumed one was submitted)
    assert sorted(statuses) == (
        ["finished:completed", "finished:stopped"] if KILL else ["finished:completed"]
    ), runs
    assert not left, [_cmdline(p) for p in left]
    for k in range(N_SITES):  # each site recorded its own rounds; its figure is the coordinator's P_i(T)
        ledger = Ledger("sqlite:///" + str(federation.root / f"site{k}-ledger.db"))
        assert len(ledger.history(f"site{k}")) == ROUNDS
        assert ledger.spent(f"site{k}").epsilon == pytest.approx(ref.node_privacy[k], rel=1e-12)  # type: ignore[attr-defined]
        assert float(got["site_plans"][k]) == pytest.approx(ref.node_privacy[k], rel=1e-12)  # type: ignore[attr-defined]


def test_unregistered_supernode_is_refused(federation) -> None:
    proc = federation.procs["intruder"]
    deadline = time.monotonic() + 180
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(1)
    log = federation.log("intruder")
    assert proc.poll() is not None and proc.returncode != 0, log[-2000:]
    assert "Connection attempt failed" in log
    activated = set(re.findall(r"Activated node_id=(\d+)", federation.log("superlink")))
    assert len(activated) == N_SITES  # only the registered ones (site1's restart keeps its node id)


def test_site_loader_refuses_outside_its_site(federation) -> None:
    sys.path.insert(0, str(federation.root))
    try:
        from flower_test_loader import load  # type: ignore[import-not-found]

        with pytest.raises(RuntimeError, match="outside its site"):
            load("site0", str(federation.root / "site0.npz"))
    finally:
        sys.path.remove(str(federation.root))


@pytest.mark.skipif(
    not SUPERLINK_CRASH, reason="DPOPT_FLOWER_TEST_SUPERLINK_CRASH=1 runs it (a few more minutes)"
)
def test_superlink_crash_and_restart(federation) -> None:
    """The coordinator's machine crashes mid-run: SuperLink, its SuperExec and the ServerApp are
    SIGKILLed after round 1, the SuperLink is started again on the same database, and the same
    ``dpopt admm run`` command is submitted again.  The run resumes from its run directory (same
    run key: the same releases as the first test's run, so the sites' ledgers charge nothing new)."""
    from dpopt.ledger import Ledger

    root = federation.root
    (root / "flower_test_job_sl.py").write_text(JOB.format(rounds=ROUNDS, run_dir=root / "run-sl"))
    out, run_dir = root / "result-sl.npz", root / "run-sl"
    cmd = [sys.executable, "-m", "dpopt", "admm", "run", "--federation", "fed", "--job", "flower_test_job_sl:job",
           "--output", str(out), "--app-dir", str(root / "app-sl"), "--timeout", "900", "--stop-previous"]  # fmt: skip
    first = federation.start("coordinator-sl", cmd)
    deadline = time.monotonic() + 600
    while _checkpoint_round(run_dir) < 1 and time.monotonic() < deadline:
        assert first.poll() is None, federation.log("coordinator-sl")[-3000:]
        time.sleep(0.5)
    assert 1 <= _checkpoint_round(run_dir) < ROUNDS
    superlinks = [name for name in federation.procs if name.startswith("superlink")]
    family = [
        p
        for name in superlinks
        for p in [federation.procs[name].pid, *_descendants(federation.procs[name].pid)]
    ]
    for name in superlinks:
        federation.kill(name)
    for pid in family:  # the SuperExec and the ServerApp run in sessions of their own
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    crashed_at = time.monotonic()
    time.sleep(5)
    assert not any(_alive(p) for p in family)
    federation.start("superlink-restarted", federation.superlink_args)
    _wait_port(federation.port, 120)
    # the first command cannot learn anything from the new SuperLink about its run: stop it
    time.sleep(15)
    first_alive = first.poll() is None
    federation.kill("coordinator-sl")
    began = time.monotonic()
    second = federation.start("coordinator-sl-resumed", cmd)
    try:
        second.wait(timeout=1000)
    finally:
        if second.poll() is None:
            federation.kill("coordinator-sl-resumed")
    log = federation.log("coordinator-sl-resumed")
    print("superlink crash: first command alive 20 s after the crash:", first_alive,
          "; resumed run", time.monotonic() - began, "s; from the crash", time.monotonic() - crashed_at, "s;",
          "\n", log[-1500:], "\n", federation.log("superlink-restarted")[-3000:])  # fmt: skip
    assert second.returncode == 0, (log[-3000:], federation.log("superlink-restarted")[-3000:])
    sys.path.insert(0, str(root))
    try:
        ref = _reference()
    finally:
        sys.path.remove(str(root))
    got = np.load(out)
    assert np.array_equal(got["models_history"], ref.models_history)  # type: ignore[attr-defined]
    assert "resumed from the checkpoint of round" in "\n".join(got["notes"].tolist())
    print("superlink crash: resumed message rounds", got["message_rounds"].tolist())
    for k in range(N_SITES):  # the same releases as the first test's run: nothing new charged
        assert len(Ledger("sqlite:///" + str(root / f"site{k}-ledger.db")).history(f"site{k}")) == ROUNDS


# -- docs/guides/flower.md, end to end, the way a user runs it

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "guides" / "flower.md"
_FENCE = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)
GUIDE_ROUNDS = 5  # max_iter of the guide's job
_NAMED = re.compile(r"#\s*([\w.-]+\.(?:py|toml))\b")


def _guide_script(root: Path, port: int, node_port: int) -> str:
    """Sections 1-5 of the Flower guide as one shell script, in page order.

    Shell blocks run as they are; a block whose first line names a file (``# consortium_job.py``,
    ``# site0.toml``) is written to that file in the current directory; any other Python block runs
    with ``python`` (the user's shell has ``python`` on PATH).  Only the guide's port numbers (9200
    and 9300-9302) are replaced by free ones.
    """
    text = GUIDE.read_text(encoding="utf-8")
    steps = []
    for i, (lang, body) in enumerate(
        _FENCE.findall(text[: text.index("\n## The same with dpopt's commands")])
    ):
        named = _NAMED.match(body.splitlines()[0])
        if named:
            steps.append(f"cat > {named.group(1)} <<'DPOPT_GUIDE_EOF'\n{body}DPOPT_GUIDE_EOF")
        elif lang == "python":
            (root / f"guide-block-{i}.py").write_text(body)
            steps.append(f"python {root / f'guide-block-{i}.py'}")
        else:
            assert lang == "bash", f"unexpected {lang} block in sections 1-5 of the guide"
            steps.append(body)
    return "\n".join(steps).replace("9200", str(port)).replace("9300", str(node_port))


def _free_ports(n: int) -> int:
    """The first of ``n`` consecutive free loopback ports (the guide's SuperNodes use 9300 + k)."""
    for _ in range(100):
        base = _free_port()
        try:
            with contextlib.ExitStack() as stack:
                for p in range(base, base + n):
                    stack.enter_context(socket.socket()).bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
    raise RuntimeError(f"no {n} consecutive free ports")


@pytest.fixture(scope="module")
def guide_run(tmp_path_factory):
    """Runs sections 1-5 of docs/guides/flower.md in one ``bash`` (a user's terminal).

    The shell stays alive after the last step (so the SuperLink and SuperNodes it started in the
    background stay its children); the fixture kills it and everything below it at teardown.
    """
    for tool in ("openssl", "ssh-keygen"):
        if shutil.which(tool) is None:
            pytest.skip(f"the Flower guide uses {tool}, which is not installed")
    root = tmp_path_factory.mktemp("guide")
    fed = Federation(root)
    # the user's environment: dpopt installed, nothing of the test's on PYTHONPATH
    fed.env.pop("PYTHONPATH", None)
    fed.env.pop("FLWR_HOME", None)
    probe = subprocess.run([sys.executable, "-c", "import dpopt; print(dpopt.__file__)"], env=fed.env,
                           cwd=root, capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    if not probe.stdout.strip().startswith(str(SRC)):
        fed.close()
        pytest.skip(
            f"the interpreter's dpopt is not this checkout's (pip install -e .): {probe.stdout.strip()}"
        )
    port, node_port = _free_port(), _free_ports(N_SITES)
    script = root / "guide.sh"
    rc = root / "guide.rc"
    script.write_text(
        f"trap 'echo $? > {rc}; sleep 1800' EXIT\nset -e\ncd {root}\n"
        + _guide_script(root, port, node_port)
        + "\n"
    )
    try:
        began = time.monotonic()
        fed.start("guide", ["bash", str(script)])
        deadline = time.monotonic() + 900
        while not rc.exists() and time.monotonic() < deadline:
            time.sleep(1)
        assert rc.exists(), "the guide's steps did not finish within 900 s:\n" + fed.log("guide")[-4000:]
        yield fed, int(rc.read_text() or "1"), time.monotonic() - began
    finally:
        fed.close()


def test_flower_guide_runs_as_written(guide_run) -> None:
    """Sections 1-5 of the Flower guide, followed verbatim, end with the run's result.npz."""
    from dpopt.ledger import Ledger

    fed, code, seconds = guide_run
    print(f"the guide's steps took {seconds:.1f} s")
    log = fed.log("guide")
    assert code == 0, log[-4000:]
    out = fed.root / "fed" / "result.npz"
    assert out.exists(), log[-4000:]
    got = np.load(out)
    assert got["models"].shape == (N_SITES, 5) and np.isfinite(got["models"]).all()
    assert got["models_history"].shape[0] == GUIDE_ROUNDS + 1  # the start and every round
    for k in range(N_SITES):  # each site charged its own ledger for every round, P_i(T) as planned
        ledger = Ledger("sqlite:///" + str(fed.root / "fed" / f"site{k}-ledger.db"))
        assert len(ledger.history(f"site{k}")) == GUIDE_ROUNDS
        assert ledger.spent(f"site{k}").epsilon == pytest.approx(float(got["site_plans"][k]), rel=1e-12)


def test_a_failed_guide_run_is_reported_with_its_cause(guide_run) -> None:
    """On the guide's federation, ``dpopt admm run`` with a job module the SuperLink cannot import:
    the command stops (no waiting out --timeout) and prints the ServerApp's error from the run's log."""
    fed, _, _ = guide_run
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "dpopt", "admm", "run", "--federation", "consortium", "--job", "guide_job_absent:job",
         "--output", "absent.npz", "--timeout", "600"],
        env={**fed.env, "FLWR_HOME": str(fed.root / "fed" / "flwr-home")}, cwd=fed.root / "fed",
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    print(f"the failed run was reported after {time.monotonic() - began:.1f} s")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "ended (finished:failed)" in done.stderr, done.stderr
    assert "job module 'guide_job_absent' is not importable in the ServerApp" in done.stderr, done.stderr
