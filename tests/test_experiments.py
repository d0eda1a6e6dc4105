"""Tests of dpopt.experiments: registry, runner (incremental records, resume), records, plots, report."""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import json
import math
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy

import dpopt
from dpopt.exceptions import InvalidParameterError
from dpopt.experiments import records as rec_mod
from dpopt.experiments import registry
from dpopt.experiments.plots import bar_plot, line_plot
from dpopt.experiments.report import write_report
from dpopt.experiments.runner import ProgressEvent, run_experiment

NAME = "test-demo"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@dataclasses.dataclass(frozen=True)
class DemoConfig:
    n_points: int
    methods: tuple[str, ...] = ("a", "b")


# Mutable state the demo's functions read or fill (reset by the fixture).
STATE: dict[str, Any] = {}


def _demo_run(cfg: DemoConfig, rng: np.random.Generator) -> Iterator[dict[str, Any]]:
    out_dir: Path | None = STATE.get("out_dir")
    if out_dir is not None:
        STATE.setdefault("config_seen_first", []).append((out_dir / "config.json").is_file())
    seed_marker = int(rng.integers(0, 2**31))  # identifies the stream; recorded to check seeding
    STATE.setdefault("calls", []).append(seed_marker)
    k = 0
    for m in cfg.methods:
        for i in range(cfg.n_points):
            if STATE.get("fail_at") == (seed_marker, k):
                raise RuntimeError("simulated crash")
            yield {
                "method": m,
                "x": np.int64(i),
                "value": np.float64(i + rng.normal()),
                "vec": np.arange(2.0),
                "marker": seed_marker,
            }
            k += 1


def _demo_plot(records: Sequence[dict[str, Any]], out_dir: Path) -> list[Path]:
    STATE["plot_records"] = list(records)
    return [line_plot(records, x="x", y="value", by="method", path=out_dir / "demo.png")]


def _demo_tables(records: Sequence[dict[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    return [("Mean <value> by method & x", rec_mod.summarize(records, "value", by=("method", "x")))]


DESCRIPTION = "Demo experiment with <b>markup</b> & ampersands.\n\nSecond paragraph."


def _marker(seed: int) -> int:
    return int(np.random.default_rng(seed).integers(0, 2**31))


@pytest.fixture
def demo() -> Iterator[registry.Experiment]:
    STATE.clear()
    exp = registry.register(
        registry.Experiment(
            name=NAME,
            description=DESCRIPTION,
            seed_doc="tests",
            run=_demo_run,
            configs={"quick": DemoConfig(n_points=3), "paper": DemoConfig(n_points=5)},
            plot=_demo_plot,
            tables=_demo_tables,
        )
    )
    yield exp
    registry.unregister(NAME)
    STATE.clear()


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# ----------------------------------------------------------------------------------- registry


def test_get_unknown_name_suggests_close_match(demo: registry.Experiment) -> None:
    assert registry.get(NAME) is demo
    assert registry.get(NAME.upper()) is demo
    assert NAME in registry.names()
    with pytest.raises(InvalidParameterError, match=r"did you mean 'test-demo'"):
        registry.get("test-demp")
    with pytest.raises(InvalidParameterError, match="unknown experiment") as info:
        registry.get("zzzzzz-qqq")
    assert "did you mean" not in str(info.value)


def test_experiment_validation(demo: registry.Experiment) -> None:
    @dataclasses.dataclass
    class Mutable:
        n: int = 1

    good = {"quick": DemoConfig(1), "paper": DemoConfig(2)}
    with pytest.raises(InvalidParameterError, match="valid experiment name"):
        registry.Experiment("Bad Name", "d", "s", _demo_run, good)
    with pytest.raises(InvalidParameterError, match="paper"):
        registry.Experiment("ok-name", "d", "s", _demo_run, {"quick": DemoConfig(1)})
    with pytest.raises(InvalidParameterError, match="frozen"):
        registry.Experiment("ok-name", "d", "s", _demo_run, {"quick": Mutable(), "paper": Mutable()})
    # Names like the seed figures are accepted; another experiment may not take a used name.
    registry.Experiment("kuru-fig4.2", "d", "s", _demo_run, good)
    with pytest.raises(InvalidParameterError, match="already registered"):
        registry.register(registry.Experiment(NAME, "other", "s", _demo_run, good))
    assert registry.register(demo) is demo  # same object again: a no-op


def test_builtin_modules_missing_or_needing_extras_are_skipped(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "dpopt_test_needs_extra.py").write_text("import dpopt_no_such_extra_pkg\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(
        registry, "_BUILTIN_MODULES", ("dpopt.experiments._not_written_yet", "dpopt_test_needs_extra")
    )
    monkeypatch.setattr(registry, "_loaded", False)
    monkeypatch.setattr(registry, "_skipped", {})
    registry.names()  # must not raise
    skipped = registry.skipped_modules()
    assert list(skipped) == ["dpopt_test_needs_extra"]
    assert "dpopt_no_such_extra_pkg" in skipped["dpopt_test_needs_extra"]


# ------------------------------------------------------------------------------------- runner


def test_config_json_written_first_with_versions(demo: registry.Experiment, tmp_path: Path) -> None:
    out = tmp_path / "run"
    STATE["out_dir"] = out
    res = run_experiment(NAME, scale="paper", seeds=(3, 1), out_dir=out, progress=False)
    assert STATE["config_seen_first"] == [True, True]
    cfg = json.loads(res.config_path.read_text())
    assert cfg["experiment"] == NAME
    assert cfg["scale"] == "paper"
    assert cfg["config"] == {"n_points": 5, "methods": ["a", "b"]}
    assert cfg["seeds"] == [3, 1]
    assert cfg["description"] == DESCRIPTION
    v = cfg["versions"]
    assert (v["dpopt"], v["numpy"], v["scipy"]) == (dpopt.__version__, np.__version__, scipy.__version__)
    assert v["python"] == ".".join(map(str, sys.version_info[:3]))
    started = dt.datetime.fromisoformat(cfg["started"])
    assert abs((dt.datetime.now(dt.UTC) - started).total_seconds()) < 600
    assert res.n_records == 2 * 2 * 5


def test_records_seeded_tagged_and_json_safe(demo: registry.Experiment, tmp_path: Path) -> None:
    events: list[ProgressEvent] = []
    res = run_experiment(NAME, seeds=(5, 2), out_dir=tmp_path / "r", progress=events.append)
    lines = _lines(res.records_path)
    assert len(lines) == res.n_records == 12
    assert [r["seed"] for r in lines] == [5] * 6 + [2] * 6
    assert [r["repetition"] for r in lines] == [0] * 6 + [1] * 6
    # each seed gets np.random.default_rng(seed)
    assert {r["seed"]: r["marker"] for r in lines} == {5: _marker(5), 2: _marker(2)}
    assert lines[0]["vec"] == [0.0, 1.0]
    assert isinstance(lines[0]["x"], int)
    assert [e.seeds_done for e in events if e.kind == "seed_done"] == [1, 2]
    assert sum(e.kind == "record" for e in events) == 12
    assert events[-1].records_total == 12


def test_records_written_incrementally_and_resume(demo: registry.Experiment, tmp_path: Path) -> None:
    out = tmp_path / "run"
    STATE["fail_at"] = (_marker(1), 4)  # seed 1 crashes after writing 4 records
    with pytest.raises(RuntimeError, match="simulated crash"):
        run_experiment(NAME, seeds=(0, 1, 2), out_dir=out, progress=False)
    on_disk = _lines(out / "records.jsonl")
    assert [r["seed"] for r in on_disk] == [0] * 6 + [1] * 4
    assert [d["seed"] for d in _lines(out / "seeds_done.jsonl")] == [0]
    assert not (out / "run.json").exists()

    # Without resume the directory is refused; with resume only seeds 1 and 2 run.
    with pytest.raises(InvalidParameterError, match="resume"):
        run_experiment(NAME, seeds=(0, 1, 2), out_dir=out, progress=False)
    STATE.clear()
    res = run_experiment(NAME, seeds=(0, 1, 2), out_dir=out, progress=False, resume=True)
    assert STATE["calls"] == [_marker(1), _marker(2)]
    assert res.skipped_seeds == (0,)
    final = _lines(out / "records.jsonl")
    assert [r["seed"] for r in final] == [0] * 6 + [1] * 6 + [2] * 6
    assert len({(r["seed"], r["method"], r["x"]) for r in final}) == 18  # partial seed-1 records dropped
    # The resumed seed gives exactly what an uninterrupted run gives.
    fresh = run_experiment(NAME, seeds=(0, 1, 2), out_dir=tmp_path / "fresh", progress=False)
    assert final == _lines(fresh.records_path)
    assert res.n_records == 18
    # A different scale cannot resume into this directory.
    with pytest.raises(InvalidParameterError, match="scale"):
        run_experiment(NAME, scale="paper", seeds=(3,), out_dir=out, progress=False, resume=True)


def test_resume_tolerates_truncated_last_line(demo: registry.Experiment, tmp_path: Path) -> None:
    out = tmp_path / "run"
    run_experiment(NAME, seeds=(0,), out_dir=out, progress=False)
    with (out / "records.jsonl").open("a") as fh:
        fh.write('{"seed": 1, "repetition": 1, "meth')  # crash mid-line in seed 1
    res = run_experiment(NAME, seeds=(0, 1), out_dir=out, progress=False, resume=True)
    assert [r["seed"] for r in _lines(res.records_path)] == [0] * 6 + [1] * 6


def test_overwrite_replaces_previous_run(demo: registry.Experiment, tmp_path: Path) -> None:
    out = tmp_path / "run"
    run_experiment(NAME, seeds=(0, 1), out_dir=out, progress=False)
    res = run_experiment(NAME, seeds=(7,), out_dir=out, progress=False, overwrite=True)
    assert {r["seed"] for r in _lines(res.records_path)} == {7}
    assert json.loads(res.config_path.read_text())["seeds"] == [7]


def test_bad_arguments_rejected(demo: registry.Experiment, tmp_path: Path) -> None:
    with pytest.raises(InvalidParameterError, match="scale"):
        run_experiment(NAME, scale="huge", out_dir=tmp_path / "a", progress=False)
    with pytest.raises(InvalidParameterError, match="distinct"):
        run_experiment(NAME, seeds=(1, 1), out_dir=tmp_path / "b", progress=False)
    with pytest.raises(InvalidParameterError, match="non-negative"):
        run_experiment(NAME, seeds=(-1,), out_dir=tmp_path / "c", progress=False)
    blocker = tmp_path / "file.txt"
    blocker.write_text("x")
    with pytest.raises(InvalidParameterError, match="out_dir"):
        run_experiment(NAME, out_dir=blocker / "sub", progress=False)


def test_relative_out_dir_and_bad_arguments_write_nothing(
    demo: registry.Experiment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for kwargs in ({"scale": "huge"}, {"seeds": (1, 1)}, {"overrides": {"n_points": "x"}}):
        with pytest.raises(InvalidParameterError):
            run_experiment(NAME, out_dir="runs/a", progress=False, **kwargs)
    assert list(tmp_path.iterdir()) == []  # every argument is checked before the run folder exists
    # the plot returns out_dir / "demo.png"; with a relative out_dir that path must not be joined twice
    res = run_experiment(NAME, out_dir="runs/a", progress=False)
    assert res.out_dir.is_absolute() and res.figures == (tmp_path / "runs" / "a" / "demo.png",)
    assert json.loads((tmp_path / "runs" / "a" / "run.json").read_text())["figures"] == ["demo.png"]


@dataclasses.dataclass(frozen=True)
class _Files:
    data_path: str = ""
    out_dir: str = ""
    dataset: str = "builtin"
    label: str = "x:y"


def test_check_paths_and_check_hook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "present.csv").write_text("1\n")
    registry.check_paths(_Files())  # empty = "the usual places"; other fields are not paths
    registry.check_paths(_Files(data_path="present.csv", out_dir=".", dataset="csv:present.csv"))
    for bad, field in (({"data_path": "gone.csv"}, "data_path"), ({"dataset": "csv:gone.csv"}, "dataset")):
        with pytest.raises(InvalidParameterError, match=f"--set {field}: gone.csv does not exist"):
            registry.check_paths(_Files(**bad))

    def refuse(cfg: _Files) -> None:
        if cfg.label == "bad":
            raise InvalidParameterError("--set label: bad")

    exp = registry.Experiment(
        name="check-demo", description="d", seed_doc="t", run=_demo_run,
        configs={"quick": _Files(), "paper": _Files()}, check=refuse,
    )  # fmt: skip
    assert exp.config("quick", {"label": "ok"}).label == "ok"
    with pytest.raises(InvalidParameterError, match="label"):
        exp.config("quick", {"label": "bad"})
    with pytest.raises(InvalidParameterError, match="data_path"):
        exp.config("quick", {"data_path": "gone.csv"})
    with pytest.raises(InvalidParameterError, match="check must be callable"):
        dataclasses.replace(exp, check="no")  # type: ignore[arg-type]


def test_reserved_keys_and_unserializable_values_rejected(tmp_path: Path) -> None:
    def run_bad(cfg: DemoConfig, rng: np.random.Generator) -> Iterator[dict[str, Any]]:
        yield {"seed": 1}

    cfgs = {"quick": DemoConfig(1), "paper": DemoConfig(1)}
    registry.register(registry.Experiment("test-bad", "d", "s", run_bad, cfgs))
    try:
        with pytest.raises(InvalidParameterError, match="reserved"):
            run_experiment("test-bad", out_dir=tmp_path / "bad", progress=False)
    finally:
        registry.unregister("test-bad")
    with pytest.raises(InvalidParameterError, match=r"record\.z"):
        rec_mod.to_jsonable({"z": 1 + 2j})
    assert rec_mod.to_jsonable({"a": (np.float32(0.5), {np.int64(3): np.bool_(True)})}) == {
        "a": [0.5, {"3": True}]
    }


def test_plot_reads_records_back_from_disk(demo: registry.Experiment, tmp_path: Path) -> None:
    res = run_experiment(NAME, seeds=(0, 1), out_dir=tmp_path / "run", progress=False)
    seen = STATE["plot_records"]
    assert seen == _lines(res.records_path)
    assert type(seen[0]["vec"]) is list and type(seen[0]["value"]) is float  # not the in-memory numpy values
    assert res.figures == (tmp_path / "run" / "demo.png",)
    data = res.figures[0].read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 1000
    assert json.loads((tmp_path / "run" / "run.json").read_text())["figures"] == ["demo.png"]


# ------------------------------------------------------------------------------ records, plots


def test_summarize_mean_and_spread() -> None:
    rows = [
        {"m": "a", "x": 1, "v": 1.0, "seed": 0},
        {"m": "a", "x": 1, "v": 3.0, "seed": 1},
        {"m": "b", "x": 1, "v": 5.0, "seed": 0},
        {"m": "b", "x": 1, "v": None, "seed": 1},
        {"m": "a", "x": 2},
    ]
    out = rec_mod.summarize(rows, "v", by="m")
    assert [r["m"] for r in out] == ["a", "b"]
    a, b = out
    assert (a["mean"], a["count"], a["min"], a["max"]) == (2.0, 2, 1.0, 3.0)
    assert a["std"] == pytest.approx(math.sqrt(2.0))
    assert a["sem"] == pytest.approx(1.0)
    assert (b["mean"], b["std"], b["count"]) == (5.0, 0.0, 1)
    assert rec_mod.select(rows, m="a", x=[1]) == rows[:2]
    assert list(rec_mod.group_by(rows, ("m", "x"))) == [("a", 1), ("a", 2), ("b", 1)]


def test_read_jsonl_truncation_rules(tmp_path: Path) -> None:
    p = tmp_path / "r.jsonl"
    p.write_text('{"a": 1}\n{"a": 2}\n{"a": ')
    assert rec_mod.read_jsonl(p) == [{"a": 1}, {"a": 2}]
    p.write_text('{"a": 1}\nnot json\n{"a": 2}\n')
    with pytest.raises(InvalidParameterError, match="line 2"):
        rec_mod.read_jsonl(p)


def test_bar_and_line_plots_write_pngs(tmp_path: Path) -> None:
    rows = [{"m": m, "x": x, "v": x + s, "s": s} for m in "ab" for x in (1, 2, 4) for s in (0, 1)]
    lp = line_plot(rows, x="x", y="v", by="m", path=tmp_path / "l.png", logx=True, logy=True)
    bp = bar_plot(rows, x="m", y="v", by="x", path=tmp_path / "b.png")
    for p in (lp, bp):
        assert p.read_bytes().startswith(PNG_MAGIC)
    with pytest.raises(InvalidParameterError, match="fields"):
        line_plot(rows, x="x", y="missing", path=tmp_path / "n.png")


# ------------------------------------------------------------------------------------- report


def test_report_embeds_figure_and_escapes_text(demo: registry.Experiment, tmp_path: Path) -> None:
    r1 = run_experiment(NAME, seeds=(0,), out_dir=tmp_path / "runs" / "one", progress=False)
    run_experiment(NAME, scale="paper", seeds=(0,), out_dir=tmp_path / "runs" / "two", progress=False)
    (tmp_path / "runs" / "unrelated").mkdir()
    (tmp_path / "runs" / "unrelated" / "config.json").write_text('{"not": "a dpopt run"}')

    index = write_report(r1.out_dir)
    assert index == (r1.out_dir / "index.html").resolve()
    doc = index.read_text()
    png_b64 = base64.b64encode(r1.figures[0].read_bytes()).decode()
    assert f"data:image/png;base64,{png_b64}" in doc
    assert "Demo experiment with &lt;b&gt;markup&lt;/b&gt; &amp; ampersands." in doc
    assert "<b>markup" not in doc
    assert "Mean &lt;value&gt; by method &amp; x" in doc  # the experiment's summary table
    assert np.__version__ in doc

    root_doc = write_report(tmp_path / "runs").read_text()
    assert root_doc.count('<h2 id="run-') == 2
    assert "(paper)" in root_doc and "(quick)" in root_doc


def test_report_flags_unfinished_run_and_missing_runs(demo: registry.Experiment, tmp_path: Path) -> None:
    STATE["fail_at"] = (_marker(0), 2)
    with pytest.raises(RuntimeError):
        run_experiment(NAME, seeds=(0,), out_dir=tmp_path / "run", progress=False)
    assert "did not finish" in write_report(tmp_path / "run").read_text()
    (tmp_path / "empty").mkdir()
    with pytest.raises(InvalidParameterError, match="no run directories"):
        write_report(tmp_path / "empty")


def test_summarize_keeps_a_grouping_field_named_n() -> None:
    # regression: the sample count used to be stored under "n" and overwrote an x field called n
    from dpopt.experiments.records import summarize

    rows = summarize([{"n": 32, "e": 1.0}, {"n": 32, "e": 3.0}, {"n": 64, "e": 5.0}], "e", ("n",))
    assert sorted((r["n"], r["count"], r["mean"]) for r in rows) == [(32, 2, 2.0), (64, 1, 5.0)]
