"""``dpopt site serve`` and ``dpopt admm run``: the parties of a Flower federation (``dpopt[flower]``).

``dpopt site serve --config site.toml`` starts the site's Flower SuperNode with the site's TLS root
certificate, its node key and its data description (the ``[[site]]`` tables of the same file, read
by :func:`dpopt.distributed.flower_engine.load_site_config` inside the SuperNode)::

    [supernode]
    superlink = "coordinator.example.org:9200"
    root_certificates = "ca.crt"          # the consortium's CA
    private_key = "site0"                 # this site's node key (OpenSSH EC P-384), never shared
    port = 9300                           # local runtime API port (optional)

    [privacy]                             # optional: see flower_engine.load_site_policy
    noise_key_file = "site0.noise-key"    # the site's own noise key (created on first use)
    budget = 5.0                          # per-node ε cap over all runs (the site's own ledger)

    [privacy.schedule]                    # optional: the site's own penalty and noise schedule
    penalty = 0.7
    epsilon = 0.8

    [[site]]
    name = "site0"
    loader = "/data/site0.npz"

``dpopt admm run --federation NAME --job pkg.mod:fn --output result.npz`` runs a job (a function
returning ``(admm, sites, run_kwargs)``) on the federation named in Flower's configuration
(``$FLWR_HOME/config.toml``, default ``~/.flwr/config.toml``) and waits (bounded) for the result.
The job runs in the ServerApp process the SuperLink starts: ``pkg.mod`` must be importable there
(e.g. on the SuperLink's ``PYTHONPATH``).  A run that fails stops the command with the error from
the run's log (``flwr log``).
Both refuse an insecure setup (no TLS root certificate, no node key, or a federation configured
``insecure = true``) unless ``--insecure`` is given, meant for local tests on loopback.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

from dpopt.cli_types import nonneg_float, positive_float
from dpopt.exceptions import InvalidParameterError

__all__ = ["add_site_parsers", "admm_run_command", "supernode_command"]

#: A SuperNode that ran this long before failing had connected: its restarts get a new --retry-for.
_CONNECTED_FOR = 60.0


def _tool(name: str) -> str:
    found = shutil.which(name) or (
        str(Path(sys.executable).parent / name) if (Path(sys.executable).parent / name).exists() else None
    )
    if found is None:
        raise InvalidParameterError(
            f"{name} not found: install the Flower extra (pip install 'dpopt[flower]')"
        )
    return found


def _read_toml(path: Path) -> dict[str, Any]:
    """The TOML file at ``path``; a syntax error is one line naming the file, line and column."""
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise InvalidParameterError(f"{path}: not valid TOML: {exc}") from None


def supernode_command(
    config: str | Path, *, insecure: bool = False, executable: str = "flower-supernode"
) -> list[str]:
    """The ``flower-supernode`` command line for a site's ``site.toml`` (see the module docstring)."""
    from dpopt.distributed.flower_engine import NODE_CONFIG_KEY, load_site_config, load_site_policy

    path = Path(config).resolve()
    raw = _read_toml(path)
    load_site_config(path)  # the [[site]] tables must be valid before anything starts
    load_site_policy(path)  # and so must [privacy] (cap, ledger, own schedule, noise key)
    node: dict[str, Any] = raw.get("supernode", {})
    if not isinstance(node, dict) or "superlink" not in node:
        raise InvalidParameterError(f'{path}: needs a [supernode] table with superlink = "host:port"')

    def rel(p: str) -> str:
        q = Path(p)
        return str(q if q.is_absolute() else path.parent / q)

    cmd = [executable, "--superlink", str(node["superlink"])]
    if node.get("root_certificates") and node.get("private_key"):
        cmd += ["--root-certificates", rel(str(node["root_certificates"]))]
        cmd += ["--auth-supernode-private-key", rel(str(node["private_key"]))]
    elif insecure:
        cmd += ["--insecure"]
    else:
        raise InvalidParameterError(
            f"{path}: [supernode] needs root_certificates (TLS) and private_key (node authentication); "
            "pass --insecure only for a local test"
        )
    if "port" in node:
        port = str(node["port"]).strip()
        if isinstance(node["port"], bool) or not port.isdigit() or not 0 < int(port) < 65536:
            raise InvalidParameterError(f"{path}: [supernode] port must be an integer from 1 to 65535")
        cmd += ["--port", str(int(port))]
    cmd += ["--node-config", f"{NODE_CONFIG_KEY}='{path}'"]
    return cmd


def _flwr_config(federation: str) -> dict[str, Any]:
    home = Path(os.environ.get("FLWR_HOME", Path.home() / ".flwr"))
    path = home / "config.toml"
    if not path.exists():
        raise InvalidParameterError(f"--federation: no Flower configuration at {path}")
    raw = _read_toml(path)
    links = raw.get("superlink", {})
    conn = links.get(federation) if isinstance(links, dict) else None
    if not isinstance(conn, dict):
        raise InvalidParameterError(f"--federation: {path} has no [superlink.{federation}] table")
    return conn


def admm_run_command(
    federation: str,
    job: str,
    output: str | Path,
    app_dir: str | Path,
    *,
    insecure: bool = False,
    executable: str = "flwr",
) -> list[str]:
    """The ``flwr run`` command line of ``dpopt admm run`` (writes the app bundle into ``app_dir``)."""
    from dpopt.distributed.flower_engine import write_app

    conn = _flwr_config(federation)
    if (conn.get("insecure") or not conn.get("root-certificates")) and not insecure:
        raise InvalidParameterError(
            f"--federation: {federation} is configured without TLS (root-certificates); pass --insecure "
            "only for a local test"
        )
    if ":" not in job or "'" in job or "'" in str(output):
        raise InvalidParameterError("--job: use 'package.module:function'")
    app = write_app(app_dir)
    return [
        executable,
        "run",
        str(app),
        federation,
        "--run-config",
        f"job='{job}' output='{Path(output).resolve()}'",
    ]


def _cmd_site_serve(args: argparse.Namespace) -> int:
    cmd = supernode_command(args.config, insecure=args.insecure, executable="flower-supernode")
    if args.dry_run:
        print(" ".join(cmd))
        return 0
    cmd[0] = _tool("flower-supernode")
    env = dict(os.environ)
    # Flower's SuperExec looks for new ClientApp tasks every second by default; a site answers a
    # round sooner if it looks more often (a local poll, no network traffic).
    env.setdefault("FLWR_SUPEREXEC_TASK_POLL_INTERVAL", "0.2")
    private_dir = None
    try:
        if not args.no_worker:  # the site's long-lived worker: rows and program kept between messages
            import secrets
            import threading

            from dpopt.distributed.flower_engine import WORKER_ENV, WORKER_KEY_ENV, serve_site_worker

            private_dir = tempfile.mkdtemp(prefix="dpopt-site-")  # mode 0700
            address = str(Path(private_dir) / "worker.sock")
            key = secrets.token_bytes(32)
            ready = threading.Event()
            threading.Thread(target=serve_site_worker, args=(Path(args.config).resolve(), address, key),
                             kwargs={"ready": ready}, daemon=True, name="dpopt-site-worker").start()  # fmt: skip
            if not ready.wait(30):
                raise InvalidParameterError("dpopt site serve: the site worker did not start within 30 s")
            env[WORKER_ENV], env[WORKER_KEY_ENV] = address, key.hex()
        deadline = time.monotonic() + args.retry_for
        while True:
            began = time.monotonic()
            code = subprocess.call(cmd, env=env)  # runs until the SuperNode stops (Ctrl-C stops it)
            if code == 0:
                return 0
            if time.monotonic() - began > _CONNECTED_FOR:  # it had been running: a new series of retries
                deadline = time.monotonic() + args.retry_for
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return code
            print(
                f"dpopt site serve: the SuperNode stopped with an error (exit {code}; e.g. it could not connect, "
                "or could not activate because the SuperLink keeps a killed SuperNode's registration until "
                f"its heartbeat expires, about a minute); restarting it, for {remaining:.0f} s more at most",
                file=sys.stderr,
            )
            time.sleep(min(10.0, remaining))
    finally:
        if private_dir is not None:
            shutil.rmtree(private_dir, ignore_errors=True)


def _run_status(flwr: str, federation: str, run_id: str) -> str | None:
    """The Flower run's status (``"running"``, ``"finished:failed"``, ...), or None if unknown now."""
    import json

    try:
        out = subprocess.run([flwr, "ls", federation, "--run-id", run_id, "--format", "json"],
                             capture_output=True, timeout=60, check=False)  # fmt: skip
        text = out.stdout.decode(errors="replace")
        runs = json.JSONDecoder().raw_decode(text[text.index("{") :])[0].get("runs", [])
    except (subprocess.SubprocessError, OSError, ValueError, AttributeError):
        return None
    for run in runs if isinstance(runs, list) else []:
        if isinstance(run, dict) and str(run.get("run-id", run.get("run_id", ""))) in ("", run_id):
            return str(run.get("status", "")) or None
    return None


def _run_error(flwr: str, federation: str, run_id: str) -> str:
    """What the run's log (``flwr log RUN_ID FEDERATION --show``) says made a failed run fail.

    The error that ended the ServerApp (the last traceback's exception lines), else the last lines
    of the log; empty if the log cannot be read now (every call is bounded).
    """
    import re

    try:
        out = subprocess.run(
            [flwr, "log", run_id, federation, "--show"], capture_output=True, timeout=60, check=False
        )
    except (subprocess.SubprocessError, OSError):
        return ""
    text = re.sub(r"\x1b\[[0-9;]*m", "", out.stdout.decode(errors="replace"))
    lines = [ln.rstrip() for ln in text.splitlines() if ln.strip()]
    starts = [i for i, ln in enumerate(lines) if ln.startswith("Traceback (most recent call last)")]
    if starts:  # the exception lines: after the last traceback's (indented) frames
        tail = lines[starts[-1] + 1 :]
        frames = [i for i, ln in enumerate(tail) if ln.startswith((" ", "\t"))]
        lines = tail[frames[-1] + 1 :] if frames else tail
    else:
        lines = [ln for ln in lines if "Printing logstream" not in ln][-10:]
    return "\n".join(lines)[-2000:]


def _run_marker(out: Path) -> Path:
    """Where ``dpopt admm run`` notes the Flower run it submitted for ``out`` (``<output>.flwr-run``)."""
    return out.with_name(out.name + ".flwr-run")


def _previous_run(flwr: str, federation: str, out: Path, *, stop: bool) -> None:
    """The Flower run submitted earlier for the same output, if Flower still lists it as not finished.

    After a coordinator crash, Flower keeps the killed run "running" until its ServerApp's heartbeat
    expires (about a minute), and each SuperNode stays on that run's last message until then: the
    resumed run's first message round waits for it.  With ``stop`` the previous run is stopped
    (``flwr stop``) so the sites drop it at once; otherwise a hint is printed.
    """
    marker = _run_marker(out)
    previous = marker.read_text().strip() if marker.exists() else ""
    if not previous.isdigit():
        return
    status = _run_status(flwr, federation, previous)
    if status is None or status.startswith("finished"):
        return
    if not stop:
        print(
            f"dpopt admm run: the previous Flower run {previous} for {out.name} is still {status}; if its coordinator "
            "crashed, the sites wait for it until Flower expires it (about a minute): pass --stop-previous to "
            "stop it first",
            file=sys.stderr,
        )
        return
    done = subprocess.run([flwr, "stop", previous, federation], capture_output=True, timeout=120, check=False)
    said = "stopped" if done.returncode == 0 else f"could not stop (exit {done.returncode})"
    print(
        f"dpopt admm run: {said} the previous Flower run {previous} for {out.name} ({status})",
        file=sys.stderr,
    )


def _cmd_admm_run(args: argparse.Namespace) -> int:
    import re

    app_dir = args.app_dir or tempfile.mkdtemp(prefix="dpopt-app-")
    out = Path(args.output).resolve()
    cmd = admm_run_command(args.federation, args.job, out, app_dir, insecure=args.insecure, executable="flwr")
    if args.dry_run:
        print(" ".join(cmd))
        return 0
    flwr = cmd[0] = _tool("flwr")
    _previous_run(flwr, args.federation, out, stop=args.stop_previous)
    before = out.stat().st_mtime if out.exists() else None
    try:
        submitted = subprocess.run(cmd, check=True, timeout=300, capture_output=True)
    except subprocess.CalledProcessError as exc:  # Flower's own message, last line only
        said = [ln.strip() for ln in exc.stderr.decode(errors="replace").splitlines() if ln.strip()]
        raise InvalidParameterError(
            f"dpopt admm run: 'flwr run' failed (exit {exc.returncode})" + (f": {said[-1]}" if said else "")
        ) from None
    except subprocess.TimeoutExpired:
        raise InvalidParameterError(
            "dpopt admm run: 'flwr run' did not submit the job within 300 s"
        ) from None
    text = submitted.stdout.decode(errors="replace")
    sys.stdout.write(text)
    sys.stdout.flush()
    found = re.search(r"started run (\d+)", text)
    run_id = found.group(1) if found else None
    if run_id:
        _run_marker(out).write_text(run_id + "\n")

    def written() -> bool:
        return out.exists() and (before is None or out.stat().st_mtime != before)

    deadline = time.monotonic() + args.timeout
    checked = -float("inf")  # first look at once, then every 10 s
    while time.monotonic() < deadline:
        if written():
            # the ServerApp exits after writing the result: wait (bounded) until Flower says so
            until = min(deadline, time.monotonic() + 60.0)
            while run_id and time.monotonic() < until:
                if (_run_status(flwr, args.federation, run_id) or "").startswith("finished"):
                    break
                time.sleep(2.0)
            print(out)
            return 0
        if run_id and time.monotonic() - checked > 10.0:  # a run that ended without a result: say so now
            checked = time.monotonic()
            status = _run_status(flwr, args.federation, run_id)
            if status is not None and status.startswith("finished") and not written():
                cause = _run_error(flwr, args.federation, run_id)
                raise InvalidParameterError(
                    f"dpopt admm run: Flower run {run_id} ended ({status}) without writing {out}"
                    + (f"; its log ends with:\n{cause}\n" if cause else "; ")
                    + f"(the whole log: 'flwr log {run_id} {args.federation} --show')"
                )
        time.sleep(2.0)
    raise InvalidParameterError(
        f"--timeout: no result at {out} after {args.timeout:g} s (see 'flwr log' for the run's logs)"
    )


def add_site_parsers(sub: Any) -> None:
    """Register ``site serve`` and ``admm run`` on the ``dpopt`` command's subparsers."""
    p = sub.add_parser("site", help="run this site's Flower SuperNode (private ADMM across organizations)")
    ssub = p.add_subparsers(dest="site_command", metavar="SUBCOMMAND", required=True)
    q = ssub.add_parser("serve", help="start the SuperNode described by site.toml (TLS and node key)")
    q.add_argument("--config", required=True, help="the site's site.toml ([supernode] and [[site]] tables)")
    q.add_argument("--insecure", action="store_true", help="no TLS and no node key: local tests only")
    q.add_argument("--dry-run", action="store_true", help="print the SuperNode command line and exit")
    q.add_argument(
        "--no-worker",
        action="store_true",
        help="no long-lived site worker: every message loads the rows in its own ClientApp process",
    )
    q.add_argument("--retry-for", type=nonneg_float, default=300.0, metavar="SECONDS",
                   help="seconds to keep restarting a SuperNode that stops with an error, e.g. one that cannot "
                        "activate after a crash while the SuperLink still holds its registration (default 300)")  # fmt: skip
    q.set_defaults(func=_cmd_site_serve)

    p = sub.add_parser("admm", help="run private ADMM on a Flower federation (coordinator)")
    asub = p.add_subparsers(dest="admm_command", metavar="SUBCOMMAND", required=True)
    q = asub.add_parser("run", help="submit a job to a federation and wait for its result")
    q.add_argument("--federation", required=True, help="a [superlink.NAME] of Flower's config.toml")
    q.add_argument(
        "--job", required=True, help="'package.module:function' returning (admm, sites, run_kwargs)"
    )
    q.add_argument("--output", required=True, help="where the coordinator writes the result (.npz)")
    q.add_argument(
        "--app-dir", default=None, help="where to write the Flower app bundle (default: a temp dir)"
    )
    q.add_argument(
        "--timeout",
        type=positive_float,
        default=3600.0,
        metavar="SECONDS",
        help="seconds to wait for the result (default 3600)",
    )
    q.add_argument("--insecure", action="store_true", help="allow a federation without TLS: local tests only")
    q.add_argument("--dry-run", action="store_true", help="print the flwr command line and exit")
    q.add_argument("--stop-previous", action="store_true",
                   help="stop the Flower run submitted earlier for the same --output if Flower still lists it as "
                        "running (e.g. after a coordinator crash, so the sites drop its pending messages at once)")  # fmt: skip
    q.set_defaults(func=_cmd_admm_run)
