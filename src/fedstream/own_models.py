"""Your own PyTorch models for the parties: factories named by a dotted path or passed as callables.

``model.client = "mypkg.models:bottom"`` and ``model.server = "mypkg.models:top"`` (tasks ``vfl``,
``chfl`` and ``ovfl`` with ``model.backend = "torch"``), or the estimators' ``client_model=`` /
``server_model=``, replace fedstream's built-in networks. A factory is called with keyword
arguments only and returns a ``torch.nn.Module``; it may take ``**kwargs`` to ignore those it does
not need. What it receives, per task:

========  ========  =====================================================  ==========================
task      key       keyword arguments                                      the module maps
========  ========  =====================================================  ==========================
vfl       client    ``input_shape`` (one sample's shape: (C, H, W) of an    (n, *input_shape) ->
                    image strip, (d,) of a table block), ``embedding``,     (n, embedding)
                    ``client`` (0-based index), ``clients``
vfl       server    ``input_size`` (= clients x embedding), ``n_classes``,  (n, input_size) ->
                    ``clients``, ``embedding``                              (n, n_classes) logits
ovfl      client    ``input_shape`` ((d,): the client's feature block),     (n, d) -> (n, embedding)
                    ``embedding``, ``client``, ``clients``
ovfl      server    as vfl's server                                         as vfl's server
chfl      server    ``input_size`` (common features), ``n_classes``: the    (n, input_size) ->
                    common column that FedAvg averages                      (n, n_classes) logits
chfl      client    ``input_size`` (the client's unique features, plus the  (n, input_size) ->
                    common ones for chfl.method = local, plus n_classes     (n, n_classes) logits
                    for concat), ``n_classes``, ``client``
========  ========  =====================================================  ==========================

Weights are drawn from the global torch RNG, which fedstream seeds before each party's factory is
called (from ``seed``, in the built-in models' order), so equal configs give equal initial
weights. A path imports from ``sys.path`` and the current folder. A path that does not import, a
callable that refuses these arguments, a return value that is not a module or an output of the
wrong shape is one :class:`~fedstream.errors.ConfigError` before training, naming the key, the
factory and the expected and actual shapes.

This module imports only the standard library (the config loader checks the paths with
:func:`resolve`); torch is imported when a model is built.
"""

from __future__ import annotations

import inspect
import os
import sys
from collections.abc import Callable
from importlib import import_module
from typing import Any

from fedstream.errors import ConfigError

Factory = Callable[..., Any]  # keyword arguments of the table above -> torch.nn.Module
Spec = str | Factory  # a "module:attribute" path, or the callable itself


def name_of(spec: Spec) -> str:
    """The factory as the user would write it: the path as given, a callable's ``module:qualname``."""
    if isinstance(spec, str):
        return spec
    return f"{getattr(spec, '__module__', '?')}:{getattr(spec, '__qualname__', type(spec).__name__)}"


def resolve(spec: Spec, key: str) -> Factory:
    """The callable behind ``spec`` (``"package.module:attribute"``, or ``package.module.attribute``);
    ConfigError naming ``key`` if it does not import or is not callable."""
    if callable(spec):
        return spec
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError(f'{key} = {spec!r}: expected a factory as "package.module:function" or a callable')
    text = spec.strip()
    module_name, sep, attr = text.partition(":")
    if not sep:
        module_name, _, attr = text.rpartition(".")
    if not module_name or not attr:
        raise ConfigError(f'{key} = "{spec}": expected a factory as "package.module:function"')
    if os.getcwd() not in sys.path and "" not in sys.path:  # as uvicorn: a module in the current folder
        sys.path.insert(0, os.getcwd())                     # imports under the console script too
    try:
        module = import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - any failure of the user's module is the user's to fix
        raise ConfigError(f'{key} = "{spec}": cannot import module {module_name!r} '
                          f"({type(exc).__name__}: {exc}); is it installed or on PYTHONPATH?") from None
    target: Any = module
    for part in attr.split("."):
        if not hasattr(target, part):
            raise ConfigError(f'{key} = "{spec}": module {module_name!r} has no attribute {attr!r}')
        target = getattr(target, part)
    if not callable(target):
        raise ConfigError(f'{key} = "{spec}": {attr!r} is a {type(target).__name__}, not a callable '
                          "that returns a torch.nn.Module")
    return target


def check_keys(cfg: dict, keys: tuple[str, ...] = ("model.client", "model.server")) -> None:
    """Resolve the factories a config names (ConfigError for a path that does not import)."""
    for key in keys:
        if cfg.get(key) is not None:
            resolve(cfg[key], key)


def build(spec: Spec, key: str, party: str, **kwargs: Any):
    """Call the factory with ``kwargs`` (ConfigError if its signature refuses them or it does not
    return a ``torch.nn.Module``)."""
    from torch import nn

    factory = resolve(spec, key)
    try:
        inspect.signature(factory).bind(**kwargs)
    except TypeError as exc:
        raise ConfigError(f"{key} = {name_of(spec)} ({party}): the factory is called with keyword arguments "
                          f"{', '.join(kwargs)} ({exc}); give it those parameters or **kwargs") from None
    except ValueError:  # no signature to inspect (a builtin): let the call decide
        pass
    module = factory(**kwargs)
    if not isinstance(module, nn.Module):
        raise ConfigError(f"{key} = {name_of(spec)} ({party}): the factory returned a "
                          f"{type(module).__name__}, expected a torch.nn.Module")
    return module


def check_output(module, spec: Spec, key: str, party: str, input_shape: tuple[int, ...],
                 expected: tuple[int, ...], meaning: str) -> None:
    """Run ``module`` on a zero batch of 2 rows of ``input_shape`` (in eval mode, no gradient, its
    train/eval mode put back) and raise ConfigError unless the output's shape is ``(2, *expected)``.

    ``meaning`` says what the expected shape is in the user's terms (e.g. "(rows, model.embedding)")."""
    import torch

    x = torch.zeros((2, *input_shape))
    was_training = module.training
    module.eval()
    try:
        with torch.no_grad():
            out = module(x)
    except Exception as exc:  # noqa: BLE001 - the user's module refusing its input is the user's to fix
        raise ConfigError(f"{key} = {name_of(spec)} ({party}): the model fails on an input of shape "
                          f"{tuple(x.shape)} (rows, {_shape_text(input_shape)}): {type(exc).__name__}: {exc}"
                          ) from None
    finally:
        module.train(was_training)
    want = (2, *expected)
    got = tuple(out.shape) if isinstance(out, torch.Tensor) else None
    if got != want:
        what = f"shape {got}" if got is not None else f"a {type(out).__name__}"
        raise ConfigError(f"{key} = {name_of(spec)} ({party}): on an input of shape {tuple(x.shape)} the "
                          f"model returns {what}, expected {want} = {meaning}")


def _shape_text(shape: tuple[int, ...]) -> str:
    return ", ".join(str(s) for s in shape)
