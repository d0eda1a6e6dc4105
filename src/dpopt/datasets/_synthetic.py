"""Synthetic generators: logistic-regression data, low-rank rating matrices, count histograms."""

from __future__ import annotations

from typing import Literal

import numpy as np
from numpy.typing import NDArray
from scipy.special import ndtr

from dpopt._validation import check_int, check_nonneg, check_positive
from dpopt.datasets._types import Dataset, Ratings, _check_choice, _scale_rows
from dpopt.exceptions import InvalidParameterError
from dpopt.randomness import RNGLike, as_generator

__all__ = ["make_histogram", "make_logistic", "make_low_rank_ratings"]


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
