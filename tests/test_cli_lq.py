"""Tests of the linear-query commands ``dpopt strategy`` and ``dpopt answer`` (through ``main``)."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dpopt.cli import main
from dpopt.linear_queries import StrategyResult, workloads

N = 32
SPEC = f"prefix:n={N}"


def _one_error_line(err: str) -> str:
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("dpopt: error: ")
    return lines[0]


def _rows(path: Path) -> list[list[str]]:
    with path.open(newline="") as fh:
        return list(csv.reader(fh))


@pytest.fixture
def strategy_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    assert main(["strategy", SPEC, "--out", str(tmp_path / "prefix")]) == 0
    capsys.readouterr()
    return tmp_path / "prefix.npz"  # the suffix is added


@pytest.fixture
def histogram(tmp_path: Path) -> Path:
    path = tmp_path / "hist.txt"
    np.savetxt(path, np.arange(N), fmt="%d")
    return path


def test_strategy_saves_a_reloadable_strategy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "s.npz"
    assert main(["strategy", SPEC, "--out", str(out), "--tol", "1e-3"]) == 0
    stdout = capsys.readouterr().out
    for word in ("objective", "certified", "gap", "iterations", "CPU seconds", "status", "converged"):
        assert word in stdout
    assert str(out) in stdout
    result = StrategyResult.load(out, workload=workloads.from_spec(SPEC))
    assert result.shape[1] == N and result.gap <= 1e-3


def test_strategy_from_a_workload_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    W = np.tril(np.ones((8, 8)))
    wfile = tmp_path / "W.npy"
    np.save(wfile, W)
    out = tmp_path / "w.npz"
    assert main(["strategy", str(wfile), "--out", str(out), "--method", "newton"]) == 0
    assert StrategyResult.load(out, workload=workloads.load(wfile)).shape[1] == 8
    assert "newton" in capsys.readouterr().out


def test_answer_writes_csv_and_prints_privacy(
    strategy_file: Path, histogram: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "answers.csv"
    argv = ["answer", SPEC, str(histogram), "--epsilon", "1", "--delta", "1e-6"]
    argv += ["--strategy", str(strategy_file), "--seed", "3", "--out", str(out)]
    assert main(argv) == 0
    stdout = capsys.readouterr().out
    assert "(ε=1, δ=1e-06)-DP [pld, add_remove]" in stdout
    assert "expected total squared error" in stdout
    rows = _rows(out)
    assert rows[0] == ["query", "answer", "expected_std"]
    assert len(rows) == 1 + N  # one row per prefix query
    assert [int(r[0]) for r in rows[1:]] == list(range(N))
    std = np.array([float(r[2]) for r in rows[1:]])
    total = float(stdout.split("expected total squared error: ")[1].split()[0])
    assert np.sum(std**2) == pytest.approx(total, rel=1e-4)

    # the same seed reproduces the answers; replace-one needs more noise for the same budget
    again = tmp_path / "again.csv"
    assert main([*argv[:-1], str(again)]) == 0
    assert _rows(again) == rows
    assert main([*argv[:-1], str(again), "--neighbouring", "replace_one", "--overwrite"]) == 0
    assert "[pld, replace_one]" in capsys.readouterr().out
    std_ro = np.array([float(r[2]) for r in _rows(again)[1:]])
    ratio = std_ro / std  # the noise scales with the (larger) replace-one sensitivity
    assert ratio.min() > 1.0 and np.ptp(ratio) < 1e-6


def test_answer_without_strategy_or_seed_and_per_query(
    histogram: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "a.csv"
    argv = ["answer", "all_range:n=8", str(histogram), "--epsilon", "0.5", "--delta", "1e-5"]
    np.savetxt(histogram, np.arange(8)[None, :], fmt="%d", delimiter=" ")  # one row works too
    assert main([*argv, "--out", str(out), "--per-query"]) == 0
    stdout = capsys.readouterr().out
    assert "expected error per query (first 20 of 36)" in stdout
    assert "36 queries" in stdout
    assert len(_rows(out)) == 1 + 36
    first = _rows(out)
    assert main([*argv, "--out", str(out), "--overwrite"]) == 0  # fresh entropy: different noise
    assert _rows(out) != first


def test_answer_never_overwrites_a_release_without_overwrite(
    strategy_file: Path,
    histogram: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import dpopt.linear_queries as lq

    out = tmp_path / "answers.csv"
    argv = [
        "answer",
        SPEC,
        str(histogram),
        "--epsilon",
        "1",
        "--delta",
        "1e-6",
        "--strategy",
        str(strategy_file),
    ]
    assert main([*argv, "--out", str(out)]) == 0
    paid = out.read_bytes()
    capsys.readouterr()

    calls: list[object] = []
    real_answer = lq.answer

    def counting_answer(*a: Any, **k: Any) -> Any:
        calls.append(a)
        return real_answer(*a, **k)

    monkeypatch.setattr(lq, "answer", counting_answer)
    assert main([*argv, "--out", str(out)]) == 2  # refused: nothing computed, drawn or spent
    line = _one_error_line(capsys.readouterr().err)
    assert "exists" in line and "--overwrite" in line
    assert calls == [] and out.read_bytes() == paid
    assert sorted(p.name for p in tmp_path.iterdir()) == ["answers.csv", "hist.txt", "prefix.npz"]

    assert main([*argv, "--out", str(out), "--overwrite"]) == 0  # asked for: replaced
    assert len(calls) == 1 and out.read_bytes() != paid
    assert sorted(p.name for p in tmp_path.iterdir()) == ["answers.csv", "hist.txt", "prefix.npz"]


def test_answer_keeps_a_release_when_the_file_appears_meanwhile(
    strategy_file: Path,
    histogram: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import dpopt.linear_queries as lq

    out = tmp_path / "answers.csv"
    real_answer = lq.answer

    def answer_then_someone_writes_out(*a: object, **k: object) -> object:
        result = real_answer(*a, **k)  # type: ignore[arg-type]
        out.write_text("someone else's file\n")
        return result

    monkeypatch.setattr(lq, "answer", answer_then_someone_writes_out)
    argv = [
        "answer",
        SPEC,
        str(histogram),
        "--epsilon",
        "1",
        "--delta",
        "1e-6",
        "--strategy",
        str(strategy_file),
    ]
    assert main([*argv, "--seed", "1", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert out.read_text() == "someone else's file\n"  # not overwritten
    kept = [p for p in tmp_path.glob("answers-*.csv")]
    assert len(kept) == 1 and str(kept[0]) in captured.err and str(kept[0]) in captured.out
    assert len(_rows(kept[0])) == 1 + N  # the paid-for release is not lost
    assert not list(tmp_path.glob(".*partial"))


@pytest.mark.parametrize(
    ("argv", "expect"),
    [
        (["strategy", "prefx:n=8", "--out", "{tmp}/s.npz"], "unknown workload 'prefx'"),
        (["strategy", "prefix:n=x", "--out", "{tmp}/s.npz"], "bad value"),
        (["strategy", "ranges:m=8,n=8", "--out", "{tmp}/s.npz"], "needs a seed"),
        (["strategy", "{tmp}/missing.npy", "--out", "{tmp}/s.npz"], "workload file not found"),
        (["strategy", "{tmp}/garbage.npy", "--out", "{tmp}/s.npz"], "garbage.npy"),
        (["strategy", SPEC, "--out", "{tmp}/s.npz", "--method", "magic"], "--method"),
        (["strategy", SPEC, "--out", "{tmp}/s.npz", "--tol", "-1"], "tol"),
        (["strategy", SPEC, "--out", "{tmp}/no/such/dir/s.npz"], "No such file"),
        (["strategy", SPEC], "--out"),
        (
            ["answer", SPEC, "{tmp}/missing.txt", "--epsilon", "1", "--delta", "1e-6"],
            "histogram file not found",
        ),
        (["answer", SPEC, "{tmp}/nan.txt", "--epsilon", "1", "--delta", "1e-6"], "NaN"),
        (["answer", SPEC, "{tmp}/neg.txt", "--epsilon", "1", "--delta", "1e-6"], "non-negative integer"),
        (["answer", SPEC, "{tmp}/frac.txt", "--epsilon", "1", "--delta", "1e-6"], "non-negative integer"),
        (["answer", SPEC, "{tmp}/short.txt", "--epsilon", "1", "--delta", "1e-6"], "expected length 32"),
        (["answer", SPEC, "{tmp}/words.csv", "--epsilon", "1", "--delta", "1e-6"], "numeric counts"),
        (["answer", SPEC, "{tmp}/empty.txt", "--epsilon", "1", "--delta", "1e-6"], "numeric counts"),
        (["answer", SPEC, "{tmp}/ok.txt", "--epsilon", "0", "--delta", "1e-6"], "epsilon"),
        (["answer", SPEC, "{tmp}/ok.txt", "--epsilon", "1", "--delta", "0"], "δ > 0"),
        (["answer", SPEC, "{tmp}/ok.txt", "--epsilon", "nan", "--delta", "1e-6"], "epsilon"),
        (["answer", SPEC, "{tmp}/ok.txt", "--epsilon", "1"], "--delta"),
        (["answer", SPEC, "{tmp}/ok.txt", "--epsilon", "1", "--delta", "1e-6", "--seed", "-1"], "seed"),
        (["answer", SPEC, "{tmp}/ok.txt", "--epsilon", "1", "--delta", "1e-6", "--seed", "1.5"], "seed"),
        (
            ["answer", SPEC, "{tmp}/ok.txt", "--epsilon", "1", "--delta", "1e-6", "--neighbouring", "x"],
            "--neighbouring",
        ),
        (
            [
                "answer",
                SPEC,
                "{tmp}/ok.txt",
                "--epsilon",
                "1",
                "--delta",
                "1e-6",
                "--strategy",
                "{tmp}/x.npz",
            ],
            "strategy file not found",
        ),
        (
            [
                "answer",
                SPEC,
                "{tmp}/ok.txt",
                "--epsilon",
                "1",
                "--delta",
                "1e-6",
                "--strategy",
                "{tmp}/ok.txt",
            ],
            "not a strategy saved by 'dpopt strategy'",
        ),
        (
            ["answer", SPEC, "{tmp}/ok.txt", "--epsilon", "1", "--delta", "1e-6", "--out", "{tmp}"],
            "is a directory",
        ),
    ],
)
def test_bad_input_exits_2_with_one_line(
    argv: list[str],
    expect: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)  # the default --out is ./answers.csv
    np.savetxt(tmp_path / "ok.txt", np.ones(N), fmt="%d")
    np.savetxt(tmp_path / "short.txt", np.ones(N - 1), fmt="%d")
    (tmp_path / "nan.txt").write_text("1\nnan\n" + "1\n" * (N - 2))
    (tmp_path / "neg.txt").write_text("-1\n" + "1\n" * (N - 1))
    (tmp_path / "frac.txt").write_text("0.5\n" + "1\n" * (N - 1))
    (tmp_path / "words.csv").write_text("count\n" + "1\n" * N)
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "garbage.npy").write_text("not numpy")
    assert main([a.replace("{tmp}", str(tmp_path)) for a in argv]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert expect in line, line
    assert not (tmp_path / "answers.csv").exists()


def test_strategy_for_another_workload_is_refused(
    strategy_file: Path, histogram: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "a.csv"
    argv = ["answer", f"all_range:n={N}", str(histogram), "--epsilon", "1", "--delta", "1e-6"]
    assert main([*argv, "--strategy", str(strategy_file), "--out", str(out)]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "different workload" in line and "dpopt strategy WORKLOAD" in line
    assert not out.exists()


def _records_files(tmp_path: Path, n: int = 300) -> tuple[Path, Path]:
    import json

    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"age": {"range": [17, 40]}, "sex": ["F", "M"], "hours": 6}))
    g = np.random.default_rng(0)
    data = tmp_path / "people.csv"
    with data.open("w") as fh:
        fh.write("sex,age,hours,name\n")
        for _ in range(n):
            fh.write(f"{g.choice(['F', 'M'])},{g.integers(17, 41)},{g.integers(0, 6)},x\n")
    return schema, data


def test_answer_from_records_with_a_schema(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    schema, data = _records_files(tmp_path)
    out = tmp_path / "a.csv"
    argv = ["answer", "kway:k=2,all_range=age", str(data), "--schema", str(schema)]
    argv += ["--epsilon", "1", "--delta", "1e-6", "--seed", "0", "--out", str(out)]
    assert main(argv) == 0
    stdout = capsys.readouterr().out
    assert "strategy: " in stdout and "add_remove" in stdout
    rows = _rows(out)
    # 3 pairs: (age ranges x sex) + (age ranges x hours) + (sex x hours)
    assert len(rows) - 1 == 300 * 2 + 300 * 6 + 12
    assert all(r[2] for r in rows[1:])  # expected error per query for every row
    # a record outside the declared domain is refused by attribute, never by value
    with data.open("a") as fh:
        fh.write("F,987654,1,x\n")
    assert main([*argv[:-1], str(tmp_path / "b.csv")]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "'age'" in line and "987654" not in line
    assert main([*argv[:-1], str(tmp_path / "b.csv"), "--clip"]) == 0
    capsys.readouterr()
    assert main([*argv[:-1], str(tmp_path / "c.csv"), "--clip", "--nonnegative"]) == 0
    capsys.readouterr()
    assert min(float(r[1]) for r in _rows(tmp_path / "c.csv")[1:]) >= 0
    # kway needs a schema
    assert main(["answer", "kway:k=2", str(data), "--epsilon", "1", "--delta", "1e-6"]) == 2
    assert "--schema" in _one_error_line(capsys.readouterr().err)


def test_answer_allows_zero_columns_when_asked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    W = np.zeros((3, 6))
    W[0, :2] = W[1, 1:3] = W[2, 4] = 1  # cell 3 and 5 are never queried
    np.save(tmp_path / "w.npy", W)
    hist = tmp_path / "h.txt"
    np.savetxt(hist, np.arange(6), fmt="%d")
    argv = ["answer", str(tmp_path / "w.npy"), str(hist), "--epsilon", "1", "--delta", "1e-6", "--seed", "0"]
    argv += ["--out", str(tmp_path / "a.csv")]
    assert main(argv) == 2
    assert "--allow-zero-columns" in _one_error_line(capsys.readouterr().err)
    assert main([*argv, "--allow-zero-columns", "--no-progress"]) == 0
    assert len(_rows(tmp_path / "a.csv")) == 4
