"""Run configuration: schema, presets, loading and validation."""

from fedstream.config.loader import (
    check_config,
    flatten,
    list_presets,
    load_config,
    nest,
)
from fedstream.config.schema import SCHEMA, Field

__all__ = ["SCHEMA", "Field", "check_config", "flatten", "list_presets", "load_config", "nest"]
