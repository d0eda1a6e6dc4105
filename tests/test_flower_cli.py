"""``dpopt site serve`` / ``dpopt admm run``: secure by default, command lines (no Flower needed)."""

from __future__ import annotations

from dpopt.cli import main


def _site_toml(tmp_path, supernode: str) -> str:
    p = tmp_path / "site.toml"
    p.write_text(f'[supernode]\n{supernode}\n\n[[site]]\nname = "site0"\nloader = "/data/site0.npz"\n')
    return str(p)


def test_site_serve_uses_tls_and_node_key(tmp_path, capsys) -> None:
    cfg = _site_toml(
        tmp_path,
        'superlink = "10.0.0.1:9200"\nroot_certificates = "ca.crt"\nprivate_key = "site0"\nport = 9300',
    )
    assert main(["site", "serve", "--config", cfg, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"--root-certificates {tmp_path / 'ca.crt'}" in out
    assert f"--auth-supernode-private-key {tmp_path / 'site0'}" in out
    assert "--insecure" not in out and "dpopt-site-config=" in out and "--port 9300" in out


def test_site_serve_refuses_insecure_unless_asked(tmp_path, capsys) -> None:
    cfg = _site_toml(tmp_path, 'superlink = "127.0.0.1:9200"')
    assert main(["site", "serve", "--config", cfg, "--dry-run"]) == 2
    assert "--insecure" in capsys.readouterr().err
    assert main(["site", "serve", "--config", cfg, "--dry-run", "--insecure"]) == 0
    assert "--insecure" in capsys.readouterr().out


def test_admm_run_refuses_a_federation_without_tls(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("FLWR_HOME", str(tmp_path))
    (tmp_path / "config.toml").write_text(
        '[superlink.local]\naddress = "127.0.0.1:9200"\ninsecure = true\n\n'
        f'[superlink.consortium]\naddress = "10.0.0.1:9200"\nroot-certificates = "{tmp_path / "ca.crt"}"\n'
    )
    args = [
        "admm",
        "run",
        "--job",
        "jobs:job",
        "--output",
        str(tmp_path / "r.npz"),
        "--app-dir",
        str(tmp_path / "app"),
        "--dry-run",
    ]
    assert main([*args, "--federation", "local"]) == 2
    assert "without TLS" in capsys.readouterr().err
    assert main([*args, "--federation", "consortium"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("flwr run ") and "job='jobs:job'" in out
    assert (tmp_path / "app" / "pyproject.toml").exists()


#: The log of a run whose ServerApp failed, as ``flwr log N --show`` prints it (Flower 1.42).
_FAILED_LOG = """\x1b[92mINFO \x1b[0m:      Printing logstream for run_id `42`
\x1b[91mERROR \x1b[0m:     ServerApp raised an exception
Traceback (most recent call last):
  File "/venv/lib/python3.12/site-packages/dpopt/distributed/flower_engine.py", line 1428, in load_job
    found = importlib.import_module(module)
ModuleNotFoundError: No module named 'consortium_job'

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "/venv/lib/python3.12/site-packages/flwr/superlink/runtime/run_serverapp.py", line 220, in run_serverapp
    server_app(grid=grid, context=context)
dpopt.exceptions.InvalidParameterError: job: the job module 'consortium_job' is not importable in the ServerApp
"""


def _fake_flwr(tmp_path, monkeypatch, status: str) -> None:
    """A ``flwr`` on PATH that submits run 42 and reports it with ``status`` (completed once ``done`` exists)."""
    import os
    import stat
    import sys

    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "flwr"
    script.write_text(
        f"#!{sys.executable}\nimport json, sys\n"
        f"open({str(tmp_path / 'calls')!r}, 'a').write(' '.join(sys.argv[1:]) + '\\n')\n"
        "if sys.argv[1] == 'run':\n    print('Successfully started run 42')\n"
        "elif sys.argv[1] == 'stop':\n    pass\n"
        f"elif sys.argv[1] == 'log':\n    print({_FAILED_LOG!r})\n"
        f"else:\n    import os\n    st = {status!r} if not os.path.exists({str(tmp_path / 'done')!r}) else 'finished:completed'\n"
        "    rid = sys.argv[sys.argv.index('--run-id') + 1] if '--run-id' in sys.argv else '42'\n"
        "    st = 'running' if rid == '41' else st\n"
        "    print(json.dumps({'success': True, 'runs': [{'run-id': rid, 'status': st}]}))\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("FLWR_HOME", str(tmp_path))
    (tmp_path / "config.toml").write_text(
        f'[superlink.consortium]\naddress = "10.0.0.1:9200"\nroot-certificates = "{tmp_path / "ca.crt"}"\n'
    )


def test_admm_run_stops_when_the_flower_run_ends_without_a_result(tmp_path, monkeypatch, capsys) -> None:
    """A coordinator (ServerApp) that failed or was killed: the command says so, it does not wait out --timeout."""
    import time

    _fake_flwr(tmp_path, monkeypatch, "finished:failed")
    began = time.monotonic()
    code = main(["admm", "run", "--federation", "consortium", "--job", "jobs:job", "--output",
                 str(tmp_path / "r.npz"), "--app-dir", str(tmp_path / "app"), "--timeout", "600"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "run 42 ended (finished:failed)" in err and "flwr log 42" in err, err
    # the cause, from the run's log: the error that ended the ServerApp, not the traceback's frames
    assert "InvalidParameterError: job: the job module 'consortium_job' is not importable" in err, err
    assert "run_serverapp" not in err and "\x1b[" not in err
    assert "log 42 consortium --show" in (tmp_path / "calls").read_text()
    assert time.monotonic() - began < 300  # not --timeout (the status is checked at once, then every 10 s)


def test_admm_run_returns_the_result_of_a_running_flower_run(tmp_path, monkeypatch, capsys) -> None:
    _fake_flwr(tmp_path, monkeypatch, "running")  # the contrast: a run that is alive, then writes its result
    out = tmp_path / "r.npz"
    out.write_bytes(b"stale")
    import os

    os.utime(out, (1, 1))
    import threading

    def finish() -> None:
        out.write_bytes(b"new")
        (tmp_path / "done").touch()

    threading.Timer(1.0, finish).start()
    code = main(["admm", "run", "--federation", "consortium", "--job", "jobs:job", "--output", str(out),
                 "--app-dir", str(tmp_path / "app"), "--timeout", "120"])  # fmt: skip
    assert code == 0 and capsys.readouterr().out.strip().endswith("r.npz")


def test_one_coordinator_per_run_directory(tmp_path) -> None:
    """A second coordinator on a live run's directory is refused; once the holder is SIGKILLed, a
    resume takes the directory (the operating system released the lock)."""
    import signal
    import subprocess
    import sys

    import pytest

    from dpopt.distributed.engines import EngineError
    from dpopt.distributed.flower_engine import coordinator_lock

    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom dpopt.distributed.flower_engine import coordinator_lock\n"
         f"with coordinator_lock({str(tmp_path / 'run')!r}):\n    print('held', flush=True)\n    time.sleep(60)\n"],
        stdout=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"held"
        with pytest.raises(EngineError, match="another coordinator"), coordinator_lock(tmp_path / "run"):
            pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    with coordinator_lock(tmp_path / "run"):
        pass


def test_admm_run_can_stop_the_previous_run_of_a_crashed_coordinator(tmp_path, monkeypatch, capsys) -> None:
    """The run submitted earlier for the same output (41, still "running" for Flower) is stopped with
    --stop-previous before the new submission, and only named without it."""
    _fake_flwr(tmp_path, monkeypatch, "finished:failed")
    out = tmp_path / "r.npz"
    (tmp_path / "r.npz.flwr-run").write_text("41\n")
    args = ["admm", "run", "--federation", "consortium", "--job", "jobs:job", "--output", str(out),
            "--app-dir", str(tmp_path / "app"), "--timeout", "60"]  # fmt: skip
    assert main(args) == 2  # the fake run 42 ends without a result
    calls = (tmp_path / "calls").read_text().splitlines()
    assert not any(c.startswith("stop") for c in calls)
    assert "previous Flower run 41 for r.npz is still running" in capsys.readouterr().err
    assert (tmp_path / "r.npz.flwr-run").read_text().strip() == "42"
    (tmp_path / "r.npz.flwr-run").write_text("41\n")
    (tmp_path / "calls").unlink()
    assert main([*args, "--stop-previous"]) == 2
    calls = (tmp_path / "calls").read_text().splitlines()
    stop = calls.index("stop 41 consortium")
    assert stop < next(i for i, c in enumerate(calls) if c.startswith("run "))
    assert "stopped the previous Flower run 41" in capsys.readouterr().err
