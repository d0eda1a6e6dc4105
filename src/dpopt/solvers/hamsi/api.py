"""The public shared-memory entry points :func:`hamsi` and :func:`mbgd` (and their shared docstring)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dpopt.datasets import Ratings
from dpopt.distributed.partition import Partition
from dpopt.iteration import Callback
from dpopt.randomness import RNGLike
from dpopt.solvers.hamsi._execution import _run
from dpopt.solvers.hamsi.options import HamsiOptions, resolve_options
from dpopt.solvers.hamsi.result import HamsiResult

if TYPE_CHECKING:
    from dpopt.matrix_factorization import MatrixFactorizationProblem


# ============================================================================ drivers
_COMMON_DOC = """
    problem : MatrixFactorizationProblem
    options : HamsiOptions or None, default None
        All the options below in one checked object (see :class:`HamsiOptions`); keyword arguments
        given as well override its fields.  ``None``: this function's defaults.
    partition : Partition, str or None, default None
        The cover: a :class:`~dpopt.distributed.partition.Partition` built on ``problem.ratings``, a
        scheme name (``"hogwild"``, ``"color"``, ``"color-b"``, ``"strata"``, ``"strata-b"``; built
        with ``n_subsets`` and ``P = n_threads``), or ``None`` for a single subset (full gradients).
    schedule : {"det", "stoc"}, default "det"
        Cyclic shift of the subset order, or a fresh random permutation every outer iteration.
    max_iter : int, default 100
        Maximum number of outer iterations (epochs); ``max_epochs=`` is the deprecated old name.
    time_budget : float or None
        Stop after this many seconds of optimization (evaluations excluded).
    n_threads : int, default 1
        Threads for the compiled kernels (capped at numba's maximum).
    backend : {"threads", "numba"}, default "threads"
        How blocks run in parallel: a pool of Python threads calling GIL-free kernels with dynamic
        scheduling (robust on shared machines), or numba ``prange`` (OpenMP).  Same results.
    n_subsets : int, default 20
        ``K`` when ``partition`` is a HOGWILD/COLOR/COLOR-B scheme name.
    init : (U0, V0), (U0, V0, row_bias, col_bias) or None
        Initial factors (plain or working factors, see :mod:`dpopt.matrix_factorization`);
        default i.i.d. ``N(0, init_scale²)`` factors drawn from ``rng`` and zero biases.
    init_scale : float, "spectral" or None, default 1.0
        Standard deviation of the random initial factors; ``None`` scales it to the data
        (:meth:`~dpopt.matrix_factorization.MatrixFactorizationProblem.default_init_scale`;
        recommended, and what :class:`dpopt.recommender.MFRecommender` uses).  ``1.0`` is the
        reference code's choice.  ``"spectral"``: start from
        :meth:`~dpopt.matrix_factorization.MatrixFactorizationProblem.spectral_factors`.
    test : Ratings or None
        Held-out ratings (same shape) whose RMSE is recorded at every evaluation (predictions
        clipped when the problem has ``clip``).  Pass a *validation* split here for early stopping.
    eval_every : int, default 1
        Evaluate the RMSE every ``eval_every`` outer iterations (and at the end).
    tol : float, default 0.0
        Relative improvement below which an evaluation counts as no progress: the monitored value
        (validation RMSE with ``early_stopping``, otherwise the training objective, its data term
        taken from the evaluation's training RMSE) must fall below ``(1 - tol) x`` its best
        value so far.
    patience : int or None, default None
        Stop (status ``"converged"``) after this many evaluations without progress; ``None``
        never stops for that reason (the seed's behaviour: run to ``max_iter``/``time_budget``).
    early_stopping : bool, default False
        Monitor the RMSE on ``test`` (a validation split) instead of the training RMSE, and hand
        back the factors of the best validation RMSE seen (the history then ends with them).
    train_rmse : {"exact", "running"}, default "exact"
        Training RMSE of an evaluation: one pass over the training ratings at the current point,
        or, for free, the root-mean of the subset losses met since the previous evaluation
        (each measured at the point where its gradient was taken; lags the iterate by up to one
        epoch).  ``"running"`` keeps evaluations from costing a share of the run.
    rng : int, Generator, "secure" or None
        Initialization, stochastic schedules and randomized partitions (child streams keyed
        ``"init"``, ``"schedule"``, ``"partition"``).
    checkpoint_dir : str, path or None, default None
        Directory of a durable run state: every ``checkpoint_every`` outer iterations the whole
        state (factors, L-BFGS memory, schedule position, safeguard, history) is written atomically
        to ``hamsi_state.npz`` there (one file, replaced in place; about ``2 memory + 6`` copies
        of the factors).  Not written after the stopping iteration.
    checkpoint_every : int, default 1
        Outer iterations between checkpoints.
    resume : bool, default False
        Continue from the state in ``checkpoint_dir`` if there is one (else start afresh).  With the
        same problem, options and ``rng`` seed, the factors and the RMSE history equal those of an
        uninterrupted run (times differ); a state saved by a different run is refused.
    callback : callable, optional
        ``callback(info)`` after every outer iteration with a :class:`dpopt.iteration.IterationInfo`
        (``info.nit``, ``info.rmse`` of the last evaluation, ``info.elapsed``); returning ``True``
        or raising ``StopIteration`` stops the run (status ``"stopped"``).
"""


def hamsi(
    problem: MatrixFactorizationProblem,
    partition: Partition | str | None = None,
    *,
    options: HamsiOptions | None = None,
    rng: RNGLike,
    test: Ratings | None = None,
    init: tuple[Any, ...] | None = None,
    callback: Callback | None = None,
    **keywords: Any,
) -> HamsiResult:
    """HAMSI with compact L-BFGS updates (thesis Algorithm 3, spec H3).

    Each outer iteration ``t`` visits the subsets in the order ``𝒦`` (length ``K + 1``, first = last),
    computes the subset gradient ``g`` block-parallel and updates
    ``x <- x - (σ g + W (N (Wᵀ g))) / β_t`` with ``β_t = (η t)^γ`` once the memory holds ``memory``
    curvature pairs (``x <- x - g / (η_gd t)^γ_gd`` before).  The pair of iteration ``t`` is formed
    from the two gradients of the repeated subset.

    Parameters
    ----------
    eta, gamma : float, default 0.06, 0.51
        ``β_t = (η t)^γ``; the thesis's constants (for ``scaling="mean"``).  ``γ ∈ (0.5, 1]`` gives the
        convergence conditions of Thm 3.1.3.
    memory : int, default 5
        L-BFGS memory ``M`` (the reference code's value; the thesis does not state it).
    eta_gd, gamma_gd : float, default 0.001, 0.51
        Warm-up gradient-descent constants (used until the memory is full).
    beta_counter : {"outer", "inner"}, default "inner"
        ``t`` counts subset visits (reference code, default) or outer iterations (thesis).  With
        ``K > 1`` subsets the outer counter lets the ``K + 1`` quasi-Newton steps of an iteration,
        each scaled by an inverse Hessian estimated from a single subset, overshoot: it diverges on
        small HOGWILD/COLOR covers where the inner counter does not (spec N4).
    beta_floor : float, default 1.0
        Steps use ``max(beta_floor, β_t)``.  The convergence theorem (Thm 3.1.3) assumes
        ``β_t >= 1``, which ``(η t)^γ`` violates for ``t < 1/η`` (spec N4); the default enforces it,
        which also keeps the first incremental quasi-Newton steps from overshooting.  ``0`` gives
        the thesis's and reference code's raw schedule.  (Warm-up steps use the raw mb-GD schedule.)
    sigma_mode, sigma0, curvature, curvature_tol
        See :class:`CompactLBFGS`.  The reference code's choices are ``sigma_mode="running_min"``,
        ``sigma0=500``, ``curvature="reference"``.
    safeguard : bool, default True
        dpopt's addition (neither the thesis nor the reference code has it; spec N1/N3 note that the
        step is not bounded a priori): the loss of every subset is known for free when its gradient
        is computed; when, after quasi-Newton steps, a subset's loss exceeds ``restart_growth``
        times its value at the previous visit (or overflows), return to the start of the current
        outer iteration (the start of the previous one if the current start is the culprit), clear
        the L-BFGS memory and warm up with gradient steps again.  Without it, small ranks or more
        subsets can make the first quasi-Newton steps diverge.
    restart_growth : float, default 2.0
        Growth factor of a subset's loss that triggers a restart.
    {common}
    Returns
    -------
    HamsiResult

    Raises
    ------
    InvalidParameterError
        For ``memory <= 0``, unknown options, non-positive constants or a mismatched partition.
    TypeError
        For a keyword argument that is not one of the options above.
    """
    opts = resolve_options("hamsi", options, keywords)
    return _run(problem, partition, "hamsi", opts, test=test, init=init, rng=rng, callback=callback)


hamsi.__doc__ = (hamsi.__doc__ or "").replace("    {common}\n", _COMMON_DOC.lstrip("\n") + "\n")


def mbgd(
    problem: MatrixFactorizationProblem,
    partition: Partition | str | None = None,
    *,
    options: HamsiOptions | None = None,
    rng: RNGLike,
    test: Ratings | None = None,
    init: tuple[Any, ...] | None = None,
    callback: Callback | None = None,
    **keywords: Any,
) -> HamsiResult:
    """Mini-batch gradient descent over the subsets of a cover (the thesis's mb-GD baseline).

    Each outer iteration visits the ``K`` subsets once (det: rotated order; stoc: random permutation)
    and updates ``x <- x - g_k / β_t`` with ``β_t = (η t)^γ``, ``(η, γ) = (0.001, 0.51)``.

    Parameters
    ----------
    eta, gamma : float
        Step schedule constants.
    beta_counter : {"outer", "inner"}
        As in :func:`hamsi`.
    beta_floor : float, default 0.0
        Steps use ``max(beta_floor, β_t)`` (``(0.001 t)^0.51 < 1`` for the first thousand
        iterations; the thesis uses the raw schedule).
    {common}
    Returns
    -------
    HamsiResult
    """
    opts = resolve_options("mbgd", options, keywords).as_mbgd()
    return _run(problem, partition, "mbgd", opts, test=test, init=init, rng=rng, callback=callback)


mbgd.__doc__ = (mbgd.__doc__ or "").replace("    {common}\n", _COMMON_DOC.lstrip("\n") + "\n")
