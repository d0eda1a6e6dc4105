"""Exceptions and warnings raised by dpopt.

Every error message says what is wrong and how to fix it, and never echoes data values (only
parameter names, shapes, counts and declared bounds).

Errors carry their structure as fields, so that each layer can say them in its own terms without
parsing the text: :attr:`DPOptError.param` (the offending parameter), :attr:`DPOptError.reason` (what
is wrong with it) and :attr:`DPOptError.hint` (how to fix it, naming the settings to change as
:class:`Setting` objects).  ``str(err)`` is the Python spelling (``param: reason; hint``), e.g.
``"epsilon: must be > 0"`` or ``"...; declare a wider domain, or pass clip=True to ..."``; the
command line re-spells the same error with its flags (``--epsilon``, ``--clip``) by
:meth:`DPOptError.render`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "BoundsViolationError",
    "BudgetExceededError",
    "ConvergenceWarning",
    "DPOptError",
    "Hint",
    "InexactSolveError",
    "InvalidParameterError",
    "MissingDataBoundsError",
    "PrivacyClaimWarning",
    "Setting",
    "UnsupportedEventError",
    "python_spelling",
]


@dataclass(frozen=True)
class Setting:
    """One setting a hint asks the caller to change: ``param`` (set to ``value``, if given).

    ``owner`` names the object whose parameter it is in the Python API (``DataBounds`` for
    ``DataBounds(..., clip=True)``); a layer with its own parameter for it (an estimator's
    ``clip=True``, the command line's ``--clip``) spells it its own way.
    """

    param: str
    value: Any = ...  # Ellipsis: any value of the caller's choice (``name=...``)
    owner: str | None = None


#: How a layer writes a setting (``clip=True``, ``--clip``); None: the layer has no such setting.
Spelling = Callable[[Setting], "str | None"]


def python_spelling(setting: Setting) -> str:
    """``clip=True``, ``DataBounds(..., clip=True)`` or ``max_iter=...`` (the Python API's terms)."""
    value = "..." if setting.value is ... else repr(setting.value)
    text = f"{setting.param}={value}"
    return f"{setting.owner}(..., {text})" if setting.owner else text


@dataclass(frozen=True, init=False)
class Hint:
    """How to fix an error: ``text`` with ``{0}``, ``{1}``, ... standing for ``settings``.

    ``more`` is a further part, spelled (or left out) on its own and appended after a space: a
    Python-only aside such as ``"(or Ledger(..., create=True))"`` after advice every layer can give.

    Examples
    --------
    >>> hint = Hint("declare a wider domain, or pass {0} to clip them", Setting("clip", True))
    >>> hint.spell()
    'declare a wider domain, or pass clip=True to clip them'
    >>> hint.spell(lambda s: "--" + s.param.replace("_", "-"))
    'declare a wider domain, or pass --clip to clip them'
    """

    text: str
    settings: tuple[Setting, ...]
    more: Hint | None

    def __init__(self, text: str, *settings: Setting, more: Hint | None = None) -> None:
        object.__setattr__(self, "text", text)
        object.__setattr__(self, "settings", tuple(settings))
        object.__setattr__(self, "more", more)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_make_hint, (self.text, self.settings, self.more))

    def all_settings(self) -> tuple[Setting, ...]:
        """The settings of this part and of the further parts."""
        return self.settings + (self.more.all_settings() if self.more is not None else ())

    def spell(self, spelling: Spelling = python_spelling) -> str | None:
        """The hint in a layer's terms, without the parts naming a setting the layer lacks (None if
        no part is left)."""
        words = [spelling(s) for s in self.settings]
        own = None if any(w is None for w in words) else self.text.format(*words)
        more = self.more.spell(spelling) if self.more is not None else None
        parts = [p for p in (own, more) if p]
        return " ".join(parts) if parts else None


def _make_hint(text: str, settings: tuple[Setting, ...], more: Hint | None) -> Hint:
    return Hint(text, *settings, more=more)


class DPOptError(Exception):
    """Base class of every error raised by dpopt.

    Parameters
    ----------
    message
        What is wrong.  With ``param``, the text after ``"param: "`` (which is added); with ``hint``,
        the text before the hint (``"; "`` and the hint in Python spelling are added).
    param
        The offending parameter's name, in the terms of the function that raised.
    hint
        How to fix it (see :class:`Hint`).

    Attributes
    ----------
    reason : str
        ``message`` as given.
    param : str or None
    hint : Hint or None
    """

    def __init__(self, message: str = "", *, param: str | None = None, hint: Hint | None = None) -> None:
        self.reason = message
        self.param = param
        self.hint = hint
        super().__init__(self.render())

    def render(
        self,
        *,
        names: Callable[[str], str | None] | None = None,
        spelling: Spelling = python_spelling,
        hints: bool = True,
    ) -> str:
        """The message in a layer's terms.

        ``names`` maps :attr:`param` to the layer's name for it (None: keep it); ``spelling`` writes
        the hint's settings (a hint the layer cannot spell, i.e. one with a setting it lacks, is
        left out, as is every hint with ``hints=False``).  The defaults give ``str(err)`` as raised.
        """
        text = self.reason
        if self.hint is not None and hints:
            hint = self.hint.spell(spelling)
            if hint is not None:
                text = f"{text}; {hint}" if text else hint
        if self.param is not None:
            name = (names(self.param) if names is not None else None) or self.param
            text = f"{name}: {text}"
        return text

    def reworded(self, message: str) -> DPOptError:
        """A copy (same type, same fields) whose ``str`` is ``message`` (a layer's rendering)."""
        new = copy.copy(self)
        new.args = (message,)
        return new


class InvalidParameterError(DPOptError, ValueError):
    """An argument has the wrong type, range, shape or contains non-finite values."""


class MissingDataBoundsError(DPOptError, ValueError):
    """A private computation needs a declared bound (feature norm, label bound, ...) that is absent.

    dpopt never infers sensitivities from the private data; declare the bound or opt in to clipping.
    """


class BoundsViolationError(DPOptError, ValueError):
    """The data violate a declared bound and clipping was not requested."""


class BudgetExceededError(DPOptError):
    """Composing an event would exceed the accountant's budget; the accountant was left unchanged.

    Attributes
    ----------
    requested : float or None
        The total ε (at ``delta``) the accountant would reach with the refused event; None when the
        refusal is not a comparison of a composed total with a budget.
    budget : float or None
        The budget's ε that ``requested`` exceeds.
    remaining : float or None
        ε left before the refused event (None if not known).
    delta : float or None
        The δ at which ``requested`` and ``budget`` are stated.
    """

    def __init__(
        self,
        message: str = "",
        *,
        param: str | None = None,
        hint: Hint | None = None,
        requested: float | None = None,
        budget: float | None = None,
        remaining: float | None = None,
        delta: float | None = None,
    ) -> None:
        self.requested = requested
        self.budget = budget
        self.remaining = remaining
        self.delta = delta
        super().__init__(message, param=param, hint=hint)

    @classmethod
    def composing(cls, requested: float, budget: float, delta: float, kind: str) -> BudgetExceededError:
        """The refusal of a ``kind`` accountant whose budget is ε=``budget`` at ``delta``."""
        return cls(
            f"composing this event would spend ε={requested:.4g} at δ={delta:g}, over the budget "
            f"ε={budget:g} ({kind} accountant); increase the noise, reduce the number of releases or "
            "raise the budget",
            requested=requested,
            budget=budget,
            delta=delta,
        )


#: The Python API's way to run without privacy (``budget="non-private"``), where a method allows it.
NON_PRIVATE_HINT = Hint(
    "to run without privacy, switch the noise off where the method allows it ({0})",
    Setting("budget", "non-private"),
)


class UnsupportedEventError(DPOptError, TypeError):
    """An accountant cannot analyse the given privacy event (or a precondition of its rule fails)."""


class InexactSolveError(DPOptError, RuntimeError):
    """The inner solver could not certify the declared tolerance; nothing was released.

    The privacy analysis of objective and output perturbation covers a computed point only when its
    gradient-mapping norm is certified to be at most the declared ``tol``.  The budget committed to
    the run is spent (it was composed before any noise was drawn).
    """


class ConvergenceWarning(UserWarning):
    """An iterative solver stopped before meeting its tolerance."""


class PrivacyClaimWarning(UserWarning):
    """A seed's ("paper") calibration is unsound or used outside its preconditions.

    The computation still runs (for reproduction), but the reported privacy is the true figure.
    """


class LargeDeltaWarning(PrivacyClaimWarning):
    """δ is too large for the data set's (public or declared) size to mean anything.

    The mechanism that publishes each record in the clear with probability δ is (0, δ)-DP, so a
    guarantee with δ >= 1/n allows exposing about δ·n >= 1 whole records.  Issued by
    :class:`~dpopt.accounting.Budget` for δ >= 1/2 (void for every data set of two or more records)
    and by the front doors that know n (replace-one: n is public; add/remove: ``declared_size`` only,
    never the private size).  The computation runs as asked; its calibration does not depend on n.
    """


__all__ += ["LargeDeltaWarning"]
