"""Bad input to any ``dpopt`` command is one line ``dpopt: error: ...`` in the command's terms (exit 2)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from cli_checks import one_error_line  # tests/cli_checks.py
from dpopt.cli import build_parser, main


def test_malformed_site_toml_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "site.toml"
    cfg.write_text('[supernode\nsuperlink = "127.0.0.1:9200"\n')
    assert main(["site", "serve", "--config", str(cfg), "--dry-run", "--insecure"]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert str(cfg) in line and "not valid TOML" in line and "line 1" in line


def _records(tmp_path: Path, *, outside: bool = False) -> Path:
    data = tmp_path / "people.csv"
    rows = ["sex,age"] + [f"{'FM'[i % 2]},{17 + i % 4}" for i in range(40)]
    if outside:
        rows.append("F,99")
    data.write_text("\n".join(rows) + "\n")
    return data


_SCHEMA = {"sex": ["F", "M"], "age": {"range": [17, 20]}}


def test_answer_takes_the_schema_inline_as_its_help_shows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "a.csv"
    argv = ["answer", "kway:k=1", str(_records(tmp_path)), "--epsilon", "1", "--delta", "1e-6", "--seed", "0"]
    assert main([*argv, "--schema", json.dumps(_SCHEMA), "--out", str(out)]) == 0, capsys.readouterr().err
    assert out.exists()
    assert main([*argv, "--schema", "{not json", "--out", str(tmp_path / "b.csv")]) == 2
    assert "--schema (inline JSON): not valid JSON" in one_error_line(capsys.readouterr().err)


def test_clip_hint_names_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(_SCHEMA))
    argv = ["answer", "kway:k=1", str(_records(tmp_path, outside=True)), "--schema", str(schema)]
    argv += ["--epsilon", "1", "--delta", "1e-6", "--seed", "0", "--out", str(tmp_path / "a.csv")]
    assert main(argv) == 2
    line = one_error_line(capsys.readouterr().err)
    assert "pass --clip to move them" in line and "clip=True" not in line and "99" not in line


def test_a_workload_spec_error_names_the_key_the_user_typed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["strategy", "prefix:n=0", "--out", str(tmp_path / "s.npz")]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert line == "dpopt: error: workload spec 'prefix:n=0': n: must be an integer >= 1"
    assert main(["strategy", "ranges:m=0,n=4,seed=0", "--out", str(tmp_path / "s.npz")]) == 2
    assert "'ranges:m=0,n=4,seed=0': m: must be" in one_error_line(capsys.readouterr().err)


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["docs", "--timeout", "-1", "--config", "mkdocs.yml"], "--timeout"),
        (["docs", "--timeout", "inf", "--config", "mkdocs.yml"], "--timeout"),
        (["ledger", "history", "demo", "--limit", "-1"], "--limit"),
        (["ledger", "history", "demo", "--limit", "1.5"], "--limit"),
        (["ledger", "add-dataset", "x", "--epsilon", "1", "--delta", "-0.1"], "--delta"),
        (["ledger", "add-dataset", "x", "--epsilon", "0"], "--epsilon"),
        (["strategy", "prefix:n=4", "--out", "s.npz", "--tol", "0"], "--tol"),
        # refused while parsing: before the command checks --out (a directory here)
        (["answer", "prefix:n=4", "h.csv", "--epsilon", "-1", "--delta", "1e-6", "--out", "."], "--epsilon"),
        (["answer", "prefix:n=4", "h.csv", "--epsilon", "1", "--delta", "1", "--out", "."], "--delta"),
        (["answer", "prefix:n=4", "h.csv", "--epsilon", "1", "--delta", "1e-6", "--seed", "-3"], "--seed"),
        (["site", "serve", "--config", "site.toml", "--dry-run", "--retry-for", "-1"], "--retry-for"),
        (
            ["admm", "run", "--federation", "f", "--job", "m:f", "--output", "o.npz", "--timeout", "-1"],
            "--timeout",
        ),
    ],
)
def test_numeric_options_are_checked_when_parsed(
    argv: list[str], flag: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    monkeypatch.chdir(tmp_path)
    (tmp_path / "site.toml").write_text('[supernode]\nsuperlink = "127.0.0.1:9200"\n')
    (tmp_path / "mkdocs.yml").write_text("site_name: x\n")
    assert main(argv) == 2
    line = one_error_line(capsys.readouterr().err)
    assert line.startswith(f"dpopt: error: {flag}: "), line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mkdocs.yml", "site.toml"]  # nothing ran


def _walk(
    parser: argparse.ArgumentParser, path: str
) -> list[tuple[str, argparse.ArgumentParser, str | None]]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                found.append((f"{path} {name}", sub, helps.get(name)))
                found.extend(_walk(sub, f"{path} {name}"))
    return found


def test_every_subcommand_has_help_and_description() -> None:
    parser = build_parser()
    assert parser.description
    commands = _walk(parser, "dpopt")
    assert {"dpopt answer", "dpopt ledger history", "dpopt site serve", "dpopt admm run"} <= {
        c for c, _, _ in commands
    }
    for command, sub, help_text in commands:
        assert help_text, f"{command}: no help= (its line in the parent's --help)"
        assert sub.description, f"{command}: no description (the top of its --help)"
        for action in sub._actions:
            if action.option_strings and action.dest not in ("help", "version"):
                assert action.help, f"{command} {action.option_strings[0]}: no help"
