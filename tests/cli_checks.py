"""Checks shared by the command-line tests."""

from __future__ import annotations


def one_error_line(err: str) -> str:
    """The single ``dpopt: error: ...`` line of ``err`` (no traceback, nothing else)."""
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("dpopt: error: ")
    return lines[0]
