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

# One concern per module: _types (Dataset, Ratings, DatasetFormatError, shared checks),
# _synthetic (make_*), _adult (UCI Adult), _movielens (MovieLens), _sklearn_sets (scikit-learn's
# bundled sets).  The public names are these re-exports; import them from dpopt.datasets.
from dpopt.datasets._adult import ADULT_DECLARED_MAXIMA, load_adult
from dpopt.datasets._movielens import load_movielens
from dpopt.datasets._sklearn_sets import (
    BREAST_CANCER_DECLARED_MAXIMA,
    load_breast_cancer,
    load_digits_one_vs_rest,
)
from dpopt.datasets._synthetic import make_histogram, make_logistic, make_low_rank_ratings
from dpopt.datasets._types import Dataset, DatasetFormatError, Ratings

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
