"""Shared pytest fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

#: How to make the reference-data tests run (said by every skip for missing reference data).
ENABLE_DATASETS = (
    "set DPOPT_DATASETS to a folder holding the published files (adult/adult.data, adult/adult.test, "
    "movielens-100k/u.data), or place them in ../shared/datasets next to the repository"
)


@pytest.fixture
def shared_datasets() -> Path:
    """The reference-data folder: ``$DPOPT_DATASETS``, else ``<repo>/../shared/datasets`` (read only).

    Skips the test, saying how to enable it, when the folder is absent.
    """
    env = os.environ.get("DPOPT_DATASETS")
    path = Path(env) if env else Path(__file__).resolve().parents[1].parent / "shared" / "datasets"
    if not path.is_dir():
        pytest.skip(f"reference datasets not found at {path}: {ENABLE_DATASETS}")
    return path
