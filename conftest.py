"""Repository-wide pytest hooks (the doctests under src/ and the tests under tests/)."""

from __future__ import annotations

import pytest
from _pytest.doctest import DoctestItem


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip the docstring examples of a module whose optional extra is not installed.

    Such a module still imports without its extra (so the documentation and the doctest
    collection work on a bare ``pip install .[dev]``) and names what is missing in its
    ``_MISSING_EXTRA`` global.
    """
    if isinstance(item, DoctestItem) and item.dtest is not None:
        missing = item.dtest.globs.get("_MISSING_EXTRA")
        if missing:
            pytest.skip(f"needs the optional extra {missing}")
