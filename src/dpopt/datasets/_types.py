"""Result types of :mod:`dpopt.datasets` (:class:`Dataset`, :class:`Ratings`), its format error and
the checks and row scaling shared by the generators and loaders.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse
from numpy.typing import NDArray

from dpopt.exceptions import DPOptError, InvalidParameterError

__all__ = ["Dataset", "DatasetFormatError", "Ratings"]


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
