"""Loader of UCI Adult (Census Income) from the published files ``adult.data`` / ``adult.test``."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from dpopt.datasets._types import Dataset, DatasetFormatError, PathLike, _check_choice, _scale_rows

__all__ = ["ADULT_DECLARED_MAXIMA", "load_adult"]


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
