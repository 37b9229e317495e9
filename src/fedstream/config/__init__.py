"""Run configuration: schema, presets, loading and validation."""

from typing import Any

from fedstream.config import schema as _schema
from fedstream.config.loader import check_config, list_presets, load_config
from fedstream.fields import Field, flatten, nest

__all__ = ["SCHEMA", "Field", "check_config", "flatten", "list_presets", "load_config", "nest"]


def __getattr__(name: str) -> Any:
    """``SCHEMA``: every config key, gathered from the task registry on first use
    (:func:`fedstream.config.schema.schema`)."""
    if name == "SCHEMA":
        return _schema.schema().fields
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
