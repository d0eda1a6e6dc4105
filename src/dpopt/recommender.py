"""A matrix-factorization recommender: :class:`MFRecommender` (fit / predict / recommend / save / load).

The model is the biased factorization of :mod:`dpopt.matrix_factorization`,

    prediction(u, i) = μ + p_u + q_i + U_u · V_i   (optionally clipped to the rating scale),

fitted by alternating least squares from a spectral start (:func:`dpopt.solvers.als.als`, default),
HAMSI (:func:`dpopt.solvers.hamsi.hamsi`), mini-batch gradient descent or the distributed HAMSI
path, with ridge weights on the scale of ALS libraries (cmfrec, Spark without
count weighting): the fitted objective is

    Σ_(u,i) (y_ui - prediction(u, i))² + l2 (‖U‖² + ‖V‖²) + l2_bias (‖p‖² + ‖q‖²).

Raw user and item ids (integers or strings) are mapped to rows and columns internally.  The model
is saved as one ``.npz`` file (arrays plus a JSON metadata entry, readable without pickle; see
:meth:`MFRecommender.save` for the format) and :func:`tune` picks ``l2`` and ``rank`` on a
validation split carved from the data it is given (pass it your *training* part only), and
lets that split decide whether the user and item biases are fitted (``bias=True``) or left out
(``bias="mean"``: global mean plus ``U V^T``).

This module is **not** differentially private: it fits the ratings as given.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import numpy as np
from numpy.typing import NDArray
from sklearn.base import BaseEstimator

from dpopt._validation import as_float_array, check_int, check_nonneg, check_positive, check_probability
from dpopt.datasets import Ratings
from dpopt.exceptions import DPOptError, InvalidParameterError
from dpopt.matrix_factorization import MatrixFactorizationProblem, split_ratings
from dpopt.randomness import RNGLike, as_generator, spawn

if TYPE_CHECKING:
    from dpopt.distributed.engines import Engine
    from dpopt.solvers.hamsi import HamsiResult

__all__ = [
    "DEFAULT_L2_PER_STD",
    "FORMAT",
    "FORMAT_VERSION",
    "MFRecommender",
    "TuningResult",
    "TuningRow",
    "tune",
]

#: Name and version written into every saved model (``metadata["format"]``, ``["version"]``).
FORMAT = "dpopt.MFRecommender"
#: Version of the saved-model format (``metadata["version"]``).
FORMAT_VERSION = 1
#: ``l2=None`` uses ``DEFAULT_L2_PER_STD x std(training ratings)`` (ALS scale).  Chosen on public
#: data: on MovieLens 100K (80/20 split, validation carved from training) the best ``l2`` was 12-15
#: at ranks 10 and 50 with rating standard deviation 1.13.  The ridge weight of a factorization scales
#: linearly with the rating scale, hence the proportionality; data with much less noise than
#: user ratings (e.g. the synthetic low-rank sets) want a smaller value -- use :func:`tune`.
DEFAULT_L2_PER_STD = 10.0

Float = NDArray[np.float64]


class NotFittedError(DPOptError, ValueError):
    """The recommender has not been fitted (or loaded) yet."""


def _as_triples(ratings: Any) -> tuple[NDArray[Any], NDArray[Any], Float, dict[str, float]]:
    """Raw ``(user_ids, item_ids, values, bounds)`` from a Ratings, a 3-tuple of arrays, an (n, 3)
    array or a data frame with three columns."""
    if isinstance(ratings, Ratings):
        users: NDArray[Any] = ratings.row_ids[ratings.rows] if ratings.row_ids is not None else ratings.rows
        items: NDArray[Any] = ratings.col_ids[ratings.cols] if ratings.col_ids is not None else ratings.cols
        return (
            np.asarray(users),
            np.asarray(items),
            np.asarray(ratings.values, dtype=np.float64),
            dict(ratings.bounds),
        )
    if hasattr(ratings, "columns") and hasattr(ratings, "iloc"):  # a data frame
        if len(ratings.columns) < 3:
            raise InvalidParameterError("ratings: a data frame needs three columns (user, item, rating)")
        cols = [ratings.iloc[:, j].to_numpy() for j in range(3)]
        users, items, vals = cols
    elif isinstance(ratings, tuple | list) and len(ratings) == 3:
        users, items, vals = (np.asarray(a) for a in ratings)
    else:
        arr = np.asarray(ratings)
        if arr.ndim != 2 or arr.shape[1] != 3:
            raise InvalidParameterError(
                "ratings: expected a dpopt.datasets.Ratings, a tuple (user_ids, item_ids, values), an "
                "(n, 3) array or a data frame with columns user, item, rating"
            )
        users, items, vals = arr[:, 0], arr[:, 1], arr[:, 2]
    users, items = _ids(users, "user_ids"), _ids(items, "item_ids")
    values = as_float_array(vals, "values", ndim=1)
    if not (users.shape == items.shape == values.shape):
        raise InvalidParameterError(
            f"ratings: user_ids, item_ids and values have lengths {users.shape[0]}, {items.shape[0]} "
            f"and {values.shape[0]}; expected one of each per rating"
        )
    return users, items, values, {}


def _ids(a: Any, name: str) -> NDArray[Any]:
    arr = np.asarray(a)
    if arr.ndim != 1:
        raise InvalidParameterError(f"{name}: expected a 1-d array of ids, got shape {arr.shape}")
    if arr.dtype.kind == "f":
        if arr.size and not (np.all(np.isfinite(arr)) and np.all(arr == np.floor(arr))):
            raise InvalidParameterError(f"{name}: ids must be whole numbers or strings")
        return arr.astype(np.int64)
    if arr.dtype.kind in "iub":
        return arr.astype(np.int64)
    if arr.dtype.kind in "US":
        return arr.astype(str)
    if arr.dtype.kind == "O":
        try:
            return (
                arr.astype(np.int64) if all(isinstance(v, int | np.integer) for v in arr) else arr.astype(str)
            )
        except (TypeError, ValueError):
            raise InvalidParameterError(f"{name}: ids must be integers or strings") from None
    raise InvalidParameterError(f"{name}: ids must be integers or strings, got dtype {arr.dtype}")


def _bias_mode(bias: Any) -> bool:
    """Whether ``bias`` (``True``, ``"mean"`` or ``False``) fits user and item biases."""
    if isinstance(bias, str):
        if bias != "mean":
            raise InvalidParameterError("bias: expected True, False or 'mean'")
        return False
    if not isinstance(bias, bool | np.bool_):
        raise InvalidParameterError("bias: expected True, False or 'mean'")
    return bool(bias)


def _lookup(known: NDArray[Any], query: NDArray[Any]) -> tuple[NDArray[np.int64], NDArray[np.bool_]]:
    """Indices of ``query`` in the sorted id array ``known`` and which of them are known."""
    if known.dtype.kind != query.dtype.kind and not (known.dtype.kind in "iu" and query.dtype.kind in "iu"):
        return np.zeros(query.shape[0], dtype=np.int64), np.zeros(query.shape[0], dtype=bool)
    idx = np.searchsorted(known, query)
    idx = np.minimum(idx, max(known.shape[0] - 1, 0)).astype(np.int64)
    ok = known[idx] == query if known.shape[0] else np.zeros(query.shape[0], dtype=bool)
    return idx, np.asarray(ok, dtype=bool)


class MFRecommender(BaseEstimator):
    """Biased matrix-factorization recommender (explicit ratings), fitted by ALS or HAMSI.

    Parameters
    ----------
    rank : int, default 10
        Latent dimension.
    l2 : float or None, default None
        Ridge weight of the factors on the ALS scale (``Σ r² + l2 (‖U‖² + ‖V‖²)``, as cmfrec's
        ``lambda_``); ``None`` uses :data:`DEFAULT_L2_PER_STD` times the standard deviation of the
        training ratings.  :func:`tune` picks it on a validation split.
    l2_bias : float or None, default None
        Ridge weight of the biases (same scale); ``None`` uses ``l2``.
    l2_weighting : {"uniform", "count"}, default "uniform"
        ``"count"``: each user's and item's ridge weights are multiplied by its number of training
        ratings (ALS-WR, as Spark MLlib's ALS; ``l2`` is then per rating, typically 0.01-0.3).
        ``None`` ``l2`` then defaults to the uniform default times ``(n_users + n_items) / (2 n)``
        (the same total ridge when all factors have equal norms).  Only ``solver="als"`` supports
        it (the other solvers raise).  :func:`tune` can choose it on a validation split.
    bias : True, "mean" or False, default True
        ``True``: fit user and item biases and the global mean.  ``"mean"``: the global mean plus
        ``U V^T``, no user or item biases (the centred model of Spark's ALS; right for data without
        user or item effects, e.g. the synthetic low-rank sets of ``docs/mf_peers.md``, where it
        gives test RMSE 0.5554 against 0.5620 with biases).  ``False``: plain ``U V^T``, no offset
        (the seed's model).  :func:`tune` lets the validation split choose between ``True`` and
        ``"mean"``.
    clip : "auto", (float, float) or None, default "auto"
        Clip predictions to this interval; ``"auto"`` uses the rating scale declared by the data
        (``Ratings.bounds``, e.g. 1-5 for MovieLens) or else the observed training range.
    solver : {"als", "als_distributed", "hamsi", "mbgd", "hamsi_distributed"}, default "als"
        ``"als"``: exact alternating ridge solves (:func:`dpopt.solvers.als.als`) from the
        spectral start; on the problems of ``docs/mf_peers.md`` it reaches within 1 % of its
        final test RMSE in 2-3 sweeps and converges in 5-10.  ``"hamsi"``: the incremental
        quasi-Newton method (:func:`dpopt.solvers.hamsi.hamsi`), the default before ALS was added.
        ``"als_distributed"``: the same ALS solves on shards of an engine
        (:func:`dpopt.solvers.als.als_distributed`; ``n_shards = n_threads`` unless given in
        ``solver_options``; where the shards run: ``engine``).
        ``"hamsi_distributed"`` (one shard per thread, ``n_shards = n_threads`` unless given in
        ``solver_options``; where: ``engine``): its warm-up steps are bounded by
        the data's largest bias curvature and its quasi-Newton steps halved (``beta_floor=2``).
    max_iter : int, default 500
        Maximum number of epochs (ALS: sweeps).
    time_budget : float or None, default None
        Stop after this many seconds of optimization.
    tol : float, default 1e-4
        Stop when the monitored value (validation RMSE with ``early_stopping``, the training
        objective otherwise) improved by less than this relative amount in ``patience`` epochs.
    patience : int or None, default None
        ``None``: 1 sweep for ``"als"`` (every sweep is an exact block minimisation, so one sweep
        without progress means it is done), 5 epochs for the other solvers.
    early_stopping : bool, default False
        Carve ``validation_fraction`` of the ratings out as a validation split, monitor its RMSE and
        keep the best-validation factors (the model is then fitted on the remaining ratings).
    validation_fraction : float, default 0.1
    n_threads : int, default 1
        Threads of the compiled kernels.
    init_scale : float, "spectral" or None, default "spectral"
        ``"spectral"`` starts from the ridge-thresholded top singular subspace of the ratings
        (:meth:`~dpopt.matrix_factorization.MatrixFactorizationProblem.spectral_factors`; for
        HAMSI 2.0x faster to within 1 % of the best test RMSE on 2M synthetic ratings than a
        random start, same RMSE on MovieLens 100K on average over seeds, ``docs/mf_peers.md``); a
        number is the standard deviation of random initial factors; ``None`` scales that to the data.
    engine : {"inprocess", "processes", "ray"}, Engine or None, default None
        Where the shards of ``"als_distributed"`` and ``"hamsi_distributed"`` run
        (:mod:`dpopt.distributed.engines`; an :class:`~dpopt.distributed.engines.Engine` instance
        is used as is and not closed).  ``None``: ``"inprocess"``.  The other solvers run in this
        process and refuse an engine other than ``None``/``"inprocess"``.  Checked in :meth:`fit`.
    solver_options : dict or None
        Further keywords for the solver (e.g. ``{"spectral_power": 2}`` for ALS,
        ``{"partition": "strata-b"}`` or ``{"memory": 5}`` for HAMSI).
    rng : int, Generator, "secure" or None, default None
        Initialization and the validation split.

    Attributes
    ----------
    user_ids_, item_ids_ : ndarray
        Known raw ids, sorted (row ``i`` of ``user_factors_`` belongs to ``user_ids_[i]``).
    user_factors_, item_factors_ : ndarray
    user_bias_, item_bias_ : ndarray
        Zero without ``bias``.
    global_mean_ : float
    clip_ : (float, float) or None
    l2_, l2_bias_ : float
        Ridge weights used (ALS scale).
    result_ : HamsiResult or None
        The solver's result (history, status); ``None`` after :meth:`load`.

    Examples
    --------
    >>> from dpopt.recommender import MFRecommender
    >>> users = [1, 1, 2, 2, 3, 3, 4]
    >>> items = ["a", "b", "a", "c", "b", "c", "a"]
    >>> stars = [5.0, 3.0, 4.0, 2.0, 3.0, 1.0, 5.0]
    >>> model = MFRecommender(rank=2, l2=1.0, rng=0).fit((users, items, stars))
    >>> model.predict([1, 4], ["c", "b"]).shape
    (2,)
    >>> items_for_4, scores = model.recommend(4, k=2)
    >>> sorted(items_for_4.tolist())
    ['b', 'c']
    >>> round(model.score((users, items, stars)), 1) < 1.5
    True
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "model.npz")
    >>> model.save(path)
    >>> bool(np.allclose(MFRecommender.load(path).predict([1], ["c"]), model.predict([1], ["c"])))
    True
    """

    result_: HamsiResult | None

    def __init__(
        self,
        rank: int = 10,
        *,
        l2: float | None = None,
        l2_bias: float | None = None,
        l2_weighting: Literal["uniform", "count"] = "uniform",
        bias: bool | Literal["mean"] = True,
        clip: Literal["auto"] | tuple[float, float] | None = "auto",
        solver: Literal["als", "als_distributed", "hamsi", "mbgd", "hamsi_distributed"] = "als",
        max_iter: int = 500,
        time_budget: float | None = None,
        tol: float = 1e-4,
        patience: int | None = None,
        early_stopping: bool = False,
        validation_fraction: float = 0.1,
        n_threads: int = 1,
        init_scale: float | Literal["spectral"] | None = "spectral",
        solver_options: dict[str, Any] | None = None,
        rng: RNGLike = None,
        engine: str | Engine | None = None,
    ) -> None:
        self.rank = rank
        self.l2 = l2
        self.l2_bias = l2_bias
        self.l2_weighting = l2_weighting
        self.bias = bias
        self.clip = clip
        self.solver = solver
        self.max_iter = max_iter
        self.time_budget = time_budget
        self.tol = tol
        self.patience = patience
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.n_threads = n_threads
        self.init_scale = init_scale
        self.solver_options = solver_options
        self.rng = rng
        self.engine = engine

    # ------------------------------------------------------------------ fitting
    def fit(self, ratings: Any, validation: Any = None) -> MFRecommender:
        """Fit the model to explicit ratings.

        Parameters
        ----------
        ratings : Ratings, (user_ids, item_ids, values), (n, 3) array or data frame
            Raw ids may be integers or strings.
        validation : same forms, optional
            Validation ratings for early stopping (instead of carving ``validation_fraction``);
            ratings of users or items absent from ``ratings`` are ignored.

        Returns
        -------
        self
        """
        from dpopt.solvers.als import als, als_distributed
        from dpopt.solvers.hamsi import hamsi, hamsi_distributed, mbgd

        rank = check_int(self.rank, "rank")
        if self.solver not in ("als", "als_distributed", "hamsi", "mbgd", "hamsi_distributed"):
            raise InvalidParameterError(
                "solver: must be 'als', 'als_distributed', 'hamsi', 'mbgd' or 'hamsi_distributed'"
            )
        opts = self._engine_options(dict(self.solver_options or {}))  # checked before the data
        users, items, values, bounds = _as_triples(ratings)
        if values.shape[0] == 0:
            raise InvalidParameterError("ratings: contains no ratings")
        if not np.all(np.isfinite(values)):
            raise InvalidParameterError("ratings: values contain NaN or infinite entries")
        uid, rows = np.unique(users, return_inverse=True)
        iid, cols = np.unique(items, return_inverse=True)
        full = Ratings(
            rows=rows.astype(np.int64).ravel(),
            cols=cols.astype(np.int64).ravel(),
            values=values,
            shape=(uid.shape[0], iid.shape[0]),
            name="fit",
            bounds=bounds,
        )
        r_split, r_fit = spawn(self.rng, ["validation", "fit"])
        train, val = full, None
        if validation is not None:
            vu, vi, vv, _ = _as_triples(validation)
            ru, oku = _lookup(uid, vu)
            ci, oki = _lookup(iid, vi)
            ok = oku & oki
            if ok.any():
                val = Ratings(rows=ru[ok], cols=ci[ok], values=vv[ok], shape=full.shape, name="validation")
        elif self.early_stopping:
            frac = check_probability(self.validation_fraction, "validation_fraction", open_left=True)
            train, val = split_ratings(full, frac, rng=r_split)
            if val.n_ratings == 0:
                val = None
        if self.early_stopping and val is None:
            raise InvalidParameterError("early_stopping: the validation split is empty; use more ratings")
        if self.l2_weighting not in ("uniform", "count"):
            raise InvalidParameterError("l2_weighting: must be 'uniform' or 'count'")
        fit_bias, offset = _bias_mode(self.bias), None
        if self.bias == "mean":
            offset = float(np.mean(train.values))
        std = float(np.std(train.values))
        if self.l2 is None:
            lam = DEFAULT_L2_PER_STD * max(std, 1e-12)
            if self.l2_weighting == "count":
                lam *= (train.shape[0] + train.shape[1]) / (2.0 * train.n_ratings)
        else:
            lam = check_nonneg(self.l2, "l2")
        lam_b = lam if self.l2_bias is None else check_nonneg(self.l2_bias, "l2_bias")
        clip = self._resolve_clip(bounds, train.values)
        problem = MatrixFactorizationProblem.from_als_lambda(
            train,
            rank,
            lam,
            lam_bias=lam_b,
            bias=fit_bias,
            offset=offset,
            clip=clip,
            allow_empty=True,
            l2_weighting=self.l2_weighting,
        )
        common: dict[str, Any] = {
            "max_iter": check_int(self.max_iter, "max_iter", minimum=0),
            "init_scale": self.init_scale,
            "test": val,
            "rng": r_fit,
        }
        if self.solver == "hamsi_distributed":
            opts.setdefault("n_shards", max(1, int(self.n_threads)))
            # bound the first warm-up step by the inverse of the largest curvature of a bias
            # coordinate, w x (most ratings of one user or item)
            most = max(int(np.bincount(train.rows).max()), int(np.bincount(train.cols).max()))
            g_gd = float(opts.get("gamma_gd", 0.51))
            opts.setdefault("eta_gd", max(0.001, (2.0 * most / train.n_ratings) ** (1.0 / g_gd)))
            opts.setdefault("beta_floor", 2.0)  # and halve the quasi-Newton steps (small data overshot)
            opts.setdefault("tol", check_nonneg(self.tol, "tol"))
            opts.setdefault("patience", 5 if self.patience is None else check_int(self.patience, "patience"))
            opts.setdefault("early_stopping", bool(self.early_stopping))
            opts.setdefault("time_budget", self.time_budget)
            res = hamsi_distributed(problem, **common, **opts)
        elif self.solver in ("als", "als_distributed"):
            patience = 1 if self.patience is None else check_int(self.patience, "patience")
            common.update(
                time_budget=self.time_budget,
                tol=check_nonneg(self.tol, "tol"),
                patience=patience,
                early_stopping=bool(self.early_stopping),
            )
            if self.solver == "als":
                res = als(problem, n_threads=check_int(self.n_threads, "n_threads"), **common, **opts)
            else:
                opts.setdefault("n_shards", max(1, int(self.n_threads)))
                res = als_distributed(problem, **common, **opts)
        else:
            common.update(
                time_budget=self.time_budget,
                n_threads=check_int(self.n_threads, "n_threads"),
                tol=check_nonneg(self.tol, "tol"),
                patience=5 if self.patience is None else check_int(self.patience, "patience"),
                early_stopping=bool(self.early_stopping),
                train_rmse="running",
            )
            res = (hamsi if self.solver == "hamsi" else mbgd)(problem, **common, **opts)
        if not res.success:
            raise DPOptError(f"fit: the solver failed: {res.message}")
        self.user_ids_ = uid
        self.item_ids_ = iid
        self.user_factors_ = np.ascontiguousarray(res.U)
        self.item_factors_ = np.ascontiguousarray(res.V)
        self.user_bias_ = res.row_bias if res.row_bias is not None else np.zeros(uid.shape[0])
        self.item_bias_ = res.col_bias if res.col_bias is not None else np.zeros(iid.shape[0])
        self.global_mean_ = float(res.offset)
        self.clip_ = clip
        self.l2_ = lam
        self.l2_bias_ = lam_b
        self.l2_weighting_: str = str(self.l2_weighting)
        self.result_ = res
        self._set_seen(full.rows, full.cols)
        return self

    def _resolve_clip(self, bounds: dict[str, float], values: Float) -> tuple[float, float] | None:
        if self.clip is None:
            return None
        if isinstance(self.clip, str):
            if self.clip != "auto":
                raise InvalidParameterError("clip: expected 'auto', a pair (low, high) or None")
            if "rating_min" in bounds and "rating_max" in bounds:
                return float(bounds["rating_min"]), float(bounds["rating_max"])
            lo, hi = float(values.min()), float(values.max())
            return (lo, hi) if lo < hi else None
        try:
            lo, hi = (float(v) for v in self.clip)
        except (TypeError, ValueError):
            raise InvalidParameterError("clip: expected 'auto', a pair (low, high) or None") from None
        if not lo < hi:
            raise InvalidParameterError("clip: expected low < high")
        return lo, hi

    def _set_seen(self, rows: NDArray[np.int64], cols: NDArray[np.int64]) -> None:
        order = np.lexsort((cols, rows))
        self.seen_indptr_ = np.concatenate(
            ([0], np.cumsum(np.bincount(rows, minlength=self.user_ids_.shape[0])))
        ).astype(np.int64)
        self.seen_items_ = np.ascontiguousarray(cols[order], dtype=np.int64)

    def _check_fitted(self) -> None:
        if not hasattr(self, "user_factors_"):
            raise NotFittedError("this MFRecommender is not fitted yet; call fit(ratings) or load(path)")

    # ------------------------------------------------------------------ predictions
    def predict(self, user_ids: Any, item_ids: Any) -> Float:
        """Predicted ratings for pairs of raw ids.

        Unknown users or items get the global mean plus the known side's bias (cold start),
        clipped like the other predictions.
        """
        self._check_fitted()
        u = _ids(np.atleast_1d(np.asarray(user_ids)), "user_ids")
        i = _ids(np.atleast_1d(np.asarray(item_ids)), "item_ids")
        if u.shape != i.shape:
            raise InvalidParameterError(
                f"user_ids, item_ids: expected the same number of ids, got {u.shape[0]} and {i.shape[0]}"
            )
        ru, oku = _lookup(self.user_ids_, u)
        ci, oki = _lookup(self.item_ids_, i)
        out = np.full(u.shape[0], self.global_mean_)
        out += np.where(oku, self.user_bias_[ru], 0.0)
        out += np.where(oki, self.item_bias_[ci], 0.0)
        both = oku & oki
        out[both] += np.einsum("ij,ij->i", self.user_factors_[ru[both]], self.item_factors_[ci[both]])
        if self.clip_ is not None:
            np.clip(out, self.clip_[0], self.clip_[1], out=out)
        return out

    def score(self, ratings: Any) -> float:
        """RMSE of the predictions on ``ratings`` (lower is better; same input forms as :meth:`fit`).

        Note that this is an error, not scikit-learn's greater-is-better score.
        """
        users, items, values, _ = _as_triples(ratings)
        if values.shape[0] == 0:
            raise InvalidParameterError("ratings: contains no ratings")
        res = self.predict(users, items) - values
        return float(math.sqrt(float(np.dot(res, res)) / values.shape[0]))

    def recommend(
        self, user_id: Any, k: int = 10, *, exclude_seen: bool = True
    ) -> tuple[NDArray[Any], Float]:
        """The ``k`` items with the highest predicted rating for one user.

        Returns
        -------
        item_ids, scores : ndarray
            Raw item ids, best first, and their predicted ratings (unclipped, so that ties at the
            top of the scale keep their order).  Items the user rated in training are left out
            with ``exclude_seen``.
        """
        self._check_fitted()
        k = check_int(k, "k")
        ru, ok = _lookup(self.user_ids_, _ids(np.atleast_1d(np.asarray(user_id)), "user_id"))
        if ru.shape[0] != 1:
            raise InvalidParameterError("user_id: expected a single id")
        if not ok[0]:
            raise InvalidParameterError(
                "user_id: unknown user; add them with fold_in(user_id, item_ids, values)"
            )
        a = int(ru[0])
        scores = (
            self.global_mean_
            + self.user_bias_[a]
            + self.item_bias_
            + self.item_factors_ @ self.user_factors_[a]
        )
        if exclude_seen:
            scores = scores.copy()
            scores[self.seen_items_[self.seen_indptr_[a] : self.seen_indptr_[a + 1]]] = -np.inf
        n_ok = int(np.count_nonzero(np.isfinite(scores)))
        k = min(k, n_ok)
        if k == 0:
            return self.item_ids_[:0], np.zeros(0)
        top = np.argpartition(-scores, k - 1)[:k] if k < scores.shape[0] else np.arange(scores.shape[0])
        top = top[np.lexsort((top, -scores[top]))][:k]
        return self.item_ids_[top], scores[top]

    def fold_in(self, user_id: Any, item_ids: Any, values: Any) -> MFRecommender:
        """Add (or refit) one user from their ratings, keeping the item factors fixed.

        Solves the user's ridge regression exactly:
        ``min Σ_i (y_i - μ - p - q_i - u·V_i)² + l2 ‖u‖² + l2_bias p²`` over ``(u, p)``, the
        same objective the model was fitted with.  Ratings of unknown items are ignored.

        Returns
        -------
        self
        """
        self._check_fitted()
        uq = _ids(np.atleast_1d(np.asarray(user_id)), "user_id")
        if uq.shape[0] != 1:
            raise InvalidParameterError("user_id: expected a single id")
        ii = _ids(np.atleast_1d(np.asarray(item_ids)), "item_ids")
        yy = as_float_array(np.atleast_1d(np.asarray(values, dtype=float)), "values", ndim=1)
        if ii.shape != yy.shape:
            raise InvalidParameterError("item_ids, values: expected one value per item id")
        ci, oki = _lookup(self.item_ids_, ii)
        ci, yy = ci[oki], yy[oki]
        L = self.user_factors_.shape[1]
        has_bias = self.bias != "mean" and (
            bool(np.any(self.user_bias_)) or bool(np.any(self.item_bias_)) or self.global_mean_ != 0
        )
        feats = self.item_factors_[ci]
        target = yy - self.global_mean_ - self.item_bias_[ci]
        if has_bias:
            feats = np.hstack([feats, np.ones((feats.shape[0], 1))])
        ridge = np.full(feats.shape[1], self.l2_)
        if has_bias:
            ridge[L] = self.l2_bias_
        if getattr(self, "l2_weighting_", "uniform") == "count":
            ridge *= ci.shape[0]  # ALS-WR: the user's ridge times their number of ratings
        A = feats.T @ feats + np.diag(np.maximum(ridge, 1e-12))
        sol = np.linalg.solve(A, feats.T @ target) if ci.shape[0] else np.zeros(feats.shape[1])
        u, p = sol[:L], (float(sol[L]) if has_bias else 0.0)
        ru, known = _lookup(self.user_ids_, uq)
        if known[0]:
            a = int(ru[0])
            self.user_factors_[a] = u
            self.user_bias_[a] = p
            rows = np.repeat(np.arange(self.user_ids_.shape[0]), np.diff(self.seen_indptr_))
            keep = rows != a
            rows = np.concatenate([rows[keep], np.full(ci.shape[0], a)])
            cols = np.concatenate([self.seen_items_[keep], ci])
        else:
            if self.user_ids_.dtype.kind != uq.dtype.kind and self.user_ids_.shape[0]:
                raise InvalidParameterError(
                    "user_id: must have the same type (integer or string) as the fitted ids"
                )
            pos = int(np.searchsorted(self.user_ids_, uq[0]))
            rows = np.repeat(np.arange(self.user_ids_.shape[0]), np.diff(self.seen_indptr_))
            rows = np.where(rows >= pos, rows + 1, rows)
            # concatenate (not np.insert): string ids longer than the known ones must not be cut
            self.user_ids_ = np.concatenate([self.user_ids_[:pos], uq[:1], self.user_ids_[pos:]])
            self.user_factors_ = np.insert(self.user_factors_, pos, u, axis=0)
            self.user_bias_ = np.insert(self.user_bias_, pos, p)
            rows = np.concatenate([rows, np.full(ci.shape[0], pos)])
            cols = np.concatenate([self.seen_items_, ci])
        self._set_seen(rows.astype(np.int64), cols.astype(np.int64))
        return self

    def _engine_options(self, opts: dict[str, Any]) -> dict[str, Any]:
        """``solver_options`` with the checked ``engine`` for the distributed solvers."""
        from dpopt.distributed.engines import ENGINES, Engine

        engine = self.engine
        if engine is None:
            return opts  # the solver's default (or solver_options["engine"], as before)
        if not (isinstance(engine, Engine) or (isinstance(engine, str) and engine in ENGINES)):
            raise InvalidParameterError(f"engine: must be one of {ENGINES}, an Engine instance or None")
        if "engine" in opts:
            raise InvalidParameterError(
                "engine: given both as engine= and in solver_options; pass engine= only"
            )
        if self.solver in ("als_distributed", "hamsi_distributed"):
            return dict(opts, engine=engine)
        if engine == "inprocess":
            return opts
        name = engine if isinstance(engine, str) else type(engine).__name__
        raise InvalidParameterError(
            f"engine: solver={self.solver!r} runs in this process and takes no engine (got {name!r}); use "
            "solver='als_distributed' or 'hamsi_distributed' to run on an engine"
        )

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the fitted model to one ``.npz`` file (no pickle).

        Format (version :data:`FORMAT_VERSION`): arrays ``user_ids``, ``item_ids`` (int64 or
        unicode), ``user_factors``, ``item_factors``, ``user_bias``, ``item_bias`` (float64),
        ``seen_indptr``, ``seen_items`` (int64, the training items of every user, CSR) and
        ``metadata``, a 0-d unicode array holding JSON: ``{"format": "dpopt.MFRecommender",
        "version": 1, "global_mean", "clip", "l2", "l2_bias", "l2_weighting", "rank", "params"}`` (``l2_weighting`` absent: ``"uniform"``).  Readers must
        check ``format`` and ``version``; a new version is issued for any incompatible change.
        """
        self._check_fitted()
        params = {k: v for k, v in self.get_params().items() if k not in ("rng", "solver_options", "engine")}
        if isinstance(self.engine, str):  # an Engine instance is not saved (a live object)
            params["engine"] = self.engine
        meta = {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "global_mean": self.global_mean_,
            "clip": list(self.clip_) if self.clip_ is not None else None,
            "l2": self.l2_,
            "l2_bias": self.l2_bias_,
            "l2_weighting": getattr(self, "l2_weighting_", "uniform"),
            "rank": int(self.user_factors_.shape[1]),
            "params": {k: (list(v) if isinstance(v, tuple) else v) for k, v in params.items()},
        }
        with open(path, "wb") as fh:
            np.savez(
                fh,
                metadata=np.array(json.dumps(meta)),
                user_ids=self.user_ids_,
                item_ids=self.item_ids_,
                user_factors=self.user_factors_,
                item_factors=self.item_factors_,
                user_bias=self.user_bias_,
                item_bias=self.item_bias_,
                seen_indptr=self.seen_indptr_,
                seen_items=self.seen_items_,
            )

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> MFRecommender:
        """Read a model written by :meth:`save` (refuses other formats and unknown versions)."""
        try:
            with np.load(Path(path), allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}
        except (OSError, ValueError) as exc:
            raise InvalidParameterError(
                f"path: not a readable .npz model file ({type(exc).__name__})"
            ) from None
        try:
            meta = json.loads(str(arrays.pop("metadata")))
        except (KeyError, json.JSONDecodeError):
            raise InvalidParameterError("path: no dpopt model metadata in this file") from None
        if meta.get("format") != FORMAT:
            raise InvalidParameterError(f"path: not a {FORMAT} file")
        if meta.get("version") != FORMAT_VERSION:
            raise InvalidParameterError(
                f"path: model format version {meta.get('version')!r}; this dpopt reads version {FORMAT_VERSION}"
            )
        params = dict(meta.get("params", {}))
        if isinstance(params.get("clip"), list):
            params["clip"] = tuple(params["clip"])
        known = set(cls().get_params())
        model = cls(**{k: v for k, v in params.items() if k in known})
        need = ("user_ids", "item_ids", "user_factors", "item_factors", "user_bias", "item_bias",
                "seen_indptr", "seen_items")  # fmt: skip
        missing = [k for k in need if k not in arrays]
        if missing:
            raise InvalidParameterError(f"path: the model file lacks {', '.join(missing)}")
        model.user_ids_ = arrays["user_ids"]
        model.item_ids_ = arrays["item_ids"]
        model.user_factors_ = np.ascontiguousarray(arrays["user_factors"], dtype=np.float64)
        model.item_factors_ = np.ascontiguousarray(arrays["item_factors"], dtype=np.float64)
        model.user_bias_ = np.asarray(arrays["user_bias"], dtype=np.float64)
        model.item_bias_ = np.asarray(arrays["item_bias"], dtype=np.float64)
        model.seen_indptr_ = np.asarray(arrays["seen_indptr"], dtype=np.int64)
        model.seen_items_ = np.asarray(arrays["seen_items"], dtype=np.int64)
        model.global_mean_ = float(meta["global_mean"])
        model.clip_ = tuple(meta["clip"]) if meta.get("clip") is not None else None
        model.l2_ = float(meta["l2"])
        model.l2_bias_ = float(meta["l2_bias"])
        model.l2_weighting_ = str(meta.get("l2_weighting", "uniform"))
        model.result_ = None
        return model


# ====================================================================== tuning
class TuningRow(NamedTuple):
    """One candidate of :func:`tune` (the first four fields keep the order of earlier versions)."""

    rank: int
    l2: float
    rmse: float
    epochs: int
    bias: bool | str
    l2_weighting: str


@dataclass(frozen=True)
class TuningResult:
    """Outcome of :func:`tune`.

    Attributes
    ----------
    best_params : dict
        ``{"rank": ..., "l2": ..., "l2_weighting": ..., "bias": ...}`` of the lowest validation
        RMSE (``bias``: ``True`` for the model with user and item biases, ``"mean"`` for the
        centred model without them).
    best_rmse : float
    table : tuple of TuningRow
        Every candidate ``(rank, l2, validation RMSE, epochs, bias, l2_weighting)``, in the order
        tried (for each rank and bias setting the ``count_l2s`` ones after the ``l2s`` ones).
    model : MFRecommender
        The best candidate refitted on *all* the ratings given (``refit=True``) or as fitted on
        the training part of the split.
    """

    best_params: dict[str, Any]
    best_rmse: float
    table: tuple[TuningRow, ...]
    model: MFRecommender


def tune(
    ratings: Any,
    *,
    ranks: Sequence[int] = (10,),
    l2s: Sequence[float] = (1.0, 3.0, 5.0, 10.0, 15.0, 25.0),
    count_l2s: Sequence[float] = (),
    biases: Sequence[bool | Literal["mean"]] = (True, "mean"),
    validation_fraction: float = 0.2,
    refit: bool = True,
    rng: RNGLike = None,
    **params: Any,
) -> TuningResult:
    """Pick ``rank``, ``l2`` and the bias terms of an :class:`MFRecommender` on a validation split.

    Carves ``validation_fraction`` of ``ratings`` out (every user and item keeps a training
    rating), fits every ``(rank, bias, l2)`` on the rest with early stopping on the validation
    part, and returns the best.  Pass only your *training* ratings: the test part must never be
    seen.

    Parameters
    ----------
    ratings : Ratings, (user_ids, item_ids, values), (n, 3) array or data frame
    ranks, l2s : sequences
        Candidates (``l2`` on the ALS scale, see :class:`MFRecommender`), with the uniform ridge.
    count_l2s : sequence, default ()
        Further ``l2`` candidates with ``l2_weighting="count"`` (ALS-WR; per-rating scale, e.g.
        0.01-0.3); the validation RMSE decides between the two weightings as between ``l2`` values.
    biases : sequence of {True, "mean", False}, default (True, "mean")
        Bias settings to try (see :class:`MFRecommender`'s ``bias``): by default the validation
        split decides whether user and item biases help (MovieLens 100K: yes, validation RMSE
        0.923 against 0.958; ratings without user or item effects: no, ``docs/mf_peers.md``).
        A ``bias=`` keyword in ``params`` replaces this with that one setting.
    validation_fraction : float, default 0.2
    refit : bool, default True
        Refit the best candidate on all of ``ratings`` (for the number of epochs of its best
        validation RMSE) before returning it.
    rng : int, Generator, "secure" or None
    **params
        Other :class:`MFRecommender` parameters (``n_threads``, ``solver_options``, ...).

    Returns
    -------
    TuningResult

    Examples
    --------
    >>> from dpopt.datasets import make_low_rank_ratings
    >>> r = make_low_rank_ratings(60, 40, 2, 0.5, rng=1)
    >>> out = tune(r, ranks=(2,), l2s=(0.1, 10.0), rng=0)
    >>> out.best_params["rank"], len(out.table)
    (2, 4)
    >>> [(row.bias, row.l2) for row in out.table]
    [(True, 0.1), (True, 10.0), ('mean', 0.1), ('mean', 10.0)]
    """
    frac = check_probability(validation_fraction, "validation_fraction", open_left=True)
    if not ranks or not (l2s or count_l2s):
        raise InvalidParameterError("ranks, l2s: need at least one candidate each")
    if "bias" in params:
        biases = (params.pop("bias"),)
    if not biases:
        raise InvalidParameterError("biases: need at least one candidate")
    for b in biases:
        _bias_mode(b)
    users, items, values, bounds = _as_triples(ratings)
    uid, rows = np.unique(users, return_inverse=True)
    iid, cols = np.unique(items, return_inverse=True)
    full = Ratings(
        rows=rows.astype(np.int64).ravel(), cols=cols.astype(np.int64).ravel(), values=values,
        shape=(uid.shape[0], iid.shape[0]), name="tune", bounds=bounds,
    )  # fmt: skip
    r_split, r_fit = (as_generator(g) for g in spawn(rng, ["split", "fit"]))
    train, val = split_ratings(full, frac, rng=r_split)
    if val.n_ratings == 0:
        raise InvalidParameterError("ratings: too few ratings to carve a validation split")
    seed = int(r_fit.integers(2**31))
    params = {k: v for k, v in params.items() if k not in ("early_stopping", "rank", "l2", "l2_weighting")}
    table = []
    best: tuple[float, int, float, int, Literal["uniform", "count"], bool | Literal["mean"]] | None = None
    cands: list[tuple[float, Literal["uniform", "count"]]] = [(float(lam), "uniform") for lam in l2s]
    cands += [(float(lam), "count") for lam in count_l2s]
    tr = (uid[train.rows], iid[train.cols], train.values)
    va = (uid[val.rows], iid[val.cols], val.values)
    for rank in ranks:
        for bias in biases:
            for lam, wt in cands:
                m = MFRecommender(rank=check_int(rank, "rank"), l2=check_positive(lam, "l2"), rng=seed,
                                  early_stopping=True, l2_weighting=wt, bias=bias, **params)  # fmt: skip
                m.fit(tr, validation=va)
                res = m.result_
                assert res is not None and res.history_test_rmse is not None
                j = int(np.argmin(res.history_test_rmse))
                rmse, epochs = float(res.history_test_rmse[j]), int(res.history_epoch[j])
                table.append(TuningRow(int(rank), float(lam), rmse, epochs, bias, wt))
                if best is None or rmse < best[0]:
                    best = (rmse, int(rank), float(lam), epochs, wt, bias)
    assert best is not None
    rmse, rank, lam, epochs, wt, bias = best
    if refit:
        params.pop("max_iter", None)
        params.pop("patience", None)
        model = MFRecommender(rank=rank, l2=lam, rng=seed, max_iter=max(epochs, 1), patience=10**9,
                              l2_weighting=wt, bias=bias, **params)  # fmt: skip
        model.fit((users, items, values) if not bounds else ratings)
    else:
        model = MFRecommender(rank=rank, l2=lam, rng=seed, early_stopping=True, l2_weighting=wt,
                              bias=bias, **params)  # fmt: skip
        model.fit(tr, validation=va)
    best_params = {"rank": rank, "l2": lam, "l2_weighting": wt, "bias": bias}
    return TuningResult(best_params, rmse, tuple(table), model)
