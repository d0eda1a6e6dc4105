"""Shared pytest fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def shared_datasets() -> Path:
    """``<repo>/../shared/datasets`` (read-only reference data); skip the test when it is absent."""
    path = Path(__file__).resolve().parents[1].parent / "shared" / "datasets"
    if not path.is_dir():
        pytest.skip(f"reference datasets not found at {path}")
    return path
