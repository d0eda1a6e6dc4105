"""Progress of long work, on standard error: one reporter, one switch.

Long-running front doors take ``progress=``: ``False`` (the default in Python) is silent, ``True``
reports on stderr -- a rich progress bar on a terminal, a plain line at most every ``interval``
seconds (and at each completed step) otherwise.  ``dpopt tour`` and ``dpopt reproduce`` report by
default; ``--no-progress`` silences them.

Code deep inside a run does not take an argument for this: it announces through the *current*
reporter (:func:`note`), which the front door sets for the duration of the run (:func:`reporting`).
The compiled kernels do so around their first compilation (:func:`announce_compilation`), which takes tens of
seconds once and is then cached on disk; the iterative solvers (ERM and DP gradient methods, HAMSI,
ALS, the strategy optimizer) write a line at most every ``interval`` seconds (the iteration count,
through :func:`dpopt.iteration.notify`).  In Python, a long
call of any front door reports when wrapped in ``with reporting(Reporter()):``.

Examples
--------
>>> import io
>>> out = io.StringIO()
>>> reporter = Reporter(stream=out, bar=False)
>>> with reporting(reporter):
...     reporter.start("demo", total=2)
...     note("loading data")
...     reporter.update(1, "seed 0 done", force=True)
...     reporter.stop()
>>> print(out.getvalue(), end="")
dpopt: demo: 0/2 ...
dpopt: loading data
dpopt: demo: 1/2 seed 0 done (0 s)
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any, TextIO

__all__ = ["Reporter", "announce_compilation", "cold_numba_cache", "current", "note", "reporting"]

PREFIX = "dpopt: "

_current: ContextVar[Reporter | None] = ContextVar("dpopt_progress", default=None)


class Reporter:
    """Shows the progress of one task at a time (``start``, ``update``, ``stop``) and notes.

    Parameters
    ----------
    stream
        Where to write (default: ``sys.stderr`` at the time of writing).
    bar
        ``True``: a rich progress bar; ``False``: plain lines; ``None`` (default): a bar when
        ``stream`` is a terminal.
    interval
        Plain lines: at most one line per ``interval`` seconds, besides forced updates.
    """

    def __init__(
        self, *, stream: TextIO | None = None, bar: bool | None = None, interval: float = 10.0
    ) -> None:
        self._stream = stream
        self._bar = bar
        self._interval = float(interval)
        self._label = ""
        self._total = 0
        self._t0 = self._last = 0.0
        self._rich: Any = None  # (rich Progress, task id) while a bar is shown

    @property
    def stream(self) -> TextIO:
        """The stream written to."""
        return self._stream if self._stream is not None else sys.stderr

    def _use_bar(self) -> bool:
        if self._bar is not None:
            return self._bar
        isatty = getattr(self.stream, "isatty", None)
        return bool(isatty and isatty())

    def note(self, message: str) -> None:
        """One line, ``dpopt: message`` (above the bar while one is shown)."""
        if self._rich is not None:
            self._rich[0].console.print(PREFIX + message, markup=False, highlight=False)
        else:
            print(PREFIX + message, file=self.stream, flush=True)

    def start(self, label: str, total: int) -> None:
        """Begin a task of ``total`` steps."""
        self.stop()
        self._label, self._total = label, int(total)
        self._t0 = self._last = time.monotonic()
        if not self._use_bar():
            self.note(f"{label}: 0/{total} ...")
            return
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        bar = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(),
            console=Console(file=self.stream, stderr=self._stream is None),
        )
        self._rich = (bar, bar.add_task(label, total=total, info="starting"))
        bar.start()

    def update(self, done: int, info: str = "", *, force: bool = False) -> None:
        """``done`` of the task's steps are complete; ``info`` says what is going on.  Plain lines
        are written when ``force`` is set or ``interval`` seconds have passed since the last one."""
        if self._rich is not None:
            bar, task = self._rich
            bar.update(task, completed=done, info=info)
            return
        now = time.monotonic()
        if force or now - self._last >= self._interval:
            self._last = now
            what = f" {info}" if info else ""
            self.note(f"{self._label}: {done}/{self._total}{what} ({now - self._t0:.0f} s)")

    def heartbeat(self, what: str) -> None:
        """Say ``what`` (e.g. ``"iteration 1200"``) at most once per ``interval`` seconds: the sign of
        life of an iterative solver, written by :func:`dpopt.iteration.notify` after every iteration."""
        now = time.monotonic()
        if not self._last:
            self._t0 = self._last = now
        elif now - self._last >= self._interval:
            self._last = now
            task = f"{self._label}: " if self._label else ""
            self.note(f"{task}{what} ({now - self._t0:.0f} s)")

    def stop(self) -> None:
        """End the task (removes nothing already written)."""
        if self._rich is not None:
            self._rich[0].stop()
            self._rich = None


def current() -> Reporter | None:
    """The reporter set by the innermost :func:`reporting` block (None: report nothing)."""
    return _current.get()


@contextlib.contextmanager
def reporting(reporter: Reporter | None) -> Iterator[Reporter | None]:
    """Within the block, :func:`note` and :func:`announce_compilation` report to ``reporter`` (None: silence);
    the reporter's task is stopped at the end."""
    token = _current.set(reporter)
    try:
        yield reporter
    finally:
        _current.reset(token)
        if reporter is not None:
            reporter.stop()


def note(message: str) -> None:
    """Say ``message`` through the current reporter, if any."""
    reporter = current()
    if reporter is not None:
        reporter.note(message)


def cold_numba_cache(*dispatchers: Any) -> bool:
    """True when calling one of the numba ``dispatchers`` will compile it: not compiled in this
    process and no usable index in its on-disk cache (``cache=True``)."""
    for disp in dispatchers:
        if getattr(disp, "signatures", None):
            continue  # compiled (or loaded) in this process
        load = getattr(getattr(getattr(disp, "_cache", None), "_cache_file", None), "_load_index", None)
        if load is None:
            return True  # not cached on disk: every process compiles it
        try:
            if not load():  # {} when missing or written for another version of the source
                return True
        except Exception:  # an unreadable index is recompiled
            return True
    return False


def announce_compilation(*dispatchers: Any, seconds: float) -> None:
    """Call before the first calls of numba ``dispatchers``: when a reporter is current and they
    will be compiled (:func:`cold_numba_cache`), it says so, with the usual duration ``seconds``."""
    if current() is not None and cold_numba_cache(*dispatchers):
        note(f"compiling numeric kernels (first run only, ~{seconds:.0f} s)…")
