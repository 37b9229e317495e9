"""Public names of a package loaded on first use (PEP 562), for packages whose modules import
PyTorch (1.5-2 s) while the config loader and the command line import the package for its config
keys only.

This module imports only the standard library, so any package's ``__init__`` may use it.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import Any


def lazy_exports(package: str, exports: dict[str, str]) -> Callable[[str], Any]:
    """The module ``__getattr__`` of ``package`` that imports ``package.<exports[name]>`` when
    ``name`` is first asked for, and raises AttributeError for any other name."""

    def __getattr__(name: str) -> Any:
        if name in exports:
            return getattr(import_module(f"{package}.{exports[name]}"), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
