"""Configs: presets, files, overrides and strict validation with helpful messages."""

import pytest

from fedstream.config import SCHEMA, list_presets, load_config
from fedstream.errors import ConfigError


@pytest.mark.parametrize("task", ["ovfl", "vfl", "chfl"])
def test_each_task_gets_exactly_its_keys(task):
    cfg = load_config(None, [f"task={task}"])
    assert set(cfg) == {k for k, f in SCHEMA.items() if f.tasks is None or task in f.tasks}
    assert cfg["data.name"] == {"ovfl": "imnist", "vfl": "mnist", "chfl": "covertype"}[task]


def test_every_key_belongs_to_some_task():
    covered = set()
    for task in ("ovfl", "vfl", "chfl"):
        covered |= set(load_config(None, [f"task={task}"]))
    assert covered == set(SCHEMA)


@pytest.mark.parametrize(
    "overrides,match",
    [
        (["task=vfl", "optimizer.window=5"], "optimizer.window is not a setting of task = 'vfl'"),
        (["chfl.clients=3"], "chfl.clients is not a setting of task = 'ovfl'"),
        (["compression.cache=true"], "needs compression.up"),
        (["task=vfl", "data.name=imnist"], "not a dataset of task = 'vfl'"),
        (["task=vfl", "compression.cache=true"], "needs compression.up"),
        (["task=chfl", "chfl.mus=0,2"], "chfl.mus"),
        (["task=chfl", "chfl.hidden=512,x"], "chfl.hidden"),
        (["task=chfl", "chfl.lrs=2"], "chfl.lrs"),
        (
            ["task=chfl", "chfl.mode=stream", "chfl.split=min-corr"],
            "chfl.split = 'min-corr' is for chfl.mode = batch",
        ),
    ],
)
def test_keys_and_values_are_checked_per_task(overrides, match):
    with pytest.raises(ConfigError, match=match):
        load_config(None, overrides)


def test_task_defaults_and_none_meaning_the_papers_choice():
    vfl = load_config(None, ["task=vfl"])
    assert vfl["optimizer.lr"] is None and vfl["model.embedding"] is None  # the paper's, per dataset
    assert load_config(None, ["task=vfl", "optimizer.lr=none"])["optimizer.lr"] is None
    with pytest.raises(ConfigError, match="optimizer.lr"):
        load_config(None, ["optimizer.lr=none"])  # ovfl needs a number


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


def test_one_set_of_field_rules():
    """Field.check (config keys, River keywords) and fits/checker (network records) share the type
    rules: an int is never a bool, a float is any int or a finite float."""
    import math

    from fedstream.fields import Field, FieldValueError, fits

    number = Field(float, 0.0, "x")
    values = [0, 3, 1.5, -2.0, float("nan"), float("inf"), True, "1", None]
    for v in values:
        try:
            number.check(v, "ovfl")
            ok = True
        except FieldValueError as exc:
            ok = False
            want = "missing" if v is None else "type" if isinstance(v, (bool, str)) else "range"
            assert exc.reason == want
            assert exc.expected == "a finite number"
        assert ok == (v is not None and fits(v, float)), v
        assert ok == (v is not None and not isinstance(v, (bool, str)) and math.isfinite(v))
    assert isinstance(number.check(3), float)
    with pytest.raises(FieldValueError) as got:
        Field(int, 1, "x", min=1).check(None)
    assert got.value.reason == "missing"
    assert Field(int, None, "x").check(None) is None
    with pytest.raises(FieldValueError) as got:
        Field(float, 1.0, "x").check(10**400)
    assert got.value.reason == "range"


@pytest.mark.parametrize("text", ["inf", "-inf", "nan"])
def test_a_float_key_without_bounds_refuses_non_finite_values(text):
    with pytest.raises(ConfigError, match=f"activation.threshold = {text} is out of range; expected a "
                                          "finite number"):
        load_config("ovfl-imnist", [f"activation.threshold={text}"])
