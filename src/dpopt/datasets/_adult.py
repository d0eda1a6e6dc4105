"""Data sets: synthetic generators and loaders for standard published file formats.

Every function returns a frozen result type:

* :class:`Dataset` -- a feature matrix ``X``, labels ``y`` (or ``None``) and the **declared public
  bounds** that hold by construction of the preprocessing (e.g. ``{"feature_l2_norm": 1.0,
  "label_abs": 1.0}``).  Solvers read sensitivities from these declared bounds, never from the data.
* :class:`Ratings` -- a sparse rating matrix in coordinate form (zero-based ``rows``/``cols``,
  ``values``, ``shape``) for matrix factorization.
* :func:`make_histogram` returns a plain integer count vector (a histogram for linear-query release).

Generators take the keyword ``rng`` (int seed, numpy ``Generator``, ``"secure"`` or ``None``; see
:mod:`dpopt.randomness`).  Loaders take a path to the published files (dpopt never ships or downloads
them) and raise :class:`FileNotFoundError` for a missing file and :class:`DatasetFormatError` for a
malformed one; both messages name the file and the expected format and never echo data values.

Where the reference data lives
------------------------------
dpopt ships no data files.  The reproductions and the tests that use the public reference sets
(UCI Adult, MovieLens) look for them in the folder named by the ``DPOPT_DATASETS`` environment variable
when it is set (and only there), else in ``../shared/datasets`` next to the source tree; the folder holds
one sub-folder per set (``adult/adult.data``, ``adult/adult.test``, ``movielens-100k/u.data``, ...).
Without them, the tests that need them are skipped (saying where they looked) and the experiments
fall back to a synthetic stand-in or refuse, naming the missing file.

Examples
--------
>>> from dpopt.datasets import load_breast_cancer, make_histogram
>>> data = load_breast_cancer()
>>> data.X.shape, data.bounds["feature_l2_norm"]
((569, 30), 1.0)
>>> int(make_histogram(64, 1000, rng=0).sum())
1000
"""

from __future__ import annotations

import io
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import scipy.sparse
from numpy.typing import NDArray
from scipy.special import ndtr

from dpopt._validation import check_int, check_nonneg, check_positive
from dpopt.exceptions import DPOptError, InvalidParameterError
from dpopt.randomness import RNGLike, as_generator

__all__ = [
    "ADULT_DECLARED_MAXIMA",
    "BREAST_CANCER_DECLARED_MAXIMA",
    "Dataset",
    "DatasetFormatError",
    "Ratings",
    "load_adult",
    "load_breast_cancer",
    "load_digits_one_vs_rest",
    "load_movielens",
    "make_histogram",
    "make_logistic",
    "make_low_rank_ratings",
]

PathLike = str | os.PathLike[str]


class DatasetFormatError(DPOptError, ValueError):
    """A data file does not follow the published format its loader expects.

    The message names the file, the line number and the expected format, never the offending value.
    """


# ----------------------------------------------------------------------------------------------
# Result types
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False, repr=False)
class Dataset:
    """A labelled (or unlabelled) data set with its declared public bounds.

    Attributes
    ----------
    X : ndarray of shape (n_samples, n_features)
        Feature matrix (float64).
    y : ndarray of shape (n_samples,) or None
        Labels (float64, ``+1.0``/``-1.0`` for the classification sets of this module), or ``None``.
    name : str
        Short identifier, e.g. ``"adult"`` or ``"synthetic-logistic"``.
    feature_names : tuple of str
        One name per column of ``X``.
    description : str
        Provenance and preprocessing, in one paragraph.
    bounds : dict of str to float
        Public bounds that hold **by construction** of the generator/preprocessing, independent of
        the data, e.g. ``{"feature_l2_norm": 1.0, "label_abs": 1.0}`` means every row of ``X`` has
        l2 norm at most 1 and every label has absolute value at most 1.  Empty if none hold.

    Notes
    -----
    Instances compare by identity (``eq=False``) because element-wise array comparison has no
    single truth value.  The repr shows the name, shape and bounds, never data.
    """

    X: NDArray[np.float64] = field(repr=False)
    y: NDArray[np.float64] | None = field(repr=False)
    name: str
    feature_names: tuple[str, ...]
    description: str
    bounds: dict[str, float]

    def __post_init__(self) -> None:
        if not isinstance(self.X, np.ndarray) or self.X.ndim != 2:
            raise InvalidParameterError("Dataset.X: expected a 2-d numpy array")
        if self.y is not None:
            if not isinstance(self.y, np.ndarray) or self.y.ndim != 1:
                raise InvalidParameterError("Dataset.y: expected a 1-d numpy array or None")
            if self.y.shape[0] != self.X.shape[0]:
                raise InvalidParameterError(
                    f"Dataset.y: has {self.y.shape[0]} entries but X has {self.X.shape[0]} rows; "
                    "pass one label per row"
                )
        if len(self.feature_names) != self.X.shape[1]:
            raise InvalidParameterError(
                f"Dataset.feature_names: has {len(self.feature_names)} names but X has "
                f"{self.X.shape[1]} columns; pass one name per column"
            )
        object.__setattr__(self, "feature_names", tuple(self.feature_names))
        object.__setattr__(self, "bounds", dict(self.bounds))

    def __repr__(self) -> str:
        return (
            f"Dataset(name={self.name!r}, n_samples={self.n_samples}, n_features={self.n_features}, "
            f"labelled={self.y is not None}, bounds={self.bounds!r})"
        )

    @property
    def n_samples(self) -> int:
        """Number of rows of ``X``."""
        return int(self.X.shape[0])

    @property
    def n_features(self) -> int:
        """Number of columns of ``X``."""
        return int(self.X.shape[1])


@dataclass(frozen=True, eq=False, repr=False)
class Ratings:
    """A sparse rating matrix in coordinate form.

    Attributes
    ----------
    rows, cols : ndarray of int64, shape (n_ratings,)
        Zero-based row (user) and column (item) index of each rating;
        ``0 <= rows < shape[0]`` and ``0 <= cols < shape[1]``.
    values : ndarray of float64, shape (n_ratings,)
        The ratings.
    shape : tuple of int
        ``(n_rows, n_cols)`` of the rating matrix.
    name : str
        Short identifier, e.g. ``"movielens-100k"``.
    description : str
        Provenance, in one paragraph.
    bounds : dict of str to float
        Public bounds that hold by construction (e.g. ``{"rating_min": 1.0, "rating_max": 5.0}``
        for a MovieLens file, whose rating scale is part of the published format); empty if none.
    row_ids, col_ids : ndarray of int64 or None
        For loaded files, the original identifier of each row/column index (``row_ids[i]`` is the
        user id in the file of row ``i``); ``None`` for synthetic data.
    """

    rows: NDArray[np.int64] = field(repr=False)
    cols: NDArray[np.int64] = field(repr=False)
    values: NDArray[np.float64] = field(repr=False)
    shape: tuple[int, int]
    name: str
    description: str = ""
    bounds: dict[str, float] = field(default_factory=dict)
    row_ids: NDArray[np.int64] | None = field(default=None, repr=False)
    col_ids: NDArray[np.int64] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        n = self.values.shape[0] if isinstance(self.values, np.ndarray) else -1
        for name in ("rows", "cols", "values"):
            arr = getattr(self, name)
            if not isinstance(arr, np.ndarray) or arr.ndim != 1 or arr.shape[0] != n:
                raise InvalidParameterError(
                    f"Ratings.{name}: expected a 1-d numpy array with one entry per rating"
                )
        if len(self.shape) != 2:
            raise InvalidParameterError("Ratings.shape: expected a pair (n_rows, n_cols)")
        shape = (int(self.shape[0]), int(self.shape[1]))
        if n > 0 and (
            self.rows.min() < 0
            or self.cols.min() < 0
            or self.rows.max() >= shape[0]
            or self.cols.max() >= shape[1]
        ):
            raise InvalidParameterError("Ratings: rows/cols must be zero-based indices inside shape")
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "bounds", dict(self.bounds))

    def __repr__(self) -> str:
        return (
            f"Ratings(name={self.name!r}, shape={self.shape}, n_ratings={self.n_ratings}, "
            f"bounds={self.bounds!r})"
        )

    @property
    def n_ratings(self) -> int:
        """Number of stored ratings."""
        return int(self.values.shape[0])

    @property
    def density(self) -> float:
        """Fraction of the ``shape[0] * shape[1]`` entries that are rated."""
        total = self.shape[0] * self.shape[1]
        return self.n_ratings / total if total else 0.0

    def to_sparse(self) -> scipy.sparse.csr_matrix:
        """The ratings as a ``scipy.sparse.csr_matrix`` (duplicate entries, if any, are summed)."""
        return scipy.sparse.csr_matrix((self.values, (self.rows, self.cols)), shape=self.shape)


# ----------------------------------------------------------------------------------------------
# Helpers
# ----------------------------------------------------------------------------------------------


def _scale_rows(X: NDArray[np.float64], max_norm: float = 1.0) -> NDArray[np.float64]:
    """Return ``x_i * min(1, max_norm / ||x_i||_2)`` for every row (rows inside the ball unchanged)."""
    norms = np.linalg.norm(X, axis=1)
    factor = max_norm / np.maximum(norms, max_norm)
    out = X * factor[:, None]
    # Guard against a rounding excess of one ulp: the declared bound must hold exactly.
    over = np.linalg.norm(out, axis=1) > max_norm
    if np.any(over):
        out[over] *= np.nextafter(max_norm, 0.0) / np.linalg.norm(out[over], axis=1)[:, None]
    return out


def _check_choice(value: Any, name: str, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in choices:
        opts = ", ".join(repr(c) for c in choices)
        raise InvalidParameterError(f"{name}: must be one of {opts}")
    return value


# ----------------------------------------------------------------------------------------------
# Synthetic generators
# ----------------------------------------------------------------------------------------------


def make_logistic(
    n_samples: int = 10_000,
    n_features: int = 10,
    *,
    rng: RNGLike,
    feature_norm: float = 1.0,
    noise: float = 0.0,
) -> Dataset:
    """Synthetic logistic-regression data (the thesis's DP experiments, seed 003 ch. 4).

    The generating distribution is not given in the thesis; this is the specification's default:

    1. a true weight vector ``w ~ N(0, I_d)``;
    2. raw features ``z_i ~ N(0, I_d)``;
    3. labels ``y_i = +1`` with probability ``sigmoid(z_i @ w)``, else ``-1``, drawn from the raw
       features;
    4. optionally each label is flipped independently with probability ``noise``;
    5. the released rows are ``x_i = z_i * min(1, feature_norm / ||z_i||_2)`` (rows outside the
       ball are projected onto it, rows inside are unchanged).

    Because labels are drawn from the raw features, ``P(y = +1 | x)`` is ``sigmoid(c_i * x @ w)``
    with a row-dependent factor ``c_i >= 1`` (only the direction of ``x_i`` carries signal for rows
    that were projected).

    Parameters
    ----------
    n_samples : int, default 10_000
        Number of rows ``n`` (thesis: ``10**4``).
    n_features : int, default 10
        Dimension ``d`` (thesis: 10).
    rng : int, Generator, "secure" or None
        Randomness (keyword only, no default seed).  One seed = one of the thesis's "data sets".
    feature_norm : float, default 1.0
        Every row of ``X`` has l2 norm at most this (declared as ``bounds["feature_l2_norm"]``).
    noise : float, default 0.0
        Probability in ``[0, 0.5]`` of flipping each label after the logistic draw.

    Returns
    -------
    Dataset
        ``X`` (n_samples, n_features), ``y`` in {-1, +1}; bounds
        ``{"feature_l2_norm": feature_norm, "label_abs": 1.0}``.

    Examples
    --------
    >>> ds = make_logistic(200, 5, rng=0)
    >>> ds.X.shape, sorted(set(ds.y.tolist()))
    ((200, 5), [-1.0, 1.0])
    """
    n = check_int(n_samples, "n_samples")
    d = check_int(n_features, "n_features")
    fn = check_positive(feature_norm, "feature_norm")
    p_flip = check_nonneg(noise, "noise")
    if p_flip > 0.5:
        raise InvalidParameterError("noise: is a label-flip probability and must lie in [0, 0.5]")
    gen = as_generator(rng)
    w = gen.standard_normal(d)
    Z = gen.standard_normal((n, d))
    prob = 1.0 / (1.0 + np.exp(-np.clip(Z @ w, -500.0, 500.0)))
    y = np.where(gen.random(n) < prob, 1.0, -1.0)
    if p_flip > 0:
        y = np.where(gen.random(n) < p_flip, -y, y)
    X = _scale_rows(Z, fn)
    return Dataset(
        X=X,
        y=y,
        name="synthetic-logistic",
        feature_names=tuple(f"x{j}" for j in range(d)),
        description=(
            f"Synthetic logistic-regression data: n={n}, d={d}; z ~ N(0, I), w ~ N(0, I), "
            f"P(y=+1) = sigmoid(z @ w), label-flip probability {p_flip:g}; rows projected onto the "
            f"l2 ball of radius {fn:g}."
        ),
        bounds={"feature_l2_norm": fn, "label_abs": 1.0},
    )


def make_low_rank_ratings(
    n_users: int,
    n_items: int,
    rank: int,
    density: float,
    *,
    rng: RNGLike,
    noise_std: float = 0.1,
) -> Ratings:
    """Sparse noisy observations of a random low-rank matrix (for matrix factorization).

    ``U ~ N(0, rank**-0.5 I)`` of shape (n_users, rank) and ``V`` likewise (n_items, rank), so that
    each entry of ``U @ V.T`` has variance 1.  ``round(density * n_users * n_items)`` distinct
    entries (at least one) are chosen uniformly without replacement and observed as
    ``(U @ V.T)[i, j] + noise_std * N(0, 1)``.  Entries are sorted by (row, col).  Some rows or
    columns may have no rating at low density; ``shape`` is always ``(n_users, n_items)``.

    Parameters
    ----------
    n_users, n_items : int
        Matrix shape.
    rank : int
        True rank, ``1 <= rank <= min(n_users, n_items)``.
    density : float
        Fraction of observed entries, in ``(0, 1]``.
    rng : int, Generator, "secure" or None
        Randomness (keyword only).
    noise_std : float, default 0.1
        Standard deviation of the additive Gaussian observation noise (``>= 0``).

    Returns
    -------
    Ratings
        Zero-based coordinates; ``bounds`` is empty (Gaussian values are unbounded).

    Examples
    --------
    >>> r = make_low_rank_ratings(100, 80, rank=3, density=0.1, rng=0)
    >>> r.shape, len(r.values)
    ((100, 80), 800)
    """
    m = check_int(n_users, "n_users")
    k_items = check_int(n_items, "n_items")
    r = check_int(rank, "rank")
    if r > min(m, k_items):
        raise InvalidParameterError("rank: must be at most min(n_users, n_items)")
    dens = check_positive(density, "density")
    if dens > 1:
        raise InvalidParameterError("density: is a fraction of entries and must lie in (0, 1]")
    sigma = check_nonneg(noise_std, "noise_std")
    gen = as_generator(rng)
    total = m * k_items
    nnz = max(1, min(total, round(dens * total)))
    U = gen.standard_normal((m, r)) / r**0.25
    V = gen.standard_normal((k_items, r)) / r**0.25
    flat = np.sort(gen.choice(total, size=nnz, replace=False))
    rows = (flat // k_items).astype(np.int64)
    cols = (flat % k_items).astype(np.int64)
    values = np.einsum("ij,ij->i", U[rows], V[cols]) + sigma * gen.standard_normal(nnz)
    return Ratings(
        rows=rows,
        cols=cols,
        values=values.astype(np.float64),
        shape=(m, k_items),
        name="synthetic-low-rank",
        description=(
            f"Synthetic rank-{r} matrix {m} x {k_items}, {nnz} observed entries (density {dens:g}), "
            f"Gaussian factors, observation noise std {sigma:g}."
        ),
    )


def make_histogram(
    n_bins: int,
    n_records: int,
    *,
    rng: RNGLike,
    shape: Literal["zipf", "uniform", "gaussian-mixture"] = "zipf",
) -> NDArray[np.int64]:
    """A random count histogram (data vector for linear-query release).

    The counts are one multinomial draw of ``n_records`` records over ``n_bins`` bins with
    probabilities given by ``shape``:

    * ``"zipf"``: ``p_k proportional to 1 / (k + 1)`` (bin 0 most likely, decreasing along the
      domain, heavy tail);
    * ``"uniform"``: ``p_k = 1 / n_bins``;
    * ``"gaussian-mixture"``: a mixture of 4 discretized Gaussians with centres uniform on the
      domain, standard deviations uniform in ``[n_bins / 50, n_bins / 8]`` (at least half a bin) and
      Dirichlet(1) weights (locally smooth counts with a few bumps).

    Parameters
    ----------
    n_bins : int
        Domain size (>= 1).
    n_records : int
        Total count (>= 0); the histogram sums to exactly this.
    rng : int, Generator, "secure" or None
        Randomness (keyword only).
    shape : {"zipf", "uniform", "gaussian-mixture"}, default "zipf"
        Distribution of records over bins.

    Returns
    -------
    ndarray of int64, shape (n_bins,)
        Non-negative counts summing to ``n_records``.

    Examples
    --------
    >>> x = make_histogram(8, 100, rng=0)              # zipf: bin 0 is the most likely
    >>> x.shape, int(x.sum()), int(x.argmax())
    ((8,), 100, 0)
    """
    k = check_int(n_bins, "n_bins")
    n = check_int(n_records, "n_records", minimum=0)
    kind = _check_choice(shape, "shape", ("zipf", "uniform", "gaussian-mixture"))
    gen = as_generator(rng)
    if kind == "zipf":
        p = 1.0 / np.arange(1, k + 1, dtype=np.float64)
    elif kind == "uniform":
        p = np.ones(k)
    else:
        n_comp = 4
        centres = gen.uniform(0.0, k, size=n_comp)
        stds = np.maximum(gen.uniform(k / 50.0, k / 8.0, size=n_comp), 0.5)
        weights = gen.dirichlet(np.ones(n_comp))
        edges = np.arange(k + 1, dtype=np.float64)
        cdf = ndtr((edges[None, :] - centres[:, None]) / stds[:, None])
        p = weights @ np.diff(cdf, axis=1)
        if not np.all(np.isfinite(p)) or p.sum() <= 0:  # pragma: no cover - numerically impossible
            p = np.ones(k)
    p = p / p.sum()
    return gen.multinomial(n, p).astype(np.int64)


# ----------------------------------------------------------------------------------------------
# UCI Adult
# ----------------------------------------------------------------------------------------------

# Attribute order and full category lists of the published description (adult.names).
_ADULT_ATTRIBUTES: tuple[tuple[str, tuple[str, ...] | None], ...] = (
    ("age", None),
    ("workclass", tuple(
        "Private Self-emp-not-inc Self-emp-inc Federal-gov Local-gov State-gov Without-pay "
        "Never-worked".split())),
    ("fnlwgt", None),
    ("education", tuple(
        "Bachelors Some-college 11th HS-grad Prof-school Assoc-acdm Assoc-voc 9th 7th-8th 12th "
        "Masters 1st-4th 10th Doctorate 5th-6th Preschool".split())),
    ("education-num", None),
    ("marital-status", tuple(
        "Married-civ-spouse Divorced Never-married Separated Widowed Married-spouse-absent "
        "Married-AF-spouse".split())),
    ("occupation", tuple(
        "Tech-support Craft-repair Other-service Sales Exec-managerial Prof-specialty "
        "Handlers-cleaners Machine-op-inspct Adm-clerical Farming-fishing Transport-moving "
        "Priv-house-serv Protective-serv Armed-Forces".split())),
    ("relationship", tuple("Wife Own-child Husband Not-in-family Other-relative Unmarried".split())),
    ("race", tuple("White Asian-Pac-Islander Amer-Indian-Eskimo Other Black".split())),
    ("sex", ("Female", "Male")),
    ("capital-gain", None),
    ("capital-loss", None),
    ("hours-per-week", None),
    ("native-country", tuple(
        "United-States Cambodia England Puerto-Rico Canada Germany Outlying-US(Guam-USVI-etc) India "
        "Japan Greece South China Cuba Iran Honduras Philippines Italy Poland Jamaica Vietnam Mexico "
        "Portugal Ireland France Dominican-Republic Laos Ecuador Taiwan Haiti Columbia Hungary "
        "Guatemala Nicaragua Scotland Thailand Yugoslavia El-Salvador Trinadad&Tobago Peru Hong "
        "Holand-Netherlands".split())),
)  # fmt: skip
assert [len(c) for _, c in _ADULT_ATTRIBUTES if c is not None] == [8, 16, 7, 14, 6, 5, 2, 41]

#: Declared public upper bounds of Adult's numeric attributes, used by ``column_bounds="declared"``.
#: age: the Census public-use files top-code age at 90; fnlwgt: a rounded-up ceiling of the CPS
#: weight scale; education-num: 16 education levels in the schema; capital-gain: the CPS top code
#: 99999; capital-loss: 4356, the top value of the published release (treated as public metadata of
#: the release); hours-per-week: top-coded at 99.  All numeric attributes are non-negative.
ADULT_DECLARED_MAXIMA: dict[str, float] = {
    "age": 90.0,
    "fnlwgt": 1_500_000.0,
    "education-num": 16.0,
    "capital-gain": 99_999.0,
    "capital-loss": 4_356.0,
    "hours-per-week": 99.0,
}

_ADULT_FORMAT = (
    "the UCI Adult format: 15 comma-separated fields per line (14 attributes of adult.names and the "
    "income label '<=50K' or '>50K', optionally followed by '.'), '?' for a missing value, lines "
    "starting with '|' are comments"
)


def _parse_adult_file(
    path: Path,
) -> tuple[NDArray[np.float64], NDArray[np.int64], NDArray[np.float64], int]:
    """Parse one Adult file; return (numeric, categorical codes, labels, rows dropped for '?')."""
    if not path.is_file():
        raise FileNotFoundError(f"UCI Adult file {str(path)!r} not found; expected a file in {_ADULT_FORMAT}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise DatasetFormatError(f"{path.name}: is not a text file; expected {_ADULT_FORMAT}") from None
    cat_index = [
        {c: i for i, c in enumerate(cats)} if cats is not None else None for _, cats in _ADULT_ATTRIBUTES
    ]
    numeric: list[list[float]] = []
    codes: list[list[int]] = []
    labels: list[float] = []
    dropped = 0
    n_fields = len(_ADULT_ATTRIBUTES) + 1
    for lineno, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("|"):
            continue
        fields = [f.strip() for f in stripped.split(",")]
        if len(fields) != n_fields:
            raise DatasetFormatError(
                f"{path.name} line {lineno}: found {len(fields)} fields, expected {n_fields}; "
                f"expected {_ADULT_FORMAT}"
            )
        label = fields[-1].removesuffix(".")
        if label == ">50K":
            y = 1.0
        elif label == "<=50K":
            y = -1.0
        else:
            raise DatasetFormatError(
                f"{path.name} line {lineno}: the income label is neither '<=50K' nor '>50K'; "
                f"expected {_ADULT_FORMAT}"
            )
        if "?" in fields[:-1]:
            dropped += 1
            continue
        row_num: list[float] = []
        row_cat: list[int] = []
        for (attr, _), lookup, value in zip(_ADULT_ATTRIBUTES, cat_index, fields, strict=False):
            if lookup is None:
                try:
                    x = float(value)
                except ValueError:
                    x = math.nan
                if not math.isfinite(x):
                    raise DatasetFormatError(
                        f"{path.name} line {lineno}: attribute {attr!r} is not a finite number; "
                        f"expected {_ADULT_FORMAT}"
                    )
                row_num.append(x)
            else:
                code = lookup.get(value)
                if code is None:
                    raise DatasetFormatError(
                        f"{path.name} line {lineno}: attribute {attr!r} has a category that is not in "
                        f"the published Adult schema; expected {_ADULT_FORMAT}"
                    )
                row_cat.append(code)
        numeric.append(row_num)
        codes.append(row_cat)
        labels.append(y)
    n_num = sum(1 for _, c in _ADULT_ATTRIBUTES if c is None)
    n_cat = len(_ADULT_ATTRIBUTES) - n_num
    return (
        np.asarray(numeric, dtype=np.float64).reshape(-1, n_num),
        np.asarray(codes, dtype=np.int64).reshape(-1, n_cat),
        np.asarray(labels, dtype=np.float64),
        dropped,
    )


def load_adult(
    path: PathLike,
    *,
    split: Literal["all", "train", "test"] = "all",
    preprocessing: Literal["admm", "raw"] = "admm",
    column_bounds: Literal["declared", "data"] = "declared",
    categories: Literal["schema", "observed"] = "schema",
) -> Dataset:
    """Load UCI Adult (Census Income) from the published files ``adult.data`` / ``adult.test``.

    Parameters
    ----------
    path : str or PathLike
        Directory containing ``adult.data`` (32,561 rows) and ``adult.test`` (16,281 rows; its first
        line ``|1x3 Cross validator`` is skipped and the trailing ``.`` of its labels is stripped).
        Only the file(s) needed by ``split`` must exist.
    split : {"all", "train", "test"}, default "all"
        ``"train"`` = adult.data, ``"test"`` = adult.test, ``"all"`` = both, in that order.
    preprocessing : {"admm", "raw"}, default "admm"
        ``"admm"``: the recipe of the private-ADMM paper (Zhang, Khalili & Liu, seed 004):

        1. drop every row with a missing value (``?``);
        2. one-hot encode each categorical attribute with ``m`` categories into ``m`` binary columns
           (in the attribute order of adult.names, each attribute expanded in place);
        3. scale each column by its maximum (absolute) value -- see ``column_bounds``;
        4. scale each row to l2 norm at most 1: ``x <- x / max(1, ||x||_2)``.  After step 3 each row
           contains 8 ones, so its norm is at least sqrt(8) and every row ends with norm exactly 1
           (up to rounding);
        5. labels ``>50K`` -> +1, ``<=50K`` -> -1.

        ``"raw"``: steps 1, 2 and 5 only (numeric attributes unscaled); bounds declare only the labels.
    column_bounds : {"declared", "data"}, default "declared"
        Maxima used in step 3 for the 6 numeric columns.  ``"declared"`` (default, sound): the public
        :data:`ADULT_DECLARED_MAXIMA`; values are clipped to ``[0, maximum]`` first (a no-op on the
        published files) so the transformation of each row depends on that row only.
        ``"data"``: the maxima of the rows being returned (what the paper did; for reproduction).
        Both give row norms <= 1.  One-hot columns are binary either way.
    categories : {"schema", "observed"}, default "schema"
        ``"schema"``: one column for every category of the published description (105 features,
        independent of the data and of ``split``).  ``"observed"``: only categories that occur in
        the returned rows (104 for ``split="all"``; data dependent, for comparison with other
        reproductions).

    Returns
    -------
    Dataset
        For ``split="all"``: 45,222 rows (30,162 train + 15,060 test) x 105 features, 11,208
        labels +1.  ``bounds = {"feature_l2_norm": 1.0, "label_abs": 1.0}`` for ``"admm"``.

    Raises
    ------
    FileNotFoundError
        If ``path`` or a needed file is missing.
    DatasetFormatError
        If a line has the wrong number of fields, a non-numeric numeric attribute, a category that
        is not in the published schema or an unknown label (file and line are named, not the value).

    Examples
    --------
    With the published files in ``$DPOPT_DATASETS/adult`` (dpopt does not ship them):

    >>> import os
    >>> adult = load_adult(os.path.join(os.environ["DPOPT_DATASETS"], "adult"))  # doctest: +SKIP
    >>> adult.X.shape, adult.bounds                                               # doctest: +SKIP
    ((45222, 105), {'feature_l2_norm': 1.0, 'label_abs': 1.0})

    Notes
    -----
    **Row count.**  48,842 rows; 3,620 contain a ``?`` (in workclass, occupation or
    native-country), leaving **45,222** rows.  The paper reports 45,223; no reading of the published
    files gives that number, so it is taken to be an off-by-one in the paper.

    **Feature count: 105 with the default ``categories="schema"``.**  6 numeric attributes (age,
    fnlwgt, education-num, capital-gain, capital-loss, hours-per-week, all kept) + 99 binary
    columns from the full category lists of adult.names: workclass 8, education 16,
    marital-status 7, occupation 14, relationship 6, race 5, sex 2, native-country 41.  This equals
    the paper's stated 105, so it is the default.  After dropping rows with a ``?``, the workclass
    ``Never-worked`` never occurs (all its rows have occupation ``?``), so encoding only the
    observed categories gives 104 (its column would be all zeros under ``"schema"``).
    ``Holand-Netherlands`` occurs in one complete row of adult.data and none of adult.test, so it is
    observed for ``split="all"`` and ``"train"`` but not for ``"test"`` (103 observed there);
    the schema encoding keeps the feature space identical across splits.  Dropping ``fnlwgt`` or
    ``education-num`` (as some pipelines do) would give 104 from the schema and 103 observed; both
    are kept here.

    Privacy
    -------
    This is preprocessing, not a private mechanism.  Dropping incomplete rows, one-hot encoding
    with the published schema, clipping/scaling by *declared* maxima and per-row normalization
    transform each record independently of the others, so they preserve any record-level DP
    guarantee computed downstream (add/remove or replace-one) with the declared bounds
    ``feature_l2_norm = 1`` and ``label_abs = 1``.  ``column_bounds="data"`` (the paper's recipe)
    divides by maxima of the private data, and ``categories="observed"`` makes the feature space
    depend on which categories occur: neither is differentially private, and a guarantee computed
    on the result does not account for them.  Use them only to reproduce the paper.
    """
    split_ = _check_choice(split, "split", ("all", "train", "test"))
    prep = _check_choice(preprocessing, "preprocessing", ("admm", "raw"))
    col_b = _check_choice(column_bounds, "column_bounds", ("declared", "data"))
    cats_mode = _check_choice(categories, "categories", ("schema", "observed"))
    root = Path(path)
    if not root.is_dir():
        raise FileNotFoundError(
            f"UCI Adult directory {str(root)!r} not found; pass a directory containing adult.data "
            "and adult.test (the files published by the UCI Machine Learning Repository)"
        )
    files = {"train": ["adult.data"], "test": ["adult.test"], "all": ["adult.data", "adult.test"]}[split_]
    parts = [_parse_adult_file(root / f) for f in files]
    numeric = np.concatenate([p[0] for p in parts])
    codes = np.concatenate([p[1] for p in parts])
    y = np.concatenate([p[2] for p in parts])
    n = y.shape[0]
    if n == 0:
        raise DatasetFormatError(f"{', '.join(files)}: contain no complete rows; expected {_ADULT_FORMAT}")

    columns: list[NDArray[np.float64]] = []
    names: list[str] = []
    num_j = cat_j = 0
    for attr, cats in _ADULT_ATTRIBUTES:
        if cats is None:
            col = numeric[:, num_j]
            num_j += 1
            if prep == "admm":
                if col_b == "declared":
                    bound = ADULT_DECLARED_MAXIMA[attr]
                    col = np.clip(col, 0.0, bound) / bound
                else:
                    top = float(np.max(np.abs(col)))
                    col = col / top if top > 0 else col
            columns.append(col[:, None])
            names.append(attr)
        else:
            code = codes[:, cat_j]
            cat_j += 1
            onehot = np.zeros((n, len(cats)), dtype=np.float64)
            onehot[np.arange(n), code] = 1.0
            keep: NDArray[np.bool_] = (
                np.ones(len(cats), dtype=bool) if cats_mode == "schema" else np.asarray(onehot.any(axis=0))
            )
            columns.append(onehot[:, keep])
            names.extend(f"{attr}={c}" for c, k in zip(cats, keep, strict=True) if k)
    X = np.hstack(columns)
    bounds: dict[str, float] = {"label_abs": 1.0}
    if prep == "admm":
        X = _scale_rows(X, 1.0)
        bounds = {"feature_l2_norm": 1.0, "label_abs": 1.0}
    return Dataset(
        X=X,
        y=y,
        name="adult" if split_ == "all" else f"adult-{split_}",
        feature_names=tuple(names),
        description=(
            f"UCI Adult ({split_}): {n} complete rows, {X.shape[1]} features; preprocessing={prep}, "
            f"column_bounds={col_b}, categories={cats_mode}; labels >50K=+1, <=50K=-1. "
            "Becker & Kohavi (1996), UCI Machine Learning Repository, CC BY 4.0."
        ),
        bounds=bounds,
    )


# ----------------------------------------------------------------------------------------------
# MovieLens
# ----------------------------------------------------------------------------------------------

_MOVIELENS_FORMATS = {
    "u.data": (
        "MovieLens 100K u.data: tab-separated 'user id, item id, rating, timestamp', one rating per line"
    ),
    "ratings.dat": "MovieLens 1M/10M ratings.dat: 'UserID::MovieID::Rating::Timestamp', one rating per line",
}


def _first_bad_movielens_line(lines: list[str], sep: str) -> tuple[int, str]:
    """Locate the first malformed line (1-based) and say what is wrong, without quoting it."""
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        fields = line.strip().split(sep)
        if len(fields) != 4:
            return lineno, f"found {len(fields)} fields, expected 4"
        try:
            [float(f) for f in fields]
        except ValueError:
            return lineno, "a field is not a number"
    return 0, "could not be parsed"


def load_movielens(path: PathLike) -> Ratings:
    """Load MovieLens ratings from ``u.data`` (100K) or ``ratings.dat`` (1M, 10M).

    Parameters
    ----------
    path : str or PathLike
        The ``u.data`` / ``ratings.dat`` file itself, or a directory containing exactly one of them.
        A file named otherwise is read as ``ratings.dat`` if its first line contains ``::``,
        else as tab-separated ``u.data``.

    Returns
    -------
    Ratings
        ``rows`` = user index, ``cols`` = item index, ``values`` = ratings (in file order).

    Raises
    ------
    FileNotFoundError
        If the path does not exist or a directory contains neither file.
    DatasetFormatError
        If a line does not have 4 numeric fields, an id is not a positive integer or a rating lies
        outside the published scale (file and line are named, not the value).

    Examples
    --------
    A two-rating file in the 100K format (``user item rating timestamp``, tab-separated):

    >>> import pathlib, tempfile
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "u.data"
    >>> _ = path.write_text("1\\t10\\t4\\t881250949\\n2\\t10\\t5\\t881250950\\n")
    >>> ratings = load_movielens(path)
    >>> ratings.shape, ratings.values.tolist()
    ((2, 1), [4.0, 5.0])

    Notes
    -----
    **Re-indexing.**  File ids are 1-based and, in the larger sets, not contiguous (MovieLens 1M has
    movie ids up to 3,952 but only 3,706 rated movies; 10M has gaps in both).  Rows and columns are
    the ranks of the ids that occur: ``row_ids = sorted unique user ids``, ``rows[k]`` is the position
    of the k-th rating's user id in ``row_ids`` (so ``row_ids[rows]`` recovers the file ids), and the
    same for items.  ``shape = (len(row_ids), len(col_ids))`` counts users and items that have at
    least one rating, not the largest id.  For 100K the ids are exactly 1..943 and 1..1682, so
    ``rows = user id - 1`` and the shape is 943 x 1682 with 100,000 ratings.

    **Bounds.**  The rating scale is part of the published format: integer stars 1-5 in
    ``u.data``, half stars 0.5-5 in ``ratings.dat`` (whole stars in 1M); values are checked against
    it and declared in ``bounds`` as ``rating_min``/``rating_max``.  Timestamps are read and dropped.
    """
    p = Path(path)
    if p.is_dir():
        found = [p / f for f in _MOVIELENS_FORMATS if (p / f).is_file()]
        if not found:
            raise FileNotFoundError(
                f"MovieLens directory {str(p)!r} contains neither u.data nor ratings.dat; expected "
                f"{_MOVIELENS_FORMATS['u.data']} or {_MOVIELENS_FORMATS['ratings.dat']}"
            )
        if len(found) > 1:
            raise InvalidParameterError(
                f"path: directory {str(p)!r} contains both u.data and ratings.dat; pass the file to load"
            )
        p = found[0]
    elif not p.is_file():
        raise FileNotFoundError(
            f"MovieLens file {str(p)!r} not found; expected {_MOVIELENS_FORMATS['u.data']} or "
            f"{_MOVIELENS_FORMATS['ratings.dat']}"
        )
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise DatasetFormatError(f"{p.name}: is not a text file; expected MovieLens ratings") from None
    first = text.split("\n", 1)[0]
    kind = p.name if p.name in _MOVIELENS_FORMATS else ("ratings.dat" if "::" in first else "u.data")
    fmt = _MOVIELENS_FORMATS[kind]
    sep = "::" if kind == "ratings.dat" else "\t"
    if sep == "::":
        text = text.replace("::", "\t")
    if not text.strip():
        raise DatasetFormatError(f"{p.name}: contains no ratings; expected {fmt}")
    try:
        data = np.loadtxt(io.StringIO(text), delimiter="\t", dtype=np.float64, ndmin=2, comments=None)
    except ValueError:
        lineno, what = _first_bad_movielens_line(text.splitlines(), "\t")
        raise DatasetFormatError(f"{p.name} line {lineno}: {what}; expected {fmt}") from None
    if data.shape[1] != 4:
        raise DatasetFormatError(
            f"{p.name}: found {data.shape[1]} fields per line, expected 4; expected {fmt}"
        )
    if not np.all(np.isfinite(data)):
        bad = int(np.flatnonzero(~np.all(np.isfinite(data), axis=1))[0]) + 1
        raise DatasetFormatError(f"{p.name} rating {bad}: a field is not a finite number; expected {fmt}")
    ids = data[:, :2]
    bad_ids = (ids < 1) | (ids != np.floor(ids))
    if np.any(bad_ids):
        bad = int(np.flatnonzero(bad_ids.any(axis=1))[0]) + 1
        raise DatasetFormatError(
            f"{p.name} rating {bad}: user and item ids must be positive integers; expected {fmt}"
        )
    lo, hi = (1.0, 5.0) if kind == "u.data" else (0.5, 5.0)
    out_of_scale = (data[:, 2] < lo) | (data[:, 2] > hi)
    if np.any(out_of_scale):
        bad = int(np.flatnonzero(out_of_scale)[0]) + 1
        raise DatasetFormatError(
            f"{p.name} rating {bad}: rating outside the published scale [{lo:g}, {hi:g}]; expected {fmt}"
        )
    user_ids, rows = np.unique(ids[:, 0].astype(np.int64), return_inverse=True)
    item_ids, cols = np.unique(ids[:, 1].astype(np.int64), return_inverse=True)
    name = {"u.data": "movielens-100k", "ratings.dat": "movielens"}[kind]
    return Ratings(
        rows=rows.astype(np.int64).ravel(),
        cols=cols.astype(np.int64).ravel(),
        values=data[:, 2].copy(),
        shape=(int(user_ids.shape[0]), int(item_ids.shape[0])),
        name=name,
        description=(
            f"MovieLens ratings from {p.name}: {data.shape[0]} ratings, {user_ids.shape[0]} users x "
            f"{item_ids.shape[0]} items (ids re-indexed to contiguous zero-based indices). "
            "Harper & Konstan (2015), GroupLens Research; redistribution is not permitted."
        ),
        bounds={"rating_min": lo, "rating_max": hi},
        row_ids=user_ids.astype(np.int64),
        col_ids=item_ids.astype(np.int64),
    )


# ----------------------------------------------------------------------------------------------
# scikit-learn bundled sets
# ----------------------------------------------------------------------------------------------

#: Declared upper bounds of the 30 WDBC features (in scikit-learn's column order): the maxima in
#: the published summary statistics of the data set description, rounded up.  All features are >= 0.
BREAST_CANCER_DECLARED_MAXIMA: tuple[float, ...] = (
    # mean: radius, texture, perimeter, area, smoothness, compactness, concavity, concave points,
    # symmetry, fractal dimension
    30.0, 40.0, 200.0, 2600.0, 0.2, 0.4, 0.5, 0.25, 0.35, 0.1,
    # standard error
    3.0, 5.0, 25.0, 600.0, 0.04, 0.15, 0.4, 0.06, 0.08, 0.03,
    # worst
    40.0, 50.0, 260.0, 4500.0, 0.25, 1.1, 1.3, 0.3, 0.7, 0.21,
)  # fmt: skip


def load_breast_cancer() -> Dataset:
    """Breast Cancer Wisconsin (Diagnostic), via ``sklearn.datasets.load_breast_cancer``.

    569 rows x 30 features.  Scaling: each feature is clipped to ``[0, M_j]`` and divided by
    ``M_j`` from :data:`BREAST_CANCER_DECLARED_MAXIMA` (the published maxima of the data set
    description rounded up, so clipping is a no-op on the bundled data), then each row is scaled to
    l2 norm at most 1 (``x <- x / max(1, ||x||_2)``).  Labels: malignant = +1, benign = -1
    (212 / 357).

    Returns
    -------
    Dataset
        ``bounds = {"feature_l2_norm": 1.0, "label_abs": 1.0}``.

    Examples
    --------
    >>> data = load_breast_cancer()
    >>> data.X.shape, int((data.y == 1).sum())
    ((569, 30), 212)

    Notes
    -----
    Privacy: the per-feature maxima come from the public description of this benchmark, but that
    description was itself computed from the data; for a real private data set the bounds must come
    from domain knowledge.  Given the bounds, every row is transformed independently of the others.
    """
    from sklearn import datasets as skd

    bunch = skd.load_breast_cancer()
    raw = np.asarray(bunch.data, dtype=np.float64)
    bounds = np.asarray(BREAST_CANCER_DECLARED_MAXIMA)
    X = _scale_rows(np.clip(raw, 0.0, bounds) / bounds, 1.0)
    target = np.asarray(bunch.target)
    malignant = int(list(bunch.target_names).index("malignant"))
    y = np.where(target == malignant, 1.0, -1.0)
    return Dataset(
        X=X,
        y=y,
        name="breast-cancer",
        feature_names=tuple(str(f) for f in bunch.feature_names),
        description=(
            "Breast Cancer Wisconsin (Diagnostic), scikit-learn bundled copy: features divided by "
            "declared maxima, rows scaled to l2 norm <= 1; malignant=+1, benign=-1."
        ),
        bounds={"feature_l2_norm": 1.0, "label_abs": 1.0},
    )


def load_digits_one_vs_rest(digit: int = 1) -> Dataset:
    """8x8 handwritten digits (``sklearn.datasets.load_digits``) as a one-vs-rest binary task.

    A small, bundled stand-in for the thesis's MNIST "1 vs others" experiment: label +1 for the
    chosen digit, -1 for all others.  Pixels are integers in ``[0, 16]`` by construction of the data
    set (4x4 blocks of a 32x32 bitmap counted), so they are divided by the declared bound 16, then
    each row is scaled to l2 norm at most 1 (``x <- x / max(1, ||x||_2)``).  No statistic of the
    data is used.

    Parameters
    ----------
    digit : int, default 1
        The positive class, 0-9.

    Returns
    -------
    Dataset
        1,797 rows x 64 features; ``bounds = {"feature_l2_norm": 1.0, "label_abs": 1.0}``.

    Examples
    --------
    >>> ones = load_digits_one_vs_rest(1)
    >>> ones.X.shape, ones.name
    ((1797, 64), 'digits-1-vs-rest')
    """
    d = check_int(digit, "digit", minimum=0)
    if d > 9:
        raise InvalidParameterError("digit: must be an integer in 0..9")
    from sklearn import datasets as skd

    bunch = skd.load_digits()
    X = _scale_rows(np.clip(np.asarray(bunch.data, dtype=np.float64), 0.0, 16.0) / 16.0, 1.0)
    y = np.where(np.asarray(bunch.target) == d, 1.0, -1.0)
    return Dataset(
        X=X,
        y=y,
        name=f"digits-{d}-vs-rest",
        feature_names=tuple(f"pixel_{r}_{c}" for r in range(8) for c in range(8)),
        description=(
            f"scikit-learn 8x8 digits, digit {d} = +1, others = -1; pixels divided by 16, rows scaled "
            "to l2 norm <= 1."
        ),
        bounds={"feature_l2_norm": 1.0, "label_abs": 1.0},
    )
