"""A module imported on first attribute access, so that importing dpopt stays light.

``scipy`` and ``dp-accounting`` cost about a second of CPU to import; the command line's light
commands (``dpopt --help``, ``dpopt list``, ``dpopt ledger show``) never need them.  Modules that use
them at call time bind the name to a :class:`LazyModule` and keep the real import for type checkers::

    if TYPE_CHECKING:
        import dp_accounting
    else:
        dp_accounting = LazyModule("dp_accounting")
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

__all__ = ["LazyModule"]


class LazyModule:
    """Stands for the module ``name``; the first attribute read imports it."""

    __slots__ = ("_module", "_name")

    def __init__(self, name: str) -> None:
        self._name = name
        self._module: ModuleType | None = None

    @property
    def module(self) -> ModuleType:
        """The imported module."""
        if self._module is None:
            self._module = importlib.import_module(self._name)
        return self._module

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.module, attr)

    def __repr__(self) -> str:
        return f"<lazy module {self._name!r}>"
