"""The class prior as a private model: the log-odds of a noisy label count.

When the budget is too small for any private classifier to beat the trivial one (ε·n of order a
hundred), the best a private fit can do is the majority class -- and which class that is, is itself a
fact about the private labels.  :func:`private_class_prior` releases it with one Laplace count and
returns the intercept-only logistic model ``θ = (0, …, 0, logit p̂ / s)`` (``s`` the value of the
intercept column), so an estimator can return it through the same :class:`OptimizeResult` as any
solver.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import NDArray

from dpopt._validation import as_float_array, check_positive
from dpopt.accounting import Accountant, Budget, LaplaceEvent, PrivacySpent, commit
from dpopt.accounting.events import check_neighbouring
from dpopt.exceptions import InvalidParameterError
from dpopt.mechanisms import laplace_noise
from dpopt.randomness import RNGLike, check_rng
from dpopt.solvers._result import OptimizeResult

__all__ = ["private_class_prior"]


def private_class_prior(
    y: Any,
    dim: int,
    *,
    budget: Budget,
    rng: RNGLike,
    intercept_value: float = 1.0,
    neighbouring: str = "replace_one",
    accountant: Accountant | None = None,
) -> OptimizeResult:
    """Intercept-only logistic model from a Laplace count of the labels.

    Parameters
    ----------
    y : array of shape (n,)
        Private labels in {-1, +1}.
    dim : int
        Length of the returned parameter vector; its last coordinate multiplies the intercept column.
    budget : Budget
        The release's budget; only ε is used (the count is pure ε-DP, hence (ε, δ)-DP for every δ).
    rng : int, Generator, "secure" or None
        Randomness of the Laplace noise (``"secure"``: the exact discrete sampler).
    intercept_value : float, default 1.0
        Value ``s`` of the constant column: the intercept coefficient is ``logit(p̂)/s``.
    neighbouring : {"replace_one", "add_remove"}, default "replace_one"
        ``"replace_one"``: n is public and one count is released (the number of positive labels);
        ``"add_remove"``: both class counts are released (n is private).
    accountant : Accountant, optional
        Ledger the release is composed into before the noise is drawn.

    Returns
    -------
    OptimizeResult
        ``solution`` is zero except its last coordinate; ``method`` is ``"class_prior"``;
        ``parameters`` hold the Laplace scale and the relation.

    Privacy
    -------
    ε-DP.  Replace-one: the count of positive labels changes by at most 1 when one record is
    replaced, and n is public, so ``count + Lap(1/ε)`` is ε-DP.  Add/remove: the pair (positives,
    negatives) changes by exactly 1 in l1 norm when a record is added or removed, so the pair plus
    independent ``Lap(1/ε)`` noise is ε-DP; n is never read.  The event ``LaplaceEvent(1/ε)`` is
    committed (to ``accountant`` too) before the noise is drawn; the log-odds, its clipping to the
    open interval and the division by ``s`` are post-processing.

    Examples
    --------
    >>> import numpy as np
    >>> from dpopt.accounting import Budget
    >>> y = np.array([1.0] * 70 + [-1.0] * 30)
    >>> res = private_class_prior(y, 3, budget=Budget(1.0, 0.0), rng=0, intercept_value=0.5)
    >>> res.solution[:2].tolist(), bool(res.solution[2] > 0), res.privacy.epsilon
    ([0.0, 0.0], True, 1.0)
    """
    yv = as_float_array(y, "y")
    if yv.ndim != 1 or not np.all(np.isin(yv, (-1.0, 1.0))):
        raise InvalidParameterError("y: expected a 1-d array of labels in {-1, +1}")
    if not isinstance(dim, int | np.integer) or dim < 1:
        raise InvalidParameterError("dim: expected a positive integer")
    if not isinstance(budget, Budget):
        raise InvalidParameterError("budget: expected a dpopt.accounting.Budget")
    s = check_positive(intercept_value, "intercept_value")
    rel = check_neighbouring(neighbouring)
    scale = 1.0 / budget.epsilon
    event = LaplaceEvent(scale=scale, sensitivity=1.0)
    spent: PrivacySpent = commit(
        event, budget=budget, neighbouring=rel, kind="pld", accountant=accountant, label="class-prior"
    )
    gen = check_rng(rng)  # after the commit: nothing is drawn before the release is paid for
    positives = float(np.sum(yv > 0))
    if rel == "replace_one":
        n = yv.size
        noisy = positives + float(laplace_noise(scale, rng=gen))
        p = min(max(noisy, 0.5), n - 0.5) / n if n >= 1 else 0.5
        log_odds = math.log(p / (1.0 - p)) if n >= 1 else 0.0
    else:
        pos, neg = (np.array([positives, yv.size - positives]) + laplace_noise(scale, 2, rng=gen)).tolist()
        log_odds = math.log(max(pos, 0.5) / max(neg, 0.5))
    theta: NDArray[np.float64] = np.zeros(int(dim))
    theta[-1] = log_odds / s
    return OptimizeResult(
        solution=theta,
        privacy=spent,
        status="completed",
        iterations=1,
        method="class_prior",
        calibration="tight",
        parameters={"laplace_scale": scale, "neighbouring": rel, "intercept_value": s},
        message="intercept-only model from a Laplace count of the labels",
    )
