"""The options object of the DP gradient methods (GradientOptions family) and the max_iter vocabulary."""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest

from dpopt.exceptions import InvalidParameterError
from dpopt.problems import DataBounds, ERMProblem
from dpopt.solvers.gradient import dp_gd, dp_gdws, dp_heavy_ball, dp_online_gdws
from dpopt.solvers.gradient_options import (
    GDOptions,
    GDwSOptions,
    GradientOptions,
    MAGOptions,
    OnlineGDwSOptions,
)
from dpopt.solvers.minimize import method_spec, minimize
from dpopt.solvers.multistage import dp_mag

PROB = ERMProblem("logistic", DataBounds(feature_norm=1.0), l2_penalty=0.05)


def _data(n: int = 60, d: int = 4) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, d))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    return X, np.where(X[:, 0] > 0, 1.0, -1.0)


def test_options_object_equals_keywords():
    X, y = _data()
    kw = dict(budget=(1.0, 1e-5), rng=2)
    a = dp_gd(PROB, X, y, max_iter=8, batch_size=20, step="inverse_L", average="suffix", **kw)
    opts = GDOptions(max_iter=8, batch_size=20, step="inverse_L", average="suffix")
    b = dp_gd(PROB, X, y, options=opts, **kw)
    assert np.array_equal(a.x, b.x) and a.privacy == b.privacy and a.parameters == b.parameters
    # keywords override the object's fields
    c = dp_mag(PROB, X, y, options=MAGOptions(max_iter=50, p=2), max_iter=8, **kw)
    d = dp_mag(PROB, X, y, max_iter=8, p=2, **kw)
    assert np.array_equal(c.x, d.x) and c.parameters["p"] == 2


def test_options_are_checked_once_when_built():
    with pytest.raises(InvalidParameterError, match="smoothing"):
        GDwSOptions(smoothing=0.0)
    with pytest.raises(InvalidParameterError, match="max_iter"):
        GradientOptions(max_iter=0)
    with pytest.raises(InvalidParameterError, match="average"):
        GDOptions(average="mean")
    opts = GDwSOptions(max_iter=5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.max_iter = 6  # type: ignore[misc]


def test_unknown_keyword_and_wrong_options_type():
    X, y = _data()
    with pytest.raises(TypeError, match=r"dp_gdws.*'bucket_size'"):
        dp_gdws(PROB, X, y, budget=(1.0, 0.0), rng=0, bucket_size=3)
    with pytest.raises(InvalidParameterError, match="options: expected a GDOptions"):
        dp_gd(PROB, X, y, budget=(1.0, 0.0), rng=0, options=GDwSOptions())


def test_old_iteration_names_warn_and_run_the_same():
    X, y = _data()
    new = dp_heavy_ball(PROB, X, y, budget=(1.0, 0.0), rng=1, max_iter=6)
    with pytest.warns(DeprecationWarning, match=r"dp_heavy_ball.*iterations=.*max_iter"):
        old = dp_heavy_ball(PROB, X, y, budget=(1.0, 0.0), rng=1, iterations=6)
    with pytest.warns(DeprecationWarning, match="max_iterations"):
        old2 = dp_heavy_ball(PROB, X, y, budget=(1.0, 0.0), rng=1, max_iterations=6)
    assert np.array_equal(new.x, old.x) and np.array_equal(new.x, old2.x) and new.nit == old.nit == 6
    with pytest.raises(InvalidParameterError, match="either max_iter or iterations"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            dp_heavy_ball(PROB, X, y, budget=(1.0, 0.0), rng=1, iterations=6, max_iter=6)
    with pytest.raises(TypeError):  # the one-pass method never had an iteration count
        dp_online_gdws(PROB, X, y, budget=(1.0, 0.0), rng=1, iterations=6)


def test_minimize_maps_max_iter_and_the_old_names():
    X, y = _data()
    assert method_spec("dp_gd").iteration_option == "max_iter"
    a = minimize(PROB, X, y, method="dp_gdws", budget=(1.0, 0.0), rng=3, max_iter=7)
    with pytest.warns(DeprecationWarning, match=r"minimize.*iterations"):
        b = minimize(PROB, X, y, method="dp_gdws", budget=(1.0, 0.0), rng=3, iterations=7)
    assert np.array_equal(a.x, b.x) and a.nit == b.nit == 7
    # add/remove fills in a default number of steps only when none was given (also by an old name)
    with pytest.warns(DeprecationWarning):
        c = minimize(PROB, X, y, method="dp_sgd", budget=(1.0, 1e-5), rng=3, neighbouring="add_remove",
                     declared_size=60, iterations=9)  # fmt: skip
    assert c.nit == 9


def test_spec_reads_the_options_dataclass():
    opts = method_spec("dp_online_gdws").options()
    fields = {f.name for f in dataclasses.fields(OnlineGDwSOptions)}
    assert fields | {"options"} == set(opts)
    mi = method_spec("dp_mag").options()["max_iter"]
    assert (mi.low, mi.high, mi.default) == (1, None, 1000)
    sm = method_spec("dp_gdws").options()["smoothing"]
    assert (sm.low, sm.high, sm.low_open, sm.high_open) == (0, 1, True, False)
    assert method_spec("dp_gd").options()["grad_scale"].default == "mean"
