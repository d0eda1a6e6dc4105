"""The coordinator's job as the Flower ServerApp loads it (``dpopt admm run --job pkg.mod:fn``).

The ServerApp is a process that the SuperLink's SuperExec starts (``flwr-serverapp``), not the
shell that ran ``flwr run`` or ``dpopt admm run``: the job's module is imported with the
SuperLink's environment.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from dpopt.exceptions import InvalidParameterError

__all__ = ["load_job"]


def load_job(ref: str) -> Callable[[], Any]:
    """The job function named by ``ref`` (``"package.module:function"``), as the ServerApp imports it.

    The ServerApp is a process the SuperLink starts, so the job's module must be importable with
    the SuperLink's environment (e.g. its directory on the SuperLink's ``PYTHONPATH``), not the
    environment of the shell that ran ``flwr run``; an error says so.
    """
    module, _, attr = str(ref).partition(":")
    if not module or not attr:
        raise InvalidParameterError(f"job: use 'package.module:function', not {ref!r}")
    try:
        found = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name is None or not (module == exc.name or module.startswith(exc.name + ".")):
            raise  # the job module itself imports something missing: its own traceback says what
        raise InvalidParameterError(
            f"job: the job module {module!r} is not importable in the ServerApp, the process the SuperLink "
            f"starts (not the shell that ran flwr run): start flower-superlink with the job's directory on "
            f"PYTHONPATH (PYTHONPATH=/path/to/jobs flower-superlink ...) or install the module there"
        ) from exc
    if not callable(getattr(found, attr, None)):
        raise InvalidParameterError(f"job: module {module!r} has no function {attr!r}")
    return getattr(found, attr)
