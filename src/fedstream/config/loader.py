"""Load, override and validate run configurations.

A config is a TOML or YAML file (or a built-in preset name) of nested tables; fedstream works
with flat dotted keys (``optimizer.lr``). ``--set key=value`` overrides are parsed with the key's
type. Anything unknown, mistyped or out of range raises :class:`ConfigError` naming the key, the
value received and what is allowed, before any work starts.
"""

from __future__ import annotations

import difflib
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from fedstream.config.schema import schema
from fedstream.errors import ConfigError
from fedstream.fields import Field, FieldValueError, flatten
from fedstream.transport.compressed import CompressionSpec

PRESET_DIR = "presets"


def list_presets() -> dict[str, str]:
    """Built-in preset names with the first line of their description."""
    out = {}
    for item in sorted(
        resources.files("fedstream.config").joinpath(PRESET_DIR).iterdir(), key=lambda p: p.name
    ):
        if item.name.endswith(".toml"):
            first = item.read_text().splitlines()[0] if item.read_text() else ""
            out[item.name[:-5]] = first.lstrip("# ").strip()
    return out


class _UniqueKeyLoader(yaml.SafeLoader):
    """yaml.safe_load that refuses a key given twice in one mapping (TOML refuses it too; YAML
    would silently keep the last value)."""


def _unique_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            duplicate = key in seen
        except TypeError:  # an unhashable key: construct_mapping says so
            break
        if duplicate:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (given twice in one table)", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


def _read(source: str) -> tuple[dict, str]:
    """Parse a preset name or a config file path into nested dicts."""
    path = Path(source)
    if not path.exists() and source in list_presets():
        text = resources.files("fedstream.config").joinpath(PRESET_DIR, source + ".toml").read_text()
        return tomllib.loads(text), f"preset {source}"
    if not path.exists():
        presets = ", ".join(list_presets())
        raise ConfigError(f"{source}: no such config file or preset (presets: {presets})")
    try:
        if path.suffix not in (".yaml", ".yml", ".toml"):
            raise ConfigError(f"{path}: config files must end in .toml, .yaml or .yml")
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the config file ({exc})") from None
    try:
        if path.suffix in (".yaml", ".yml"):
            data = yaml.load(text, Loader=_UniqueKeyLoader) or {}
        else:
            data = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: not valid {path.suffix[1:].upper()}: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a table of keys at the top level, got {type(data).__name__}")
    return data, str(path)


def renamed(key: str) -> str | None:
    """The current name of a key that an earlier release called ``key`` (``hfl.*``, ``online.*``)."""
    prefix, _, rest = key.partition(".")
    new = {"hfl": f"chfl.{rest}", "online": f"chfl.stream_{rest}"}.get(prefix)
    return new if new in schema().fields else None


def _unknown(key: str, where: str) -> ConfigError:
    if (new := renamed(key)) is not None:
        return ConfigError(f"{where}: config key {key!r} was renamed {new!r}")
    known = schema().fields
    close = difflib.get_close_matches(key, known, n=3)
    hint = f"; did you mean {' or '.join(close)}?" if close else f"; known keys: {', '.join(known)}"
    return ConfigError(f"{where}: unknown config key {key!r}{hint}")


def parse_override(item: str) -> tuple[str, Any]:
    """Parse ``key=value`` from ``--set`` with the key's type."""
    if "=" not in item:
        raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. --set optimizer.lr=0.01")
    key, text = (s.strip() for s in item.split("=", 1))
    if key not in schema().fields:
        raise _unknown(key, "--set")
    field = schema().fields[key]
    nullable = field.optional or field.default is None or any(v is None for _, v in field.task_defaults)
    if nullable and text.lower() in ("", "none", "null"):
        return key, None  # whether this task allows it is checked with the task known
    try:
        if field.type is bool:
            if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError
            return key, text.lower() in ("true", "1", "yes")
        return key, field.type(text)
    except ValueError:
        raise ConfigError(f"--set {key}={text!r}: expected {field.describe()}") from None


def check_value(key: str, value: Any, field: Field, where: str, task: str | None = None) -> Any:
    """Return ``value`` coerced to the field's type, or raise a ConfigError that says why not
    (the field's rules: :meth:`fedstream.fields.Field.check`)."""
    try:
        return field.check(value, task)
    except FieldValueError as exc:
        if exc.reason == "missing":
            raise ConfigError(f"{where}: {key} must be {exc.expected}, got nothing") from None
        if exc.reason == "type":
            raise ConfigError(
                f"{where}: {key} = {value!r} ({type(value).__name__}); expected {exc.expected}") from None
        raise ConfigError(
            f"{where}: {key} = {exc.value!r} is out of range; expected {exc.expected}") from None


def load_config(source: str | None = None, overrides: list[str] | dict | None = None) -> dict[str, Any]:
    """Resolve a flat config: schema defaults < file or preset < overrides; all validated.

    The result holds the keys of its task only (``task``: ovfl, vfl or chfl); a key given for
    another task is an error, not silently ignored.
    """
    known = schema().fields
    given: dict[str, tuple[Any, str]] = {}  # key -> (value, where it came from)
    if source is not None:
        data, where = _read(source)
        for key, value in flatten(data).items():
            if key not in known:
                raise _unknown(key, where)
            given[key] = (value, where)
    if isinstance(overrides, dict):
        for key in overrides:
            if key not in known:
                raise _unknown(key, "overrides")
        items = list(overrides.items())
    else:
        items = [parse_override(s) for s in overrides or []]
    for key, value in items:
        given[key] = (value, "--set")
    task_value, task_where = given.get("task", (known["task"].default, "defaults"))
    task = check_value("task", task_value, known["task"], task_where)
    for key, (_, where) in given.items():
        tasks = known[key].tasks
        if tasks is not None and task not in tasks:
            raise ConfigError(f"{where}: {key} is not a setting of task = {task!r} (it belongs to task "
                              f"{' / '.join(tasks)}); remove it or set task accordingly")
    config = {}
    for key in schema().keys_by_task[task]:
        field = known[key]
        value, where = given.get(key, (field.default_for(task), "defaults"))
        config[key] = check_value(key, value, field, where, task)
    return check_config(table_defaults(config, given))


TABLE_KEYS = ("data.path", "data.label", "data.id", "data.categorical", "vfl.partition", "stream.passes",
              "data.test_fraction", "data.test_path")
"""The keys read only with ``data.name = "table"``."""


def table_defaults(config: dict[str, Any], given: dict) -> dict[str, Any]:
    """``data.name = "table"``: the defaults that follow from the other keys. ``vfl.clients``: the
    clients of ``vfl.partition`` or the client files of ``data.path``; ``rounds`` (ovfl): none, which
    the stream resolves to its rows x ``stream.passes``. Other data: the table keys must not be set."""
    if config.get("data.name") != "table":
        known = schema().fields
        for key in TABLE_KEYS:
            if key in given and given[key][0] != known[key].default:  # a written config has them all
                raise ConfigError(f"{given[key][1]}: {key} is read only with data.name = \"table\"")
        return config
    if "vfl.clients" not in given and "vfl.clients" in config:
        path, partition = config.get("data.path") or "", config.get("vfl.partition")
        n = len(partition.split(";")) if partition else len([p for p in path.split(";") if p.strip()]) - 1
        if n >= 1 and (partition or ";" in path):
            config["vfl.clients"] = n
    if "chfl.clients" not in given and "chfl.clients" in config and ";" in (config.get("data.path") or ""):
        config["chfl.clients"] = len([p for p in config["data.path"].split(";") if p.strip()])
    if "rounds" not in given and "rounds" in config:
        config["rounds"] = None
    return config


def check_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """Checks that involve several keys (the per-key ones are in the fields): the dataset of the
    task, the keys shared by several tasks, then the task's own (``fedstream/<task>/config.py``)."""
    task, data = cfg["task"], cfg["data.name"]
    datasets = schema().datasets_by_task[task]
    if data not in datasets:
        raise ConfigError(f"data.name = {data!r} is not a dataset of task = {task!r}; expected one of "
                          f"{', '.join(datasets)}")
    if any(k.startswith("compression.") for k in cfg):
        CompressionSpec.from_config(cfg)  # the compression keys against each other
    return schema().checks[task](cfg)
