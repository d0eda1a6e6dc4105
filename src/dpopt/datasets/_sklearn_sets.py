"""The data sets bundled with scikit-learn (breast cancer, 8x8 digits) with declared public bounds."""

from __future__ import annotations

import numpy as np

from dpopt._validation import check_int
from dpopt.datasets._types import Dataset, _scale_rows
from dpopt.exceptions import InvalidParameterError

__all__ = ["BREAST_CANCER_DECLARED_MAXIMA", "load_breast_cancer", "load_digits_one_vs_rest"]


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
