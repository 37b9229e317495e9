"""Configs: presets, files, overrides and strict validation with helpful messages."""

import pytest

from fedstream.config import SCHEMA, list_presets, load_config
from fedstream.errors import ConfigError


def test_defaults_cover_every_key():
    cfg = load_config()
    assert set(cfg) == set(SCHEMA)


def test_preset_and_overrides():
    assert "ovfl-imnist" in list_presets()
    cfg = load_config("ovfl-imnist", ["optimizer.name=slr", "activation.threshold=-0.2", "data.root=none"])
    assert cfg["optimizer.name"] == "slr" and cfg["activation.threshold"] == -0.2 and cfg["data.root"] is None


def test_toml_and_yaml_files(tmp_path):
    (tmp_path / "a.toml").write_text('rounds = 5\n[optimizer]\nname = "ogd"\nlr = 1\n')
    (tmp_path / "b.yaml").write_text("rounds: 5\nactivation:\n  name: event\n  threshold: 0.6\n")
    a = load_config(str(tmp_path / "a.toml"))
    assert a["optimizer.lr"] == 1.0 and isinstance(a["optimizer.lr"], float)
    assert load_config(str(tmp_path / "b.yaml"))["activation.threshold"] == 0.6


@pytest.mark.parametrize(
    "overrides,match",
    [
        (["optimizer.nme=dlr"], "did you mean optimizer.name"),
        (["optimizer.name=adam"], "one of ogd, slr, dlr"),
        (["rounds=ten"], "expected an integer"),
        (["activation.p=1.5"], "out of range"),
        (["optimizer.lr=-1"], "out of range"),
        (["optimizer.lr=nan"], "out of range"),
        (["rounds"], "KEY=VALUE"),
    ],
)
def test_bad_overrides_name_key_and_allowed_values(overrides, match):
    with pytest.raises(ConfigError, match=match):
        load_config("ovfl-imnist", overrides)


def test_bad_file_contents(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text("[vfl]\nclient = 4\n")
    with pytest.raises(ConfigError, match="unknown config key 'vfl.client'.*vfl.clients"):
        load_config(str(p))
    p.write_text("rounds = 'many'\n")
    with pytest.raises(ConfigError, match="rounds = 'many'"):
        load_config(str(p))
    p.write_text("rounds = [\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(str(p))
    with pytest.raises(ConfigError, match="no such config file or preset"):
        load_config(str(tmp_path / "missing.toml"))


@pytest.mark.parametrize(
    "overrides,match",
    [
        (["optimizer.server_lr=0"], "optimizer.server_lr = 0.0 is out of range"),
        (["optimizer.alpha=1"], "optimizer.alpha = 1.0 is out of range; expected a number > 0.0 and < 1.0"),
        (["model.embedding=70000"], "model.embedding"),
        (["activation.k=5"], "activation.k = 5 exceeds vfl.clients = 4"),
    ],
)
def test_bounds_and_cross_key_checks(overrides, match):
    with pytest.raises(ConfigError, match=match):
        load_config("ovfl-imnist", overrides)


def test_unreadable_config_file(tmp_path):
    p = tmp_path / "bad.toml"
    p.write_bytes(b"rounds = \xff\xfe\n")
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(str(p))
