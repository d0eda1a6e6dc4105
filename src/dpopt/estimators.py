"""scikit-learn compatible private estimators (public scikit-learn base classes only).

* :class:`DPLogisticRegression` -- binary logistic regression.
* :class:`DPLinearRegression` -- least squares over an l2 ball.
* :class:`DPLasso` -- least squares over an l1 ball (private Frank-Wolfe by default).

Each estimator follows scikit-learn's contract: ``__init__`` only stores parameters, ``fit``
validates them and the data, learned attributes end in ``_``.  They add the declared data bounds
(``feature_norm``, ``label_bound``), the privacy budget (``epsilon``, ``delta``), the solver, the
``calibration`` and ``rng``, and expose what was spent as ``privacy_spent_``.  Fitting *twice*
spends the budget twice: privacy is per call to ``fit``; pass a shared ``accountant=`` to keep the
running total of many fits (cross-validation, grid searches) and to refuse fits over a budget.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import scipy.sparse
from numpy.typing import NDArray
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.utils.multiclass import check_classification_targets, unique_labels
from sklearn.utils.validation import check_is_fitted, validate_data

from dpopt._validation import (
    as_float_array,
    check_nonneg,
    check_positive,
    check_probability,
    numeric_or_refuse,
)
from dpopt.accounting import Accountant, Budget, Neighbouring
from dpopt.accounting.delta import delta_size_checked
from dpopt.exceptions import (
    DPOptError,
    InvalidParameterError,
    MissingDataBoundsError,
    Setting,
    python_spelling,
)
from dpopt.problems import DataBounds, ERMProblem, L1Ball, L2Ball
from dpopt.solvers import OptimizeResult, minimize
from dpopt.solvers.class_prior import private_class_prior
from dpopt.solvers.minimize import (
    default_sgd_options,
    logistic_sgd_by_default,
    pure_logistic_op_options,
    relation_origin,
    resolve_relation,
    warn_delta_size,
)
from dpopt.solvers.private_selection import (
    Candidate,
    clipped_squared_error,
    private_selection,
    squared_error_sensitivity,
)

__all__ = ["DPLasso", "DPLinearRegression", "DPLogisticRegression"]

#: The former ``DPLogisticRegression(solver="auto")`` switch (output perturbation when ε·n was below
#: this); kept for reference and for ``benchmarks/erm_logistic_validation.py``'s "current" row.  The
#: default is now DP-SGD / objective perturbation by ε·n/√d
#: (:data:`dpopt.solvers.minimize.LOGISTIC_OBJECTIVE_PERTURBATION_EPSILON_N_SQRT_D`).
AUTO_OUTPUT_PERTURBATION_EPSILON_N = 100.0
#: ``DPLogisticRegression(solver="auto")`` with δ = 0 returns the private class prior (an intercept-only
#: model from one Laplace count of the labels, :func:`dpopt.solvers.class_prior.private_class_prior`)
#: when ε·n is below this (n public under replace-one, ``declared_size`` under add/remove).  On the
#: breast-cancer validation splits (n = 278, d = 31; docs/erm_accuracy.md) pure-ε objective
#: perturbation was below the majority class at ε·n = 14-56 and above it from ε·n = 139 on.
AUTO_CLASS_PRIOR_EPSILON_N = 100.0
#: ``DPLinearRegression(solver="auto")`` with δ > 0 uses ``dp_mag`` (clipped noisy gradients, public
#: surrogate ridge) when ε·n/√d is at least this and ``ssp`` (AdaSSP) below.  Chosen on draws of the
#: benchmark's generators that the benchmark does not use (seeds 1000-1002; [-1, 1]^500 rows, n = 3500,
#: and [-1, 1]^20 rows, n = 2000): dp_mag was ahead from ε·n/√d = 156 (d = 500) and 224 (d = 20) on,
#: AdaSSP ahead at 78 and 45 (where both are near the zero predictor).
AUTO_LINEAR_MAG_EPSILON_N_SQRT_D = 100.0
#: ``DPLinearRegression(solver="auto")`` with δ = 0 uses objective perturbation (its pure-ε form) when
#: ε·n/(d·B₂²) is at least this (B₂² = d·feature_norm² for ``norm="linf"``, feature_norm² for l2; d
#: counting the intercept column) and Frank-Wolfe with report-noisy-min (``"dp_frank_wolfe"``, pure ε)
#: over the l1 ball of radius ``max_norm`` (inside the l2 ball) below.  Objective perturbation's
#: l2-Laplace noise grows with d·B₂; the selection's noise does not.  Chosen on draws of the
#: benchmark's generator it does not use (seeds 1000-1002; [-1, 1]^d rows with d = 20, 50, 500, dense
#: and 5-sparse targets, docs/erm_accuracy.md): objective perturbation was worse than the zero
#: predictor on the sparse targets up to 15 (the largest tried below 20) and ahead of Frank-Wolfe on
#: the dense ones from 10; at 25 it beat the zero predictor on both designs tried there (d = 20).
AUTO_LINEAR_PURE_OP_EPSILON_N = 25.0
#: With δ > 0 below :data:`AUTO_LINEAR_MAG_EPSILON_N_SQRT_D`: AdaSSP (``"ssp"``) when ε·n/(d·B₂²) is at
#: least this (its noise on XᵀX is then below the signal), else ``"dp_frank_wolfe"`` over the l1 ball
#: of radius ``max_norm``.  Same validation draws: Frank-Wolfe ahead of or tied with AdaSSP at
#: ε·n/(d·B₂²) <= 0.7 except d = 20, ε = 0.1 (0.246 vs 0.236), AdaSSP ahead at 1.0 (d = 20).
AUTO_LINEAR_SSP_EPSILON_N = 1.0
#: ``DPLinearRegression(solver="auto")`` with δ > 0, ε·n/√d >= :data:`AUTO_LINEAR_MAG_EPSILON_N_SQRT_D`
#: (where ``dp_mag`` used to be the default) and d >= :data:`AUTO_LINEAR_SELECT_MIN_DIM`: a paid
#: private selection between ``dp_frank_wolfe`` over the l1 ball (wins on sparse targets) and
#: ``dp_mag`` over the l2 ball (wins on dense ones); no public feature tells them apart
#: (:mod:`dpopt.solvers.private_selection`).
AUTO_LINEAR_SELECT = "select(dp_frank_wolfe,dp_mag)"
#: The selection is used from this many columns d (counting the intercept) on; below it ``dp_mag``
#: alone, as before.  On the validation draws (docs/erm_accuracy.md) Frank-Wolfe won by at most 10 %
#: at d = 20 and 50 on sparse targets while dp_mag won by up to 10x on dense ones, so splitting the
#: budget only cost accuracy there; at d = 200 the selection lost 1.4-2.2x on dense targets at
#: ε = 1-2 for a 1.1-1.6x gain on sparse ones; at d = 500 it gained 1.7-3.9x on sparse targets for a
#: 1.1-1.45x loss on dense ones.
#: 300 lies between the last design where the selection did not pay (200) and the first where it did.
AUTO_LINEAR_SELECT_MIN_DIM = 300
#: Shares of ε of the two candidates and of the selection (before the common PLD scale-up) and the
#: candidates' shares of δ.  Chosen on validation draws (docs/erm_accuracy.md, "Linear regression: paid
#: private selection").
LINEAR_SELECT_SHARES = (0.45, 0.45)
LINEAR_SELECT_SELECTION_SHARE = 0.1
LINEAR_SELECT_DELTA_SHARES = (0.5, 0.5)
#: Cap τ of the selection score's residual (as a fraction of the declared label bound): the score is
#: Σ min((clip(x·θ, ±Y) - y)², τ²), of sensitivity τ².
LINEAR_SELECT_RESIDUAL_CLIP = 0.5
#: Default ridge of the output-perturbation path, in units of B² (B: declared l2 bound of the
#: intercept-augmented rows): strong enough that the public solution radius is small and the
#: logistic loss's Lipschitz constant on it is close to B/2 (see
#: :func:`dpopt.solvers.output_perturbation.solution_radius`).
OUTPUT_PERTURBATION_PENALTY = 10.0


#: minimize()'s parameters -> the estimators' (an error names what the caller can change)
_ESTIMATOR_PARAMS = {"method": "solver"}


def _estimator_spelling(setting: Setting) -> str:
    """A hint's setting as an estimator parameter: ``DataBounds(..., clip=True)`` -> ``clip=True``."""
    return python_spelling(Setting(_ESTIMATOR_PARAMS.get(setting.param, setting.param), setting.value))


def _in_estimator_terms(exc: DPOptError, estimator: str) -> DPOptError:
    """The same error (type and fields), worded with the estimator's parameters (``clip=True``,
    ``solver=``) when its parameter or its hint's settings are spelled differently by the estimator."""
    settings = exc.hint.all_settings() if exc.hint is not None else ()
    if exc.param not in _ESTIMATOR_PARAMS and not any(
        s.owner is not None or s.param in _ESTIMATOR_PARAMS for s in settings
    ):
        return exc
    return exc.reworded(
        f"{estimator}: {exc.render(names=_ESTIMATOR_PARAMS.get, spelling=_estimator_spelling)}"
    )


class _DPLinearModel(BaseEstimator):
    """Shared fitting logic: augment an intercept column, build the ERM problem, call ``minimize``."""

    _loss = "logistic"

    def _budget(self) -> Budget | str:
        eps = self.epsilon
        if isinstance(eps, float | int) and math.isinf(eps):
            return "non-private"
        return Budget(check_positive(eps, "epsilon"), check_probability(self.delta, "delta"))

    def _bounds(self, dim: int) -> tuple[DataBounds, float]:
        """Bounds of the (intercept-augmented) records and the intercept column's value."""
        if self.feature_norm is None:
            raise MissingDataBoundsError(
                f"{type(self).__name__}: feature_norm is required (a public bound on the norm of each "
                "row of X); dpopt never infers it from the data"
            )
        b = check_positive(self.feature_norm, "feature_norm")
        if self.norm not in ("l2", "linf"):
            raise InvalidParameterError("norm: must be 'l2' or 'linf'")
        s = check_positive(self._intercept_scaling(), "intercept_scaling") if self.fit_intercept else 0.0
        if self.fit_intercept:
            b_aug = math.hypot(b, s) if self.norm == "l2" else max(b, s)
        else:
            b_aug = b
        label = getattr(self, "label_bound", None)
        return DataBounds(b_aug, self.norm, label, clip=bool(self.clip)), s

    def _constraint(self, dim: int) -> Any:
        return None

    def _intercept_scaling(self) -> float:
        return float(self.intercept_scaling)

    def _method(self, n: int) -> str:
        return str(self.solver)

    def _penalty(self, method: str, bounds: DataBounds, dim: int) -> float:
        return check_nonneg(self.l2_penalty, "l2_penalty")

    def _augment(self, X: Any, s: float) -> Any:
        if not self.fit_intercept:
            return X
        if scipy.sparse.issparse(X):
            return scipy.sparse.hstack([X, np.full((X.shape[0], 1), s)], format="csr")
        return np.hstack([X, np.full((X.shape[0], 1), s)])

    def _check_relation(self) -> Neighbouring:
        """The fit's relation: ``neighbouring`` if given, else the accountant's, else replace-one.

        An explicit ``neighbouring`` that differs from the accountant's is refused by name (both
        relations and the fixes); a default (None) follows the accountant.
        """
        acct_rel = getattr(self.accountant, "neighbouring", None)
        return resolve_relation(self.neighbouring, acct_rel, self.declared_size, who=type(self).__name__)

    def _relation_origin(self) -> str:
        """Empty, or why the relation is add/remove (the accountant's), for declared_size errors."""
        return relation_origin(self.neighbouring, getattr(self.accountant, "neighbouring", None))

    def _fit_checked(self, X: Any, y: NDArray[np.float64]) -> OptimizeResult:
        """Check the relation and δ against the public n once, then fit (inner calls stay silent)."""
        relation = self._check_relation()
        warn_delta_size(self._budget(), relation, X.shape[0], self.declared_size, type(self).__name__, 5)
        with delta_size_checked():
            return self._fit_problem(X, y)

    def _fit_problem(self, X: Any, y: NDArray[np.float64]) -> OptimizeResult:
        if self.clip and self.fit_intercept and self.norm == "l2":
            # clip the features to feature_norm first, so the intercept column stays exact
            X = DataBounds(self.feature_norm, "l2", clip=True).enforce(X, None, label_required=False)[0]
        dim = X.shape[1] + (1 if self.fit_intercept else 0)
        self.solver_ = method = self._method(X.shape[0])
        bounds, s = self._bounds(dim)
        self.l2_penalty_ = penalty = self._penalty(method, bounds, dim)
        problem = ERMProblem(self._loss, bounds, self._constraint(dim), l2_penalty=penalty)
        options = dict(self.solver_options or {})
        max_iter = None
        try:
            relation = self._relation_options()
            acct_rel = getattr(self.accountant, "neighbouring", None)
            add_remove = (relation.get("neighbouring") or acct_rel) == "add_remove"
            if self.solver == "auto" and method == "dp_sgd" and not add_remove:
                # replace-one (n public): the same public DP-SGD rule as minimize(method="auto")
                shape = np.empty((0, dim))  # the augmented column count, public
                options, max_iter = default_sgd_options(method, problem, shape, options, None, X.shape[0])
            elif self.solver == "auto" and method == "objective_perturbation":  # pure ε: public ridge share
                options = pure_logistic_op_options(problem, np.empty((0, dim)), self._budget(), options)
            if method == "class_prior":
                return self._fit_class_prior(problem, self._augment(X, s), y, s, relation)
            return minimize(
                problem,
                self._augment(X, s),
                y,
                method=method,
                budget=self._budget(),
                rng=self.rng,
                calibration=self.calibration,
                accountant=self.accountant,
                max_iter=max_iter,
                **relation,
                **options,
            )
        except DPOptError as exc:
            raise _in_estimator_terms(exc, type(self).__name__) from exc

    def _fit_class_prior(
        self, problem: ERMProblem, X: Any, y: NDArray[np.float64], s: float, relation: dict[str, Any]
    ) -> OptimizeResult:
        """The intercept-only model of :func:`dpopt.solvers.class_prior.private_class_prior`."""
        if not self.fit_intercept:
            raise InvalidParameterError(
                f"{type(self).__name__}: solver='class_prior' is an intercept-only model; it needs "
                "fit_intercept=True"
            )
        if self._loss != "logistic":
            raise InvalidParameterError(f"{type(self).__name__}: solver='class_prior' is for classification")
        budget = self._budget()
        if not isinstance(budget, Budget):
            raise InvalidParameterError(
                f"{type(self).__name__}: solver='class_prior' is a private release; give a finite epsilon"
            )
        X, y = problem.prepare(X, y)  # the declared bounds are checked as for every solver
        acct_rel = getattr(self.accountant, "neighbouring", None)
        return private_class_prior(
            y,
            X.shape[1],
            budget=budget,
            rng=self.rng,
            intercept_value=s,
            neighbouring=str(relation.get("neighbouring") or acct_rel or "replace_one"),
            accountant=self.accountant,
        )

    def _relation_options(self) -> dict[str, Any]:
        """``neighbouring``/``declared_size`` for ``minimize``, for the estimators that take them."""
        out: dict[str, Any] = {}
        for key in ("neighbouring", "declared_size"):
            value = getattr(self, key, None)
            if value is not None:
                out[key] = value
        return out

    def _store(self, result: OptimizeResult) -> None:
        w = np.asarray(result.solution)
        if self.fit_intercept:
            self.coef_ = w[:-1].copy()
            self.intercept_ = float(w[-1] * self._intercept_scaling())
        else:
            self.coef_ = w.copy()
            self.intercept_ = 0.0
        self.privacy_spent_ = result.privacy
        self.n_iter_ = result.iterations
        self.result_ = result

    def _linear(self, X: Any) -> NDArray[np.float64]:
        check_is_fitted(self)
        X = numeric_or_refuse(lambda: validate_data(self, X, accept_sparse="csr", reset=False), X=X)
        return np.asarray(X @ self.coef_).ravel() + self.intercept_

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.non_deterministic = self.rng is None
        return tags


class DPLogisticRegression(ClassifierMixin, _DPLinearModel):
    """Differentially private binary logistic regression.

    Parameters
    ----------
    epsilon : float, default 1.0
        Privacy budget ε (> 0; ``float("inf")`` fits without noise).
    delta : float, default 1e-5
        Privacy budget δ.
    feature_norm : float or None, default None
        **Required.**  Public bound on ``‖x‖`` for every row (in the norm ``norm``).
    norm : {"l2", "linf"}, default "l2"
        Norm of ``feature_norm``.
    clip : bool, default False
        Clip rows to ``feature_norm`` instead of raising when a row exceeds it.
    solver : str, default "auto"
        ``"auto"``, δ > 0: DP-SGD (``"dp_sgd"``: Poisson batches of expected size √n, 20 epochs,
        clipping at half the declared gradient bound, a constant step scaled down under heavy
        noise, suffix averaging when the noise dominates; PLD accounting) when ``epsilon *
        n_samples / sqrt(d) < 6500`` (d counting the intercept column;
        :data:`dpopt.solvers.minimize.LOGISTIC_OBJECTIVE_PERTURBATION_EPSILON_N_SQRT_D`), objective
        perturbation above; ``delta=0``: objective perturbation's pure-ε form (l2-Laplace noise,
        Jacobian share ``min(0.1, max(2, ε)/d)``), or the private class prior
        (``"class_prior"``: an intercept-only model from one Laplace count of the labels) when
        ``epsilon * n_samples < 100`` (:data:`AUTO_CLASS_PRIOR_EPSILON_N`; the declared size under
        add/remove).
        Or any method of :func:`dpopt.solvers.minimize` (``"mirror_descent"`` and
        ``"frank_wolfe"`` need ``max_norm``).
    l2_penalty : float or None, default None
        λ of ``(λ/2)‖w‖²`` (the objective is the *average* loss plus the penalty).  ``None``: 0 for
        objective perturbation (which adds its own calibrated ridge) and ``10·B²`` for output
        perturbation (:data:`OUTPUT_PERTURBATION_PENALTY`; B = the declared l2 bound of the
        intercept-augmented rows).
    max_norm : float or None, default None
        Constrain ``‖(w, b)‖₂ <= max_norm`` (``None``: unconstrained).
    fit_intercept : bool, default True
        Fit an intercept through an extra constant feature equal to ``intercept_scaling`` (which
        enlarges the declared l2 feature bound to ``sqrt(feature_norm² + intercept_scaling²)``).
    intercept_scaling : float or None, default None
        ``None``: 0.5 for objective perturbation and 0.25 for output perturbation.  A smaller
        constant column keeps the declared bound (and so the noise) small.
    calibration : str, default "tight"
        ``"tight"`` or ``"paper"`` (see :func:`dpopt.solvers.minimize`).
    solver_options : dict or None
        Extra options for the solver (e.g. ``{"iterations": 500}``).
    rng : int, Generator, "secure" or None, default None
        Randomness of the noise (None: fresh OS entropy each fit).
    accountant : Accountant or None, default None
        A shared ledger (``neighbouring="replace_one"``) into which *every* ``fit`` composes what it
        spends before drawing noise, and which refuses fits over its budget.  It is shared, not
        copied, by :func:`sklearn.base.clone`, so the fits of a ``GridSearchCV`` or
        ``cross_val_score`` all land in the one ledger.
    neighbouring : {"replace_one", "add_remove"} or None, default None
        The neighbouring relation of the guarantee (None: the accountant's, else replace-one; an
        explicit relation other than the accountant's is refused, naming both).  Note that
        :func:`~dpopt.accounting.make_accountant` defaults to ``"add_remove"``: such an accountant
        makes the fit add/remove, which needs ``declared_size``.
        ``"add_remove"``: the data's size is private; ``solver="auto"`` is then DP-SGD with
        hyper-parameters from ``declared_size`` (see :func:`dpopt.solvers.minimize`), and for
        ``delta=0`` objective perturbation's add/remove pure-ε form (or the class prior).
    declared_size : int or None, default None
        Public dataset size N used under ``neighbouring="add_remove"`` (never read from the data; a
        wrong N costs accuracy, not privacy).

    Attributes
    ----------
    coef_ : ndarray of shape (n_features,)
    intercept_ : float
    classes_ : ndarray of shape (2,)
    privacy_spent_ : PrivacySpent
        What the last ``fit`` spent (each ``fit`` is a new release; the running total of many fits is
        in the shared ``accountant``).
    solver_ : str
        The method actually used (resolves ``"auto"``).
    l2_penalty_ : float
        The λ actually used.
    n_iter_ : int
    result_ : OptimizeResult

    Privacy
    -------
    Each ``fit`` is (ε, δ)-DP with respect to replacing one row of ``(X, y)`` (n public) -- with
    ``neighbouring="add_remove"``, adding or removing one row (the default solver is then DP-SGD
    with a declared Poisson rate and PLD accounting; n is not used) -- given
    that every row satisfies the declared ``feature_norm`` (checked; clipped if ``clip=True``).
    Labels are mapped to ±1.  The whole fit is one release by the chosen solver, composed into its
    accountant before any noise is drawn:

    * DP-SGD (default when δ > 0 and ε·n/√d < 6500): every step releases a Poisson-sampled sum of
      clipped per-example gradients (clip ``B/2``) plus Gaussian noise, calibrated for the whole
      run with the PLD accountant under replace-one (the replaced record moves the sum by at most
      twice the clip); the step size and the averaging depend on the public noise level only;
    * output perturbation (``solver="output_perturbation"``): Gaussian noise on the minimiser of the
      λ-regularised logistic loss, replace-one sensitivity ``2 L_R/(nλ)`` where ``L_R`` is the
      logistic loss's Lipschitz bound on the public ball that contains every minimiser
      (:func:`dpopt.solvers.private_output_perturbation`), σ calibrated with the PLD accountant;
    * objective perturbation (the default otherwise): the replace-one analysis of
      :func:`dpopt.solvers.private_objective_perturbation` (χ₂ hockey-stick calibration; with
      ``delta=0`` pure ε-DP with l2-Laplace noise, Chaudhuri-Monteleoni-Sarwate 2011; under
      add/remove, pure ε only, its sum form with a ridge and noise rate from ε and the declared
      bounds, no n);
    * the class prior (``delta=0`` and ε·n < 100): one count released with Laplace noise of scale
      1/ε (replace-one: the positives, n public; add/remove: both class counts), ε-DP
      (:func:`dpopt.solvers.class_prior.private_class_prior`); the features are not used.

    Every default (the solver switch, DP-SGD's batch, steps, clip and step size, λ, the intercept
    column) is a function of public quantities only -- ε, δ, n, the number of features and the
    declared bounds -- never of the data values.  The DP-SGD constants and the switch at
    ε·n/√d = 6500 were chosen on validation splits of the *training* data of Adult and breast
    cancer (``benchmarks/erm_logistic_validation.py``, ``docs/erm_accuracy.md``); λ = 10·B² and
    the intercept column 0.5 / 0.25 on the breast-cancer benchmark of ``benchmarks/bench_erm.py``.
    They are the same for every data set.  The set of classes ``classes_`` is read from ``y`` and is **not** protected (pass
    data whose two labels are public).
    """

    def __init__(
        self,
        *,
        epsilon: float = 1.0,
        delta: float = 1e-5,
        feature_norm: float | None = None,
        norm: str = "l2",
        clip: bool = False,
        solver: str = "auto",
        l2_penalty: float | None = None,
        max_norm: float | None = None,
        fit_intercept: bool = True,
        intercept_scaling: float | None = None,
        calibration: str = "tight",
        solver_options: dict[str, Any] | None = None,
        rng: Any = None,
        accountant: Accountant | None = None,
        neighbouring: str | None = None,
        declared_size: int | None = None,
    ) -> None:
        self.epsilon = epsilon
        self.delta = delta
        self.feature_norm = feature_norm
        self.norm = norm
        self.clip = clip
        self.solver = solver
        self.l2_penalty = l2_penalty
        self.max_norm = max_norm
        self.fit_intercept = fit_intercept
        self.intercept_scaling = intercept_scaling
        self.calibration = calibration
        self.solver_options = solver_options
        self.rng = rng
        self.accountant = accountant
        self.neighbouring = neighbouring
        self.declared_size = declared_size

    def _constraint(self, dim: int) -> Any:
        return None if self.max_norm is None else L2Ball(dim, check_positive(self.max_norm, "max_norm"))

    def _method(self, n: int) -> str:
        if self.solver != "auto":
            return str(self.solver)
        acct_rel = getattr(self.accountant, "neighbouring", None)
        add_remove = (self.neighbouring or acct_rel) == "add_remove"
        size = self.declared_size if add_remove else n  # public: declared under add/remove
        budget = self._budget()
        if (
            self.fit_intercept
            and isinstance(budget, Budget)
            and budget.delta == 0
            and size is not None
            and budget.epsilon * int(size) < AUTO_CLASS_PRIOR_EPSILON_N
        ):
            return "class_prior"  # pure ε with ε·n this small: no pure-ε fit beat the class prior
        if add_remove:  # n is private under add/remove: no size-based switch
            pure = isinstance(budget, Budget) and budget.delta == 0
            return "objective_perturbation" if pure else "dp_sgd"
        dim = int(self.n_features_in_) + (1 if self.fit_intercept else 0)
        if logistic_sgd_by_default(self._budget(), str(self.calibration), n, dim):
            return "dp_sgd"  # the same public rule as minimize(method="auto")
        return "objective_perturbation"  # δ = 0: its pure-ε (l2-Laplace) form

    def _intercept_scaling(self) -> float:
        if self.intercept_scaling is not None:
            return float(self.intercept_scaling)
        return 0.25 if getattr(self, "solver_", None) == "output_perturbation" else 0.5

    def _penalty(self, method: str, bounds: DataBounds, dim: int) -> float:
        if self.l2_penalty is not None:
            return check_nonneg(self.l2_penalty, "l2_penalty")
        if method == "output_perturbation":
            return OUTPUT_PERTURBATION_PENALTY * bounds.feature_l2(dim) ** 2
        return 0.0

    def fit(self, X: Any, y: Any) -> DPLogisticRegression:
        """Fit the model privately (spends (ε, δ) on ``(X, y)``)."""
        X, y = numeric_or_refuse(
            lambda: validate_data(self, X, y, accept_sparse="csr", dtype=np.float64), X=X
        )
        numeric_or_refuse(lambda: check_classification_targets(y))  # sklearn's ValueError, as ours
        self.classes_ = unique_labels(y)
        if self.classes_.size != 2:
            raise InvalidParameterError(  # a ValueError, as scikit-learn expects
                "Only binary classification is supported. DPLogisticRegression got "
                f"{self.classes_.size} classes"
            )
        ys = np.where(y == self.classes_[1], 1.0, -1.0)
        self._store(self._fit_checked(X, ys))
        return self

    def decision_function(self, X: Any) -> NDArray[np.float64]:
        """Signed score ``X @ coef_ + intercept_`` (positive means ``classes_[1]``)."""
        return self._linear(X)

    def predict_proba(self, X: Any) -> NDArray[np.float64]:
        """Probabilities of ``classes_[0]`` and ``classes_[1]`` under the logistic model."""
        z = self.decision_function(X)
        p1 = 1.0 / (1.0 + np.exp(-np.clip(z, -500, 500)))
        return np.column_stack([1 - p1, p1])

    def predict_log_proba(self, X: Any) -> NDArray[np.float64]:
        return np.log(self.predict_proba(X))

    def predict(self, X: Any) -> NDArray[Any]:
        """Predicted class labels."""
        check_is_fitted(self)
        return self.classes_[(self.decision_function(X) > 0).astype(int)]

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        if tags.classifier_tags is not None:
            tags.classifier_tags.multi_class = False
        return tags


class _DPRegressor(RegressorMixin, _DPLinearModel):
    _loss = "squared"

    def fit(self, X: Any, y: Any) -> Any:
        """Fit the model privately (spends (ε, δ) on ``(X, y)``)."""
        X, y = numeric_or_refuse(
            lambda: validate_data(self, X, y, accept_sparse="csr", dtype=np.float64, y_numeric=True), X=X, y=y
        )
        if self.label_bound is None:
            raise MissingDataBoundsError(
                f"{type(self).__name__}: label_bound is required (a public bound on |y|)"
            )
        yv = as_float_array(y, "y")
        if self.clip:
            yv = np.clip(yv, -self.label_bound, self.label_bound)
        self._store(self._fit_checked(X, yv))
        return self

    def predict(self, X: Any) -> NDArray[np.float64]:
        """Predicted values ``X @ coef_ + intercept_``."""
        return self._linear(X)


class DPLinearRegression(_DPRegressor):
    """Differentially private least squares over the l2 ball ``‖(w, b)‖₂ <= max_norm``.

    Parameters are those of :class:`DPLogisticRegression` plus ``label_bound`` (required: a public
    bound on |y|) and ``max_norm`` (default 1.0; the squared loss is Lipschitz only on a bounded
    set).  ``solver="auto"`` (default), with δ > 0: ``"dp_mag"`` (noisy clipped gradients with the
    thesis's multistage acceleration and a public surrogate ridge) when ε·n/√d >= 100
    (:data:`AUTO_LINEAR_MAG_EPSILON_N_SQRT_D`, d counting the intercept column) and d < 300; from
    d >= 300 (:data:`AUTO_LINEAR_SELECT_MIN_DIM`) in that band a **paid private selection**
    (``solver_ == "select(dp_frank_wolfe,dp_mag)"``, :data:`AUTO_LINEAR_SELECT`): both
    ``"dp_frank_wolfe"`` over the l1 ball (better on sparse targets) and ``"dp_mag"`` over the l2
    ball (better on dense ones) are fitted with a share of the budget and the one with the smaller
    noisy clipped training error is released (``result_.parameters["selected"]``; see
    :func:`dpopt.solvers.private_selection.private_selection`); ``solver_options`` are then refused
    (pick the solver explicitly to pass them).  Below ε·n/√d = 100
    sufficient-statistics perturbation (``"ssp"``, AdaSSP) when ε·n/(d·B₂²) >= 1
    (:data:`AUTO_LINEAR_SSP_EPSILON_N`, B₂ the declared bound on ‖x‖₂, √d·feature_norm for
    ``norm="linf"``), else ``"dp_frank_wolfe"``.  With δ = 0 (pure ε): objective perturbation when
    ε·n/(d·B₂²) >= 25 (:data:`AUTO_LINEAR_PURE_OP_EPSILON_N`), else ``"dp_frank_wolfe"``.
    ``"dp_frank_wolfe"`` (and ``"frank_wolfe"``) run over the l1 ball of radius ``max_norm``, which
    lies inside the l2 ball: their selection noise does not grow with d, the others' does.
    ``neighbouring="add_remove"`` with ``declared_size=N`` (public, never read from the data): the
    same thresholds with N for n (and the same selection); ``"dp_mag"`` then runs full-batch with
    its gradient sum normalised by N (Poisson rate 1), below its threshold and for δ = 0
    ``"dp_frank_wolfe"`` (objective perturbation and AdaSSP have no add/remove analysis).

    Privacy
    -------
    (ε, δ)-DP per ``fit`` under replace-one neighbours (add/remove with ``neighbouring="add_remove"``
    and ``declared_size``), given ``‖x‖ <= feature_norm`` and
    ``|y| <= label_bound`` (checked, or clipped with ``clip=True``).  The solver choice uses only ε,
    the public n (replace-one; the declared N under add/remove), d and the declared bounds.  ``"dp_mag"``: see
    :func:`dpopt.solvers.multistage.dp_mag`.  ``"ssp"``: one Gaussian
    release of (XᵀX, Xᵀy, λ_min(XᵀX)) with sensitivities from the declared bounds, PLD-calibrated
    (:func:`dpopt.solvers.sufficient_statistics.private_sufficient_statistics`); the ridge and the
    solve over the ball are post-processing.  ``"objective_perturbation"``: the replace-one
    calibration (χ₂ hockey-stick for δ > 0, l2-Laplace for δ = 0).  ``"dp_frank_wolfe"``:
    report-noisy-min selections (Laplace; pure ε composes linearly, δ > 0 through PLD), see
    :func:`dpopt.solvers.frank_wolfe_tuned.tuned_frank_wolfe`.  The private selection: both
    candidates' planned releases and one report-noisy-min over the training scores
    ``Σ min((clip(x·θ, ±label_bound) - y)², τ²)`` (τ = label_bound/2, sensitivity τ² under both
    relations, monotone under add/remove) are composed by the PLD accountant into one event,
    committed before any noise is drawn (``privacy_spent_`` is the whole procedure's spend; an
    ``accountant=`` receives that single event); the shares, the band and τ are public.

    Examples
    --------
    >>> import numpy as np
    >>> from dpopt.estimators import DPLinearRegression
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(-1, 1, size=(2000, 5)) / np.sqrt(5)
    >>> y = np.clip(X @ np.array([1.0, -1.0, 0.5, 0.0, 0.0]) + 0.05 * rng.normal(size=2000), -1, 1)
    >>> model = DPLinearRegression(epsilon=1.0, feature_norm=1.0, label_bound=1.0, rng=0).fit(X, y)
    >>> model.solver_
    'dp_mag'
    >>> bool(np.mean((model.predict(X) - y) ** 2) < np.mean(y**2))
    True

    With many columns the default selects privately between Frank-Wolfe and ``dp_mag``:

    >>> Xw = rng.uniform(-1, 1, size=(3000, 400))
    >>> yw = np.clip(0.2 * Xw[:, :5].sum(axis=1) + 0.1 * rng.normal(size=3000), -1, 1)
    >>> wide = DPLinearRegression(epsilon=2.0, feature_norm=1.0, norm="linf", label_bound=1.0,
    ...                           rng=0).fit(Xw, yw)
    >>> wide.solver_, wide.result_.parameters["selected"]
    ('select(dp_frank_wolfe,dp_mag)', 'dp_frank_wolfe')
    >>> round(wide.privacy_spent_.epsilon, 2)
    2.0
    """

    def __init__(
        self,
        *,
        epsilon: float = 1.0,
        delta: float = 1e-5,
        feature_norm: float | None = None,
        label_bound: float | None = None,
        norm: str = "l2",
        clip: bool = False,
        solver: str = "auto",
        l2_penalty: float = 0.0,
        max_norm: float = 1.0,
        fit_intercept: bool = True,
        intercept_scaling: float = 1.0,
        calibration: str = "tight",
        solver_options: dict[str, Any] | None = None,
        rng: Any = None,
        accountant: Accountant | None = None,
        neighbouring: str | None = None,
        declared_size: int | None = None,
    ) -> None:
        self.epsilon = epsilon
        self.delta = delta
        self.feature_norm = feature_norm
        self.label_bound = label_bound
        self.norm = norm
        self.clip = clip
        self.solver = solver
        self.l2_penalty = l2_penalty
        self.max_norm = max_norm
        self.fit_intercept = fit_intercept
        self.intercept_scaling = intercept_scaling
        self.calibration = calibration
        self.solver_options = solver_options
        self.rng = rng
        self.accountant = accountant
        self.neighbouring = neighbouring
        self.declared_size = declared_size

    def _constraint(self, dim: int) -> Any:
        radius = check_positive(self.max_norm, "max_norm")
        if getattr(self, "solver_", None) in ("dp_frank_wolfe", "frank_wolfe"):
            # the vertex-polytope methods run on the l1 ball of the same radius, inside the l2 ball
            return L1Ball(dim, radius)
        return L2Ball(dim, radius)

    def _add_remove(self) -> bool:
        return (self.neighbouring or getattr(self.accountant, "neighbouring", None)) == "add_remove"

    def _relation_options(self) -> dict[str, Any]:
        out = super()._relation_options()
        if self._add_remove() and getattr(self, "solver_", None) in ("dp_mag", "dp_smag"):
            opts = self.solver_options or {}
            if "sampling_rate" not in opts and self.declared_size is not None:
                # full batch normalised by the declared size: Poisson sampling at rate 1
                out.pop("declared_size", None)
                out.update(sampling_rate=1.0, batch_size=int(self.declared_size))
        return out

    def _method(self, n: int) -> str:
        if self.solver != "auto":
            return str(self.solver)
        dim = int(self.n_features_in_) + (1 if self.fit_intercept else 0)
        if self._add_remove():
            # n is private: the rule reads the declared size (objective perturbation and AdaSSP
            # have no add/remove analysis)
            if self.declared_size is None:
                raise InvalidParameterError(
                    "DPLinearRegression: neighbouring='add_remove' needs declared_size= (a public dataset "
                    f"size); the data's size is private under add/remove{self._relation_origin()}"
                )
            N = int(self.declared_size)
            if (
                self.delta > 0
                and float(self.epsilon) * N / math.sqrt(dim) >= AUTO_LINEAR_MAG_EPSILON_N_SQRT_D
            ):
                return AUTO_LINEAR_SELECT if dim >= AUTO_LINEAR_SELECT_MIN_DIM else "dp_mag"
            return "dp_frank_wolfe"
        if self.delta == 0:  # Gaussian methods need δ > 0; pure ε: objective perturbation or Frank-Wolfe
            if self._epsilon_n_per_d_b2(n, dim) >= AUTO_LINEAR_PURE_OP_EPSILON_N:
                return "objective_perturbation"
            return "dp_frank_wolfe"
        # n is public under replace-one neighbours; ε·n/√d is the scale of DP-GD's excess-risk rate
        if float(self.epsilon) * n / math.sqrt(dim) >= AUTO_LINEAR_MAG_EPSILON_N_SQRT_D:
            return AUTO_LINEAR_SELECT if dim >= AUTO_LINEAR_SELECT_MIN_DIM else "dp_mag"
        if self._epsilon_n_per_d_b2(n, dim) >= AUTO_LINEAR_SSP_EPSILON_N:
            return "ssp"
        return "dp_frank_wolfe"

    def _fit_problem(self, X: Any, y: NDArray[np.float64]) -> OptimizeResult:
        if (
            self.solver != "auto"
            or self._budget() == "non-private"
            or self._method(X.shape[0]) != AUTO_LINEAR_SELECT
        ):
            return super()._fit_problem(X, y)
        try:
            return self._fit_selection(X, y)
        except DPOptError as exc:
            raise _in_estimator_terms(exc, type(self).__name__) from exc

    def _fit_selection(self, X: Any, y: NDArray[np.float64]) -> OptimizeResult:
        """Private selection between ``dp_frank_wolfe`` (l1 ball) and ``dp_mag`` (l2 ball), one plan."""
        if self.solver_options:
            raise InvalidParameterError(
                f"DPLinearRegression: solver='auto' is here a private selection between two solvers "
                f"({AUTO_LINEAR_SELECT}); pass solver='dp_mag' or 'dp_frank_wolfe' to give solver_options"
            )
        if self.clip and self.fit_intercept and self.norm == "l2":
            X = DataBounds(self.feature_norm, "l2", clip=True).enforce(X, None, label_required=False)[0]
        dim = X.shape[1] + (1 if self.fit_intercept else 0)
        self.solver_ = AUTO_LINEAR_SELECT
        bounds, s = self._bounds(dim)
        self.l2_penalty_ = penalty = check_nonneg(self.l2_penalty, "l2_penalty")
        radius = check_positive(self.max_norm, "max_norm")
        Xa = self._augment(X, s)
        budget = self._budget()
        assert isinstance(budget, Budget)
        relation: Neighbouring = "add_remove" if self._add_remove() else "replace_one"
        fw_rel: dict[str, Any] = {}
        mag_rel: dict[str, Any] = {}
        if relation == "add_remove":
            N = int(self.declared_size)  # type: ignore[arg-type]  # checked by _method
            fw_rel = {"neighbouring": "add_remove", "declared_size": N}
            # full batch normalised by the declared size (Poisson rate 1), as with solver="dp_mag"
            mag_rel = {"neighbouring": "add_remove", "sampling_rate": 1.0, "batch_size": N}
        l1 = ERMProblem(self._loss, bounds, L1Ball(dim, radius), l2_penalty=penalty)
        l2 = ERMProblem(self._loss, bounds, L2Ball(dim, radius), l2_penalty=penalty)
        calibration = self.calibration

        def fit_fw(b: Budget, g: Any) -> OptimizeResult:
            return minimize(
                l1, Xa, y, method="dp_frank_wolfe", budget=b, rng=g, calibration=calibration, **fw_rel
            )

        def fit_mag(b: Budget, g: Any) -> OptimizeResult:
            return minimize(l2, Xa, y, method="dp_mag", budget=b, rng=g, calibration=calibration, **mag_rel)

        label_bound = float(check_positive(self.label_bound, "label_bound"))
        tau = LINEAR_SELECT_RESIDUAL_CLIP * label_bound

        def score(result: OptimizeResult) -> float:
            return clipped_squared_error(np.asarray(Xa @ result.solution).ravel(), y, label_bound, tau)

        (fw_share, mag_share), (fw_delta, mag_delta) = LINEAR_SELECT_SHARES, LINEAR_SELECT_DELTA_SHARES
        return private_selection(
            [
                Candidate("dp_frank_wolfe", fit_fw, fw_share, fw_delta),
                Candidate("dp_mag", fit_mag, mag_share, mag_delta),
            ],
            score,
            budget=budget,
            score_sensitivity=squared_error_sensitivity(label_bound, tau),
            neighbouring=relation,
            rng=self.rng,
            accountant=self.accountant,
            selection_share=LINEAR_SELECT_SELECTION_SHARE,
            label="DPLinearRegression(auto: private selection)",
        )

    def _epsilon_n_per_d_b2(self, n: int, dim: int) -> float:
        """ε·n/(d·B₂²): public (ε, the replace-one n, d and the declared bound B₂ on ‖x‖₂)."""
        bounds, _ = self._bounds(dim)  # declared, intercept-augmented; raises if not declared
        b = float(bounds.feature_norm or 1.0)
        b2_sq = b * b * (dim if bounds.norm == "linf" else 1)  # the declared l2 bound, squared
        return float(self.epsilon) * n / (dim * b2_sq)


class DPLasso(_DPRegressor):
    """Differentially private LASSO: least squares over the l1 ball ``‖(w, b)‖₁ <= radius``.

    Parameters are those of :class:`DPLinearRegression`, with ``norm`` defaulting to ``"linf"``
    (features bounded coordinate-wise, the LASSO setting of [TTZ] Cor. 5.7), ``radius`` the l1
    radius and ``solver`` defaulting to ``"auto"`` = ``"dp_frank_wolfe"`` (report-noisy-min over the
    2p vertices with few public steps and clipped residuals; ``"frank_wolfe"`` is the seed's Noise-FW).

    ``neighbouring="add_remove"`` with ``declared_size=N`` (a public dataset size, never read from
    the data): the guarantee is stated under add/remove neighbours and ``"dp_frank_wolfe"``
    normalises its scores by N (half the replace-one sensitivity; the steps planned from N).

    Privacy
    -------
    (ε, δ)-DP per ``fit`` under replace-one neighbours (add/remove with ``neighbouring="add_remove"``
    and ``declared_size``), given ``‖x‖_∞ <= feature_norm`` (or l2) and
    ``|y| <= label_bound``.  The default tight calibration composes the T-1 report-noisy-min
    selections with the PLD accountant; ``calibration="paper"`` (with ``solver="auto"``: the seed's
    ``"frank_wolfe"``) reproduces [TTZ]'s Laplace scale,
    which is about 2x too small (warns; ``privacy_spent_`` reports the true ε).
    """

    def __init__(
        self,
        *,
        epsilon: float = 1.0,
        delta: float = 1e-5,
        feature_norm: float | None = None,
        label_bound: float | None = None,
        norm: str = "linf",
        clip: bool = False,
        solver: str = "auto",
        l2_penalty: float = 0.0,
        radius: float = 1.0,
        fit_intercept: bool = True,
        intercept_scaling: float = 1.0,
        calibration: str = "tight",
        solver_options: dict[str, Any] | None = None,
        rng: Any = None,
        accountant: Accountant | None = None,
        neighbouring: str | None = None,
        declared_size: int | None = None,
    ) -> None:
        self.epsilon = epsilon
        self.delta = delta
        self.feature_norm = feature_norm
        self.label_bound = label_bound
        self.norm = norm
        self.clip = clip
        self.solver = solver
        self.l2_penalty = l2_penalty
        self.radius = radius
        self.fit_intercept = fit_intercept
        self.intercept_scaling = intercept_scaling
        self.calibration = calibration
        self.solver_options = solver_options
        self.rng = rng
        self.accountant = accountant
        self.neighbouring = neighbouring
        self.declared_size = declared_size

    def _constraint(self, dim: int) -> Any:
        return L1Ball(dim, check_positive(self.radius, "radius"))

    def _method(self, n: int) -> str:
        if self.solver != "auto":
            return str(self.solver)
        # the seed's calibration="paper" exists for the seed's Noise-FW only
        return "frank_wolfe" if self.calibration == "paper" else "dp_frank_wolfe"
