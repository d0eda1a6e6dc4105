"""Reaper: kills the processes of a local Ray cluster started by dpopt when the driver dies.

``ray.init()`` starts the cluster's daemons as descendants of the driver; when the driver is
killed (SIGKILL, OOM killer) some of them (the dashboard and runtime-env agents) survive it.  The
:class:`~dpopt.distributed.engines.RayEngine` therefore starts this module as a small child
process (``python -m dpopt.distributed._reaper``) with the pids of the processes ``ray.init``
created.  The reaper follows their descendants once a second while the driver lives and reads its
standard input: the line ``done`` (written by :meth:`RayEngine.close` after ``ray.shutdown()``)
makes it exit quietly; end-of-file without ``done`` means the driver died, and it kills every
process it followed (checking each one's start time, so a re-used pid is never hit).
"""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import sys
from typing import Any

__all__ = ["child_pids", "start_reaper", "stop_reaper"]


def child_pids() -> set[int]:
    """Pids of all current descendants of this process (empty without psutil)."""
    try:
        import psutil
    except ImportError:  # pragma: no cover - psutil ships with ray
        return set()
    with contextlib.suppress(Exception):
        return {p.pid for p in psutil.Process().children(recursive=True)}
    return set()  # pragma: no cover


def start_reaper(pids: set[int]) -> subprocess.Popen[bytes] | None:
    """Start a reaper for ``pids`` (and their descendants); None when there is nothing to watch."""
    if not pids:
        return None
    try:
        import psutil  # ray ships it in ray/thirdparty_files, which it adds to sys.path on import
    except ImportError:  # pragma: no cover
        return None
    env = dict(os.environ)
    src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    where = os.path.dirname(os.path.dirname(os.path.abspath(psutil.__file__)))
    paths = [src, where] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    proc = subprocess.Popen(
        [sys.executable, "-m", "dpopt.distributed._reaper", *map(str, sorted(pids))],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        start_new_session=True,  # a Ctrl-C to the driver's process group does not kill the reaper first
    )
    return proc


def stop_reaper(proc: subprocess.Popen[bytes]) -> None:
    """Tell the reaper that the cluster was shut down normally and wait for it (bounded)."""
    with contextlib.suppress(Exception):
        assert proc.stdin is not None
        proc.stdin.write(b"done\n")
        proc.stdin.close()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:  # pragma: no cover
        proc.kill()
        proc.wait(timeout=5)


def _follow(psutil: Any, watched: dict[int, float]) -> None:
    for pid in list(watched):
        with contextlib.suppress(Exception):
            for child in psutil.Process(pid).children(recursive=True):
                watched.setdefault(child.pid, child.create_time())


def _kill(psutil: Any, watched: dict[int, float]) -> None:
    _follow(psutil, watched)
    victims = []
    for pid, created in watched.items():
        with contextlib.suppress(Exception):
            p = psutil.Process(pid)
            if abs(p.create_time() - created) < 1e-3:
                victims.append(p)
    for p in victims:
        with contextlib.suppress(Exception):
            p.kill()
    with contextlib.suppress(Exception):
        psutil.wait_procs(victims, timeout=5)


def main(argv: list[str]) -> int:  # pragma: no cover - runs as a separate process
    import psutil

    watched: dict[int, float] = {}
    for arg in argv:
        with contextlib.suppress(Exception):
            watched[int(arg)] = psutil.Process(int(arg)).create_time()
    buf = b""
    fd = sys.stdin.fileno()
    while True:
        ready, _, _ = select.select([fd], [], [], 1.0)
        if not ready:
            _follow(psutil, watched)
            continue
        chunk = os.read(fd, 1024)
        if not chunk:
            break
        buf += chunk
        if b"done" in buf:
            return 0
    _kill(psutil, watched)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main(sys.argv[1:]))
