"""CHFL errors name the config keys the user wrote (chfl.*, data.name), not the settings'
field names, when a run is started from a config; the Python API keeps the field names."""

import re

import pytest

from fedstream.chfl.settings import CONFIG_KEYS, CHFLSettings, named_by_config
from fedstream.chfl.splits import SettingError
from fedstream.chfl.stream import StreamSettings, run_stream_on_table
from fedstream.chfl.trainer import run_on_table
from fedstream.errors import ConfigError
from tests.helpers.configs import tiny_settings
from tests.helpers.data import require, synthetic_table


@pytest.mark.parametrize("field,value,message", [
    ("lrs", (2.0,), r"^chfl.lrs: expected a number in \(0.0, 1.0\], found 2.0$"),
    ("clients", 0, r"^chfl.clients: expected an integer >= 1, found 0$"),
    ("split", "best", r"^chfl.split: expected one of random, max-corr"),
    ("dataset", "mnist", r"^data.name: expected one of covertype"),
    ("shared_baselines", ("local",), r"^chfl.baselines: expected one of common, concat, found 'local'$"),
])
def test_settings_errors_name_config_keys(field, value, message):
    with pytest.raises(SettingError, match=rf"^{field}: "):  # the API: field names
        CHFLSettings(**{field: value})
    with pytest.raises(ConfigError, match=message), named_by_config():
        CHFLSettings(**{field: value})


def test_run_time_errors_name_every_key_involved():
    X, y = synthetic_table(n=200, d=12)
    with pytest.raises(ConfigError) as err, named_by_config():
        run_on_table(X, y, tiny_settings(clients=6, common_ratio=0.6), method="chfl")
    text = str(err.value)
    assert text.startswith("chfl.common_ratio: 0.6 leaves 5 of 12 features for chfl.clients = 6")
    assert "(lower chfl.common_ratio or chfl.clients)" in text
    with pytest.raises(ConfigError, match=r"^chfl.clients: 5 rows are too few for 5 clients \(rows: the "
                                          r"dataset's, or chfl.max_rows\)"), named_by_config():
        run_on_table(X, y, tiny_settings(clients=5, max_rows=5), method="local")
    with (
        pytest.raises(
            ConfigError, match=r"^chfl.stream_batch: expected at most 100 \(the rows per client\), found 101"
        ),
        named_by_config(),
    ):
        run_stream_on_table(X, y, StreamSettings(clients=2, batch=101, hidden=(4,)))
    with (
        pytest.raises(ConfigError, match=r"^chfl.stream_mu: expected a number in \[0.0, 1.0\]"),
        named_by_config(),
    ):
        StreamSettings(mu=1.5)


def test_every_settings_field_has_a_config_key():
    from dataclasses import fields

    from fedstream.config.schema import SCHEMA

    for cls in (CHFLSettings, StreamSettings):
        for f in fields(cls):
            if f.name in ("select_round", "stats_rows"):  # not config keys: API only
                continue
            assert f.name in CONFIG_KEYS, f"{cls.__name__}.{f.name} has no config key"
            assert CONFIG_KEYS[f.name] in SCHEMA, CONFIG_KEYS[f.name]


def test_cli_error_names_the_keys(data_root, capsys):
    from fedstream.cli import main

    require(data_root, "covertype_kaggle/train.csv.gz")
    code = main(["run", "chfl-covertype", "--set", f"data.root={data_root}", "--set", "chfl.clients=40",
                 "--set", "chfl.common_ratio=0.5", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2
    assert re.search(r"chfl.common_ratio: 0.5 leaves 27 of 54 features for\s+chfl.clients = 40", err)
    assert "Traceback" not in err
