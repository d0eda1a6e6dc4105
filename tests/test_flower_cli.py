"""``dpopt site serve`` / ``dpopt admm run``: secure by default, command lines (no Flower needed)."""

from __future__ import annotations

from dpopt.cli import main


def _site_toml(tmp_path, supernode: str) -> str:
    p = tmp_path / "site.toml"
    p.write_text(f'[supernode]\n{supernode}\n\n[[site]]\nname = "site0"\nloader = "/data/site0.npz"\n')
    return str(p)


def test_site_serve_uses_tls_and_node_key(tmp_path, capsys) -> None:
    cfg = _site_toml(tmp_path, 'superlink = "10.0.0.1:9200"\nroot_certificates = "ca.crt"\nprivate_key = "site0"\nport = 9300')
    assert main(["site", "serve", "--config", cfg, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"--root-certificates {tmp_path / 'ca.crt'}" in out
    assert f"--auth-supernode-private-key {tmp_path / 'site0'}" in out
    assert "--insecure" not in out and "dpopt-site-config=" in out and "--port 9300" in out


def test_site_serve_refuses_insecure_unless_asked(tmp_path, capsys) -> None:
    cfg = _site_toml(tmp_path, 'superlink = "127.0.0.1:9200"')
    assert main(["site", "serve", "--config", cfg, "--dry-run"]) == 2
    assert "--insecure" in capsys.readouterr().err
    assert main(["site", "serve", "--config", cfg, "--dry-run", "--insecure"]) == 0
    assert "--insecure" in capsys.readouterr().out


def test_admm_run_refuses_a_federation_without_tls(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("FLWR_HOME", str(tmp_path))
    (tmp_path / "config.toml").write_text(
        '[superlink.local]\naddress = "127.0.0.1:9200"\ninsecure = true\n\n'
        f'[superlink.consortium]\naddress = "10.0.0.1:9200"\nroot-certificates = "{tmp_path / "ca.crt"}"\n'
    )
    args = ["admm", "run", "--job", "jobs:job", "--output", str(tmp_path / "r.npz"), "--app-dir", str(tmp_path / "app"), "--dry-run"]
    assert main([*args, "--federation", "local"]) == 2
    assert "without TLS" in capsys.readouterr().err
    assert main([*args, "--federation", "consortium"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("flwr run ") and "job='jobs:job'" in out
    assert (tmp_path / "app" / "pyproject.toml").exists()
