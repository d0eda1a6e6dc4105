"""Tests for dpopt.datasets: generators, loaders of published formats, sklearn wrappers."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest

from dpopt.datasets import (
    ADULT_DECLARED_MAXIMA,
    Dataset,
    DatasetFormatError,
    Ratings,
    load_adult,
    load_breast_cancer,
    load_digits_one_vs_rest,
    load_movielens,
    make_histogram,
    make_logistic,
    make_low_rank_ratings,
)
from dpopt.exceptions import InvalidParameterError

TOL = 1e-12
SECRET = "SECRET7731"  # a value planted in malformed files; must never appear in a message


def _row_norms(X: np.ndarray) -> np.ndarray:
    return np.linalg.norm(X, axis=1)


def _assert_classification(ds: Dataset, feature_norm: float = 1.0) -> None:
    assert ds.y is not None
    assert set(np.unique(ds.y).tolist()) <= {-1.0, 1.0}
    assert np.all(_row_norms(ds.X) <= feature_norm + TOL)
    assert ds.bounds["feature_l2_norm"] == feature_norm
    assert ds.bounds["label_abs"] == 1.0
    assert len(ds.feature_names) == ds.n_features == ds.X.shape[1]
    assert ds.n_samples == ds.X.shape[0] == ds.y.shape[0]
    assert np.all(np.isfinite(ds.X))


# ------------------------------------------------------------------ result types


def test_dataset_rejects_inconsistent_shapes() -> None:
    X = np.zeros((3, 2))
    with pytest.raises(InvalidParameterError, match="one label per row"):
        Dataset(X, np.zeros(4), "t", ("a", "b"), "", {})
    with pytest.raises(InvalidParameterError, match="one name per column"):
        Dataset(X, None, "t", ("a",), "", {})
    with pytest.raises(InvalidParameterError, match="2-d"):
        Dataset(np.zeros(3), None, "t", (), "", {})


def test_dataset_is_frozen_and_repr_has_no_data() -> None:
    ds = make_logistic(20, 3, rng=0)
    with pytest.raises(AttributeError):
        ds.name = "other"  # type: ignore[misc]
    text = repr(ds)
    assert "n_samples=20" in text and "n_features=3" in text
    assert repr(float(ds.X[0, 0])) not in text


def test_ratings_rejects_out_of_range_indices() -> None:
    with pytest.raises(InvalidParameterError, match="zero-based"):
        Ratings(np.array([0, 3]), np.array([0, 1]), np.array([1.0, 2.0]), (3, 2), "t")
    with pytest.raises(InvalidParameterError, match="one entry per rating"):
        Ratings(np.array([0]), np.array([0, 1]), np.array([1.0, 2.0]), (3, 2), "t")


# ------------------------------------------------------------------ make_logistic


@pytest.mark.parametrize("feature_norm", [1.0, 0.3, 2.5])
def test_make_logistic_shape_bounds_labels(feature_norm: float) -> None:
    ds = make_logistic(500, 7, rng=1, feature_norm=feature_norm)
    assert ds.X.shape == (500, 7)
    _assert_classification(ds, feature_norm)
    # d = 7 Gaussian rows are almost all outside small balls: they are projected onto the sphere.
    if feature_norm <= 1.0:
        assert np.median(_row_norms(ds.X)) == pytest.approx(feature_norm)


def test_make_logistic_defaults_match_thesis_size() -> None:
    ds = make_logistic(rng=3)
    assert ds.X.shape == (10_000, 10)
    assert 0.2 < np.mean(ds.y == 1.0) < 0.8


def test_make_logistic_deterministic_and_seed_dependent() -> None:
    a, b, c = (make_logistic(100, 4, rng=s) for s in (5, 5, 6))
    np.testing.assert_array_equal(a.X, b.X)
    np.testing.assert_array_equal(a.y, b.y)
    assert not np.array_equal(a.X, c.X)
    g1, g2 = np.random.default_rng(9), np.random.default_rng(9)
    np.testing.assert_array_equal(make_logistic(50, 3, rng=g1).X, make_logistic(50, 3, rng=g2).X)


def test_make_logistic_labels_follow_a_linear_model() -> None:
    from sklearn.linear_model import LogisticRegression

    ds = make_logistic(3000, 5, rng=11)
    assert ds.y is not None
    acc = LogisticRegression().fit(ds.X[:2000], ds.y[:2000]).score(ds.X[2000:], ds.y[2000:])
    assert acc > 0.75  # random labels would give about 0.5
    noisy = make_logistic(3000, 5, rng=11, noise=0.5)
    assert noisy.y is not None
    acc_noisy = LogisticRegression().fit(noisy.X[:2000], noisy.y[:2000]).score(noisy.X[2000:], noisy.y[2000:])
    assert acc_noisy < 0.6  # flipping with probability 1/2 destroys the signal


def test_make_logistic_secure_rng_and_errors() -> None:
    ds = make_logistic(30, 2, rng="secure")
    _assert_classification(ds)
    with pytest.raises(InvalidParameterError, match="noise"):
        make_logistic(10, 2, rng=0, noise=0.7)
    with pytest.raises(InvalidParameterError, match="feature_norm"):
        make_logistic(10, 2, rng=0, feature_norm=0.0)
    with pytest.raises(InvalidParameterError, match="n_samples"):
        make_logistic(0, 2, rng=0)
    with pytest.raises(InvalidParameterError, match="rng"):
        make_logistic(10, 2, rng=1.5)  # type: ignore[arg-type]


# ------------------------------------------------------------------ make_low_rank_ratings


def test_low_rank_ratings_structure() -> None:
    r = make_low_rank_ratings(60, 40, 3, 0.25, rng=2)
    assert r.shape == (60, 40)
    assert r.n_ratings == round(0.25 * 60 * 40)
    assert r.rows.dtype == np.int64 and r.cols.dtype == np.int64 and r.values.dtype == np.float64
    assert r.rows.min() >= 0 and r.rows.max() < 60 and r.cols.min() >= 0 and r.cols.max() < 40
    pairs = r.rows * 40 + r.cols
    assert np.unique(pairs).size == r.n_ratings  # distinct entries
    assert np.all(np.diff(pairs) > 0)  # sorted by (row, col)
    assert r.density == pytest.approx(0.25)
    assert r.to_sparse().nnz == r.n_ratings


def test_low_rank_ratings_has_the_stated_rank_without_noise() -> None:
    r = make_low_rank_ratings(30, 20, 4, 1.0, rng=8, noise_std=0.0)
    dense = r.to_sparse().toarray()
    s = np.linalg.svd(dense, compute_uv=False)
    assert s[3] > 1e-6 * s[0]
    assert s[4] < 1e-9 * s[0]


def test_low_rank_ratings_deterministic_and_errors() -> None:
    a = make_low_rank_ratings(20, 10, 2, 0.3, rng=4)
    b = make_low_rank_ratings(20, 10, 2, 0.3, rng=4)
    c = make_low_rank_ratings(20, 10, 2, 0.3, rng=5)
    np.testing.assert_array_equal(a.values, b.values)
    np.testing.assert_array_equal(a.rows, b.rows)
    assert not np.array_equal(a.values, c.values)
    with pytest.raises(InvalidParameterError, match="rank"):
        make_low_rank_ratings(5, 4, 5, 0.5, rng=0)
    with pytest.raises(InvalidParameterError, match="density"):
        make_low_rank_ratings(5, 4, 2, 1.5, rng=0)
    with pytest.raises(InvalidParameterError, match="noise_std"):
        make_low_rank_ratings(5, 4, 2, 0.5, rng=0, noise_std=-1.0)


# ------------------------------------------------------------------ make_histogram


@pytest.mark.parametrize("shape", ["zipf", "uniform", "gaussian-mixture"])
def test_histogram_sums_and_shape(shape: str) -> None:
    h = make_histogram(64, 10_000, rng=0, shape=shape)  # type: ignore[arg-type]
    assert h.shape == (64,)
    assert h.dtype == np.int64
    assert h.sum() == 10_000
    assert h.min() >= 0
    np.testing.assert_array_equal(h, make_histogram(64, 10_000, rng=0, shape=shape))  # type: ignore[arg-type]
    assert not np.array_equal(h, make_histogram(64, 10_000, rng=1, shape=shape))  # type: ignore[arg-type]


def test_histogram_shapes_differ_as_documented() -> None:
    z = make_histogram(100, 100_000, rng=3, shape="zipf")
    assert z[0] > 10 * z[-1]  # p_0 / p_99 = 100
    u = make_histogram(100, 100_000, rng=3, shape="uniform")
    assert u.max() < 2 * u.min()
    assert make_histogram(5, 0, rng=0).sum() == 0
    with pytest.raises(InvalidParameterError, match="shape"):
        make_histogram(10, 10, rng=0, shape="normal")  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="n_bins"):
        make_histogram(0, 10, rng=0)


# ------------------------------------------------------------------ UCI Adult (synthetic files)

_ADULT_GOOD_TRAIN = (
    "39, State-gov, 77516, Bachelors, 13, Never-married, Adm-clerical, Not-in-family, White, Male, "
    "2174, 0, 40, United-States, <=50K\n"
    "50, Self-emp-not-inc, 83311, Bachelors, 13, Married-civ-spouse, Exec-managerial, Husband, White, "
    "Male, 0, 0, 13, United-States, >50K\n"
    "38, ?, 215646, HS-grad, 9, Divorced, ?, Not-in-family, White, Male, 0, 0, 40, United-States, <=50K\n"
    "\n"
)
_ADULT_GOOD_TEST = (
    "|1x3 Cross validator\n"
    "25, Private, 226802, 11th, 7, Never-married, Machine-op-inspct, Own-child, Black, Male, 0, 0, 40, "
    "United-States, <=50K.\n"
    "44, Private, 160323, Some-college, 10, Married-civ-spouse, Machine-op-inspct, Husband, Black, Male, "
    "7688, 0, 40, Holand-Netherlands, >50K.\n"
)


def _write_adult(tmp_path: Path, train: str = _ADULT_GOOD_TRAIN, test: str = _ADULT_GOOD_TEST) -> Path:
    (tmp_path / "adult.data").write_text(train)
    (tmp_path / "adult.test").write_text(test)
    return tmp_path


def test_adult_parses_published_format(tmp_path: Path) -> None:
    root = _write_adult(tmp_path)
    ds = load_adult(root)
    assert ds.X.shape == (4, 105)  # the row with '?' is dropped
    np.testing.assert_array_equal(ds.y, [-1.0, 1.0, -1.0, 1.0])
    _assert_classification(ds)
    np.testing.assert_allclose(_row_norms(ds.X), 1.0, atol=TOL)
    assert load_adult(root, split="train").n_samples == 2
    assert load_adult(root, split="test").n_samples == 2
    # raw: numeric attributes unscaled, one-hot columns binary
    raw = load_adult(root, preprocessing="raw")
    names = raw.feature_names
    assert raw.X[0, names.index("age")] == 39.0
    assert raw.X[0, names.index("workclass=State-gov")] == 1.0
    assert raw.X[3, names.index("native-country=Holand-Netherlands")] == 1.0
    assert "feature_l2_norm" not in raw.bounds
    # admm = raw, columns divided by the declared maxima, then each row normalised
    cols = np.ones(raw.n_features)
    for attr, top in ADULT_DECLARED_MAXIMA.items():
        cols[names.index(attr)] = top
    expected = raw.X / cols
    expected /= np.maximum(1.0, _row_norms(expected))[:, None]
    np.testing.assert_allclose(ds.X, expected, rtol=1e-12, atol=1e-15)


def test_adult_data_column_bounds_scale_by_column_maxima(tmp_path: Path) -> None:
    root = _write_adult(tmp_path)
    raw = load_adult(root, preprocessing="raw")
    data = load_adult(root, column_bounds="data")
    top = np.abs(raw.X).max(axis=0)
    expected = raw.X / np.where(top > 0, top, 1.0)
    expected /= np.maximum(1.0, _row_norms(expected))[:, None]
    np.testing.assert_allclose(data.X, expected, rtol=1e-12, atol=1e-15)


def test_adult_declared_bounds_clip_out_of_range_values(tmp_path: Path) -> None:
    big = _ADULT_GOOD_TRAIN.replace("39, State-gov", "250, State-gov")
    root = _write_adult(tmp_path, train=big)
    ds = load_adult(root, split="train", preprocessing="admm")
    raw = load_adult(root, split="train", preprocessing="raw")
    assert raw.X[0, raw.feature_names.index("age")] == 250.0
    # age is clipped to the declared 90 (scaled value 1) before row normalisation
    clipped = raw.X[0].copy()
    for attr, top in ADULT_DECLARED_MAXIMA.items():
        k = raw.feature_names.index(attr)
        clipped[k] = min(clipped[k], top) / top
    np.testing.assert_allclose(ds.X[0], clipped / max(1.0, np.linalg.norm(clipped)), rtol=1e-12)
    assert np.all(_row_norms(ds.X) <= 1 + TOL)


def test_adult_missing_files(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"adult\.data"):
        load_adult(tmp_path / "nowhere")
    (tmp_path / "adult.data").write_text(_ADULT_GOOD_TRAIN)
    assert load_adult(tmp_path, split="train").n_samples == 2  # adult.test not needed
    with pytest.raises(FileNotFoundError, match=r"adult\.test.*UCI Adult format"):
        load_adult(tmp_path, split="all")


@pytest.mark.parametrize(
    ("train", "match"),
    [
        (f"39, State-gov, 77516, Bachelors, {SECRET}\n", "found 5 fields, expected 15"),
        (
            _ADULT_GOOD_TRAIN.replace("39, State-gov", f"{SECRET}, State-gov"),
            r"adult\.data line 1: attribute 'age' is not a finite number",
        ),
        (
            _ADULT_GOOD_TRAIN.replace("State-gov", SECRET),
            r"adult\.data line 1: attribute 'workclass' has a category that is not in",
        ),
        (_ADULT_GOOD_TRAIN.replace(">50K", SECRET), r"adult\.data line 2: the income label"),
    ],
)
def test_adult_malformed_input_is_reported_without_values(tmp_path: Path, train: str, match: str) -> None:
    root = _write_adult(tmp_path, train=train)
    with pytest.raises(DatasetFormatError, match=match) as info:
        load_adult(root)
    assert SECRET not in str(info.value)
    assert "UCI Adult format" in str(info.value)
    assert isinstance(info.value, ValueError)


def test_adult_invalid_options(tmp_path: Path) -> None:
    root = _write_adult(tmp_path)
    for kwargs in ({"split": "dev"}, {"preprocessing": "std"}, {"column_bounds": "x"}, {"categories": 1}):
        with pytest.raises(InvalidParameterError):
            load_adult(root, **kwargs)


# ------------------------------------------------------------------ UCI Adult (reference files)


@functools.cache
def _adult(root: str, **kwargs: str) -> Dataset:
    return load_adult(root, **kwargs)  # type: ignore[arg-type]


def test_adult_reference_shape_and_bounds(shared_datasets: Path) -> None:
    ds = _adult(str(shared_datasets / "adult"))
    assert ds.X.shape == (45_222, 105)
    _assert_classification(ds)
    np.testing.assert_allclose(_row_norms(ds.X), 1.0, atol=TOL)  # every row has >= 8 ones
    assert int(np.sum(ds.y == 1.0)) == 11_208
    assert ds.X.min() >= 0.0
    # the full schema keeps the never-observed 'Never-worked' column (all zeros)
    assert not ds.X[:, ds.feature_names.index("workclass=Never-worked")].any()
    assert ds.X[:, ds.feature_names.index("native-country=Holand-Netherlands")].sum() > 0
    assert len(set(ds.feature_names)) == 105


def test_adult_reference_splits_and_variants(shared_datasets: Path) -> None:
    root = str(shared_datasets / "adult")
    assert _adult(root, split="train").X.shape == (30_162, 105)
    test = load_adult(root, split="test", categories="observed")
    assert test.X.shape == (15_060, 103)  # no Never-worked, no Holand-Netherlands
    observed = _adult(root, categories="observed")
    assert observed.X.shape == (45_222, 104)
    assert "workclass=Never-worked" not in observed.feature_names
    data = _adult(root, column_bounds="data")
    assert np.all(_row_norms(data.X) <= 1 + TOL)
    # the published maxima equal the declared ones except fnlwgt (1,490,400 < 1.5e6), so the two
    # variants are close but not equal
    declared = _adult(root)
    assert not np.array_equal(data.X, declared.X)
    np.testing.assert_allclose(data.X, declared.X, atol=1e-2)
    raw = _adult(root, preprocessing="raw")
    assert raw.X[:, raw.feature_names.index("age")].max() == 90.0


# ------------------------------------------------------------------ MovieLens


def test_movielens_100k_reference(shared_datasets: Path) -> None:
    folder = shared_datasets / "movielens-100k"
    r = load_movielens(folder)
    assert r.shape == (943, 1682)
    assert r.n_ratings == 100_000
    assert r.rows.min() == 0 and r.cols.min() == 0
    assert np.unique(r.rows).size == 943 and np.unique(r.cols).size == 1682  # contiguous
    # 100K ids are exactly 1..943 / 1..1682, so the index is id - 1
    np.testing.assert_array_equal(r.row_ids, np.arange(1, 944))
    np.testing.assert_array_equal(r.col_ids, np.arange(1, 1683))
    assert set(np.unique(r.values).tolist()) == {1.0, 2.0, 3.0, 4.0, 5.0}
    assert r.bounds == {"rating_min": 1.0, "rating_max": 5.0}
    first = (folder / "u.data").read_text().split("\n", 1)[0].split("\t")
    assert (r.rows[0] + 1, r.cols[0] + 1, r.values[0]) == (int(first[0]), int(first[1]), float(first[2]))
    same = load_movielens(folder / "u.data")
    np.testing.assert_array_equal(same.values, r.values)


def test_movielens_ratings_dat_reindexing(tmp_path: Path) -> None:
    f = tmp_path / "ratings.dat"
    f.write_text("10::500::4::978300760\n3::7::3.5::978302109\n10::7::5::978301968\n42::1000::1::978300275\n")
    r = load_movielens(tmp_path)
    assert r.shape == (3, 3)  # ids range to 42 / 1000, but 3 users and 3 items occur
    np.testing.assert_array_equal(r.row_ids, [3, 10, 42])
    np.testing.assert_array_equal(r.col_ids, [7, 500, 1000])
    np.testing.assert_array_equal(r.rows, [1, 0, 1, 2])
    np.testing.assert_array_equal(r.cols, [1, 0, 0, 2])
    np.testing.assert_array_equal(r.values, [4.0, 3.5, 5.0, 1.0])
    assert r.row_ids is not None
    np.testing.assert_array_equal(r.row_ids[r.rows], [10, 3, 10, 42])
    assert r.bounds == {"rating_min": 0.5, "rating_max": 5.0}


def test_movielens_missing(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"u\.data.*ratings\.dat"):
        load_movielens(tmp_path)
    with pytest.raises(FileNotFoundError, match="not found"):
        load_movielens(tmp_path / "u.data")


@pytest.mark.parametrize(
    ("name", "text", "match"),
    [
        (
            "u.data",
            f"1\t2\t3\t881250949\n1\t{SECRET}\t3\t881250949\n",
            r"u\.data line 2: a field is not a number",
        ),
        ("u.data", "1\t2\t3\t881250949\n1\t2\t3\n", r"u\.data line 2: found 3 fields, expected 4"),
        ("u.data", "1\t2\t3\t881250949\n1\t2\t7\t881250949\n", r"u\.data rating 2: rating outside"),
        ("u.data", "0\t2\t3\t881250949\n", r"u\.data rating 1: user and item ids must be positive"),
        (
            "ratings.dat",
            f"1::2::3::97\n{SECRET}::2::3::97\n",
            r"ratings\.dat line 2: a field is not a number",
        ),
        ("ratings.dat", "", r"ratings\.dat: contains no ratings"),
    ],
)
def test_movielens_malformed(tmp_path: Path, name: str, text: str, match: str) -> None:
    f = tmp_path / name
    f.write_text(text)
    with pytest.raises(DatasetFormatError, match=match) as info:
        load_movielens(f)
    assert SECRET not in str(info.value)
    assert "MovieLens" in str(info.value)


# ------------------------------------------------------------------ scikit-learn sets


def test_breast_cancer() -> None:
    ds = load_breast_cancer()
    assert ds.X.shape == (569, 30)
    _assert_classification(ds)
    assert int(np.sum(ds.y == 1.0)) == 212  # malignant
    assert ds.X.min() >= 0.0


@pytest.mark.parametrize("digit", [0, 1, 7])
def test_digits_one_vs_rest(digit: int) -> None:
    from sklearn.datasets import load_digits

    ds = load_digits_one_vs_rest(digit)
    target = load_digits().target
    assert ds.X.shape == (1797, 64)
    _assert_classification(ds)
    np.testing.assert_array_equal(ds.y == 1.0, target == digit)
    # divide by the declared 16, then normalise rows (no data statistic involved)
    pixels = load_digits().data / 16.0
    np.testing.assert_allclose(ds.X, pixels / np.maximum(1.0, _row_norms(pixels))[:, None], rtol=1e-12)


def test_digits_invalid_digit() -> None:
    with pytest.raises(InvalidParameterError, match="digit"):
        load_digits_one_vs_rest(10)
    with pytest.raises(InvalidParameterError, match="digit"):
        load_digits_one_vs_rest(-1)
