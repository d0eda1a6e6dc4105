"""Records in: declared schemas, encoding, marginals without the full domain (issue 16 b)."""

from __future__ import annotations

import numpy as np
import pytest

from dpopt.accounting import Budget
from dpopt.exceptions import InvalidParameterError
from dpopt.linear_queries import answer, optimize_strategy
from dpopt.linear_queries import workloads as wl
from dpopt.linear_queries.records import Records, Schema
from dpopt.linear_queries.union import optimize_union, product_marginals

PLANTED = 987654  # a value that must never appear in a message


@pytest.fixture
def schema() -> Schema:
    return Schema.from_dict({"age": range(17, 27), "sex": ["F", "M"], "hours": 5})


def _table(n: int = 200, seed: int = 0) -> dict[str, np.ndarray]:
    g = np.random.default_rng(seed)
    return {
        "age": g.integers(17, 27, n),
        "sex": g.choice(["F", "M"], n),
        "hours": g.integers(0, 5, n),
        "ignored": np.zeros(n),
    }


def test_inputs_agree_and_marginals_match_the_histogram(schema: Schema, tmp_path) -> None:
    table = _table()
    rec = schema.records(table)
    x = rec.histogram().reshape(schema.shape)
    assert x.sum() == 200
    np.testing.assert_array_equal(rec.marginal((0, 2)), x.sum(axis=1))
    np.testing.assert_array_equal(rec.marginal((2, 0)), x.sum(axis=1))  # sorted axes
    assert float(rec.marginal(())) == 200
    # CSV (strings), structured array and (if installed) pandas give the same codes
    path = tmp_path / "r.csv"
    with path.open("w") as fh:
        fh.write("hours,age,sex\n")
        for h, a, s in zip(table["hours"], table["age"], table["sex"], strict=True):
            fh.write(f"{h},{a},{s}\n")
    np.testing.assert_array_equal(schema.records(path).codes, rec.codes)
    arr = np.zeros(200, dtype=[("age", int), ("sex", "U1"), ("hours", float)])
    for k in ("age", "sex", "hours"):
        arr[k] = table[k]
    np.testing.assert_array_equal(schema.records(arr).codes, rec.codes)
    pd = pytest.importorskip("pandas")
    np.testing.assert_array_equal(schema.records(pd.DataFrame(table)).codes, rec.codes)


def test_out_of_domain_is_refused_without_values(schema: Schema) -> None:
    table = _table()
    table["age"][3] = PLANTED
    with pytest.raises(InvalidParameterError, match="outside the declared domain") as exc:
        schema.records(table)
    assert str(PLANTED) not in str(exc.value) and "'age'" in str(exc.value)
    clipped = schema.records(table, clip=True)
    assert clipped.codes[3, 0] == 9  # moved to the top of the range
    bad = _table()
    bad["sex"] = bad["sex"].astype(object)
    bad["sex"][0] = f"X{PLANTED}"
    for clip in (False, True):
        with pytest.raises(InvalidParameterError, match="not among its 2 declared values") as exc:
            schema.records(bad, clip=clip)
        assert str(PLANTED) not in str(exc.value)
    frac = _table()
    frac["hours"] = frac["hours"] + 0.5
    with pytest.raises(InvalidParameterError, match="integer"):
        schema.records(frac)
    with pytest.raises(InvalidParameterError, match="no column"):
        schema.records({"age": [20]})
    assert "codes" not in repr(schema.records(_table()))


def test_answer_from_records_equals_answer_from_histogram(schema: Schema) -> None:
    rec = schema.records(_table())
    x = rec.histogram()
    b = Budget(1.0, 1e-6)
    W = wl.marginals(schema.shape, 2)  # closed form: records go marginal by marginal
    r1 = answer(W, rec, budget=b, rng=0)
    r2 = answer(W, _table(), schema=schema, budget=b, rng=0)
    np.testing.assert_allclose(r1.values, r2.values)
    dense = answer(W, x, budget=b, rng=1)
    assert r1.expected_error == pytest.approx(dense.expected_error, rel=1e-9)
    U = product_marginals(schema.shape, 2, queries={0: "prefix"})
    res = optimize_union(U)
    a = answer(U, rec, budget=b, rng=3, strategy=res)
    c = answer(U, x, budget=b, rng=3, strategy=res)
    np.testing.assert_allclose(a.values, c.values)
    P = wl.prefix(schema.domain_size)  # an unstructured workload: the histogram is built
    s = optimize_strategy(P)
    np.testing.assert_allclose(
        answer(P, rec, budget=b, rng=0, strategy=s).values, answer(P, x, budget=b, rng=0, strategy=s).values
    )
    with pytest.raises(InvalidParameterError, match="cells"):
        answer(wl.prefix(7), rec, budget=b, rng=0)


def test_census_scale_records_never_form_the_domain() -> None:
    shape = (60, 2, 7, 10, 5, 20, 8)  # 6.7e6 cells (> 2**22: no dense estimate)
    schema = Schema.from_dict({f"a{i}": n for i, n in enumerate(shape)})
    g = np.random.default_rng(0)
    rec = schema.records({f"a{i}": g.integers(0, n, 2000) for i, n in enumerate(shape)})
    assert isinstance(rec, Records)
    W = product_marginals(shape, 2, queries={0: "all_range"})
    out = answer(W, rec, budget=Budget(1.0, 1e-6), rng=0)
    assert out.values.shape == (W.n_queries,)
    assert out.histogram_estimate.shape == (0,)
    # the sex x a2 marginal (part 9: attributes (1, 2)) is close to the truth
    truth = rec.marginal((1, 2)).reshape(-1)
    start = sum(p.n_queries for p in W.parts[:9])
    est = out.values[start : start + truth.size]
    assert np.sqrt(np.mean((est - truth) ** 2)) < 10 * np.sqrt(out.expected_error_per_query)
