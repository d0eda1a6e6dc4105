"""Property-based checks of argument validation at the public boundary.

Invalid budgets, shapes and non-finite data must raise the documented error type, and messages must
never contain the offending data values.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpopt._validation import check_positive
from dpopt.accounting import Budget, LaplaceEvent, make_accountant
from dpopt.exceptions import DPOptError, InvalidParameterError
from dpopt.mechanisms import GaussianMechanism, LaplaceMechanism, ReportNoisyMin
from dpopt.randomness import SecureRNG, check_rng, spawn

bad_epsilon = st.one_of(
    st.floats(max_value=0.0, allow_nan=False),
    st.just(math.nan),
    st.just(math.inf),
    st.just(-math.inf),
)
bad_delta = st.one_of(
    st.floats(max_value=-1e-300, allow_nan=False, allow_infinity=True),
    st.floats(min_value=1.0, allow_nan=False, allow_infinity=True),
    st.just(math.nan),
)


@settings(max_examples=60, deadline=None)
@given(bad_epsilon)
def test_invalid_epsilon_rejected(eps: float) -> None:
    with pytest.raises(InvalidParameterError, match="epsilon"):
        Budget(eps, 1e-5)


@settings(max_examples=60, deadline=None)
@given(bad_delta)
def test_invalid_delta_rejected(delta: float) -> None:
    with pytest.raises(InvalidParameterError, match="delta"):
        Budget(1.0, delta)


def test_non_numeric_budget_rejected() -> None:
    with pytest.raises(InvalidParameterError, match="real number"):
        Budget("1", 0.0)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError):
        Budget(True, 0.0)  # type: ignore[arg-type]


# A recognisable secret value: it must never appear in any error message.
SECRET = 987654.321


@settings(max_examples=40, deadline=None)
@given(
    st.integers(min_value=1, max_value=20),
    st.integers(min_value=0, max_value=19),
    st.sampled_from([math.nan, math.inf, -math.inf]),
)
def test_nonfinite_data_rejected_without_echo(n: int, pos: int, bad: float) -> None:
    data = np.full(n, SECRET)
    data[pos % n] = bad
    for mech in (LaplaceMechanism(1.0), GaussianMechanism(1.0)):
        with pytest.raises(InvalidParameterError) as info:
            mech.release(data, rng=0)
        assert "987654" not in str(info.value)
        assert "nan" not in str(info.value).replace("NaN or infinite", "")


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=2, max_size=3))
def test_wrong_shape_scores_rejected(shape: list[int]) -> None:
    with pytest.raises(InvalidParameterError, match="1-d") as info:
        ReportNoisyMin(1.0).release(np.full(shape, SECRET), rng=0)
    assert "987654" not in str(info.value)


@pytest.mark.parametrize("bad", [1.5, -3, "seed", [1, 2], object()])
def test_bad_rng_rejected(bad: object) -> None:
    with pytest.raises(InvalidParameterError, match="rng"):
        check_rng(bad)  # type: ignore[arg-type]


def test_rng_kinds() -> None:
    assert isinstance(check_rng("secure"), SecureRNG)
    g = np.random.default_rng(0)
    assert check_rng(g) is g
    a, b = check_rng(5).random(3), check_rng(5).random(3)
    assert np.array_equal(a, b)
    assert not np.array_equal(check_rng(None).random(3), check_rng(None).random(3))


def test_spawn_depends_only_on_parent_and_key() -> None:
    c1 = spawn(11, ["a", "b", 3])
    c2 = spawn(11, [3, "a", "b"])
    assert np.array_equal(c1[0].random(4), c2[1].random(4))  # type: ignore[union-attr]
    assert np.array_equal(c1[2].random(4), c2[0].random(4))  # type: ignore[union-attr]
    c3 = spawn(12, ["a"])
    assert not np.array_equal(spawn(11, ["a"])[0].random(4), c3[0].random(4))  # type: ignore[union-attr]
    assert all(isinstance(c, SecureRNG) for c in spawn("secure", [1, 2]))


def test_errors_share_a_base_class() -> None:
    acct = make_accountant("basic", budget=Budget(0.5))
    with pytest.raises(DPOptError):
        acct.compose(LaplaceEvent(1.0))
    with pytest.raises(InvalidParameterError, match="count"):
        make_accountant("pld").compose(LaplaceEvent(1.0), 0)
    with pytest.raises(InvalidParameterError, match="event"):
        make_accountant("pld").compose("laplace")  # type: ignore[arg-type]


# ------------------------------------------------------------------ the one checked conversion
@pytest.mark.parametrize(
    ("value", "where"),
    [
        ([1.0, "SECRET42", 3.0], "entry 1"),
        ([[1.0, 2.0], [3.0, "SECRET42"]], "row 1, column 1"),
        ([[1.0, 2.0], [3.0]], "row 1 has 1 entries"),
        ("SECRET42", "is a string"),
        ({"a": "SECRET42"}, "is a dict"),
        ([1.0, complex(2, 1)], "entry 1 is a complex number"),
        ([[1.0, math.nan]], "row 0, column 1 is the first"),
    ],
)
def test_as_float_array_names_the_cell_never_the_value(value: object, where: str) -> None:
    from dpopt._validation import as_float_array

    with pytest.raises(InvalidParameterError) as info:
        as_float_array(value, "histogram")
    msg = str(info.value)
    assert msg.startswith("histogram: ") and where in msg
    assert "SECRET42" not in msg and "nan" not in msg.lower().replace("nan or", "")


def test_as_float_array_checks_ndim_and_accepts_numbers() -> None:
    from dpopt._validation import as_float_array

    assert as_float_array([1, 2], "x", ndim=1).dtype == np.float64
    assert as_float_array([[1, 2]], "x", ndim=(1, 2)).shape == (1, 2)
    with pytest.raises(InvalidParameterError, match="expected a 1-d array, got shape"):
        as_float_array([[1.0]], "x", ndim=1)


def test_parse_numeric_table_reports_line_and_column() -> None:
    from dpopt._validation import parse_numeric_table

    assert parse_numeric_table("1,2\n# note\n3,4\n", "f", delimiter=",").tolist() == [[1, 2], [3, 4]]
    with pytest.raises(InvalidParameterError, match=r"f: line 3, column 2 is not a number") as info:
        parse_numeric_table("1 2\n\n3 SECRET42\n", "f")
    assert "SECRET42" not in str(info.value)
    with pytest.raises(InvalidParameterError, match="line 2 has 1 fields but line 1 has 2"):
        parse_numeric_table("1,2\n3\n", "f", delimiter=",")
    with pytest.raises(InvalidParameterError, match="line 1, column 2 is empty"):
        parse_numeric_table("1,,2\n", "f", delimiter=",")
    with pytest.raises(InvalidParameterError, match="contains no numbers"):
        parse_numeric_table("# only a comment\n", "f")


def test_check_memory_refuses_with_the_estimate() -> None:
    from dpopt._validation import check_memory

    check_memory(1024, "a small table", fix="n/a")
    with pytest.raises(InvalidParameterError, match=r"max_iter=10\*\*12: the history would need ~7.28 TiB"):
        check_memory(8 * 10**12, "max_iter=10**12: the history", fix="use fewer rounds")


# ------------------------------------------------------------------ errors carry structure


def test_no_decision_is_taken_on_an_error_message() -> None:
    """Errors are told apart by type and fields (``param``, ``hint``, ``requested``), never by their
    text: the house check (tools/house_figures.py) finds no such branch anywhere under src/dpopt."""
    import importlib.util

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("house_figures_check", root / "tools" / "house_figures.py")
    assert spec is not None and spec.loader is not None
    house = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(house)
    assert house.error_figures(house.load_modules(root))["error_text_control_flow"] == {}


def test_errors_carry_param_and_hint_and_keep_their_text() -> None:
    import pickle

    from dpopt.exceptions import BudgetExceededError, Hint, Setting

    with pytest.raises(InvalidParameterError) as info:
        check_positive(-1.0, "epsilon")
    assert str(info.value) == "epsilon: must be > 0"
    assert info.value.param == "epsilon" and info.value.reason == "must be > 0" and info.value.hint is None
    hint = Hint("declare a larger bound or pass {0}", Setting("clip", True, owner="DataBounds"))
    err = DPOptError("3 of 9 rows are too long", hint=hint)
    assert str(err) == "3 of 9 rows are too long; declare a larger bound or pass DataBounds(..., clip=True)"
    assert (
        err.render(spelling=lambda s: f"--{s.param}")
        == "3 of 9 rows are too long; declare a larger bound or pass --clip"
    )
    assert err.render(spelling=lambda s: None) == "3 of 9 rows are too long"  # a layer without the setting
    again = pickle.loads(pickle.dumps(err))  # errors cross process boundaries (engines, workers)
    assert str(again) == str(err) and again.hint == hint
    over = BudgetExceededError("over", requested=2.0, budget=1.0, remaining=0.5, delta=1e-6)
    over = pickle.loads(pickle.dumps(over))
    assert (over.requested, over.budget, over.remaining, over.delta) == (2.0, 1.0, 0.5, 1e-6)


def test_third_party_errors_are_told_apart_by_converting_not_by_their_text() -> None:
    from dpopt._validation import numeric_or_refuse

    def leaky(value: object) -> object:  # a third party quoting the data in its message
        raise ValueError(f"bad input {value!r}")

    secret = np.array([[1.25 + 1j, 7.5]])
    with pytest.raises(InvalidParameterError, match=r"^X: Complex data not supported") as info:
        numeric_or_refuse(lambda: leaky(secret), X=secret)
    assert "1.25" not in str(info.value)
    text = np.array([[0.5, "s3cret"]], dtype=object)
    with pytest.raises(InvalidParameterError, match=r"^X: row 0, column 1 is text") as info:
        numeric_or_refuse(lambda: leaky(text), X=text)
    assert "s3cret" not in str(info.value)
