"""Run configuration: schema, presets, loading and validation."""

from fedstream.config.loader import check_config, list_presets, load_config
from fedstream.config.schema import SCHEMA
from fedstream.fields import Field, flatten, nest

__all__ = ["SCHEMA", "Field", "check_config", "flatten", "list_presets", "load_config", "nest"]
