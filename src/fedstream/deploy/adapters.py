"""The one place that maps a run's task to its deployment adapter.

Each task package brings an :class:`Adapter` (``ADAPTER`` in ``fedstream.<task>.deploy.adapter``,
named by the task registry's :attr:`fedstream.runs.task.Task.deploy`): its node's data and party,
its server, its checks. Nothing else in :mod:`fedstream.deploy` branches on ``config["task"]``."""

from __future__ import annotations

import importlib
from typing import Any, Protocol

from fedstream.errors import ConfigError
from fedstream.tasks import TASKS, get_task


class Adapter(Protocol):
    """What a task brings to a deployment (see the module doc). The adapters subclass it, so that
    :meth:`runtime_for` and :meth:`frame_limit` have their defaults unless a task says otherwise;
    every other method each adapter defines (``tests/test_tasks.py`` checks)."""

    task: str
    runtime: str  # the runtime `fedstream deploy local` uses unless --runtime says otherwise

    def check(self, config: dict) -> None: ...

    def n_nodes(self, config: dict) -> int: ...

    def node_data(self, config: dict, index: int, *, data_root: str | None, cache_dir) -> Any: ...

    def host(self, config: dict, index: int, *, data, state: dict | None = None) -> Any: ...

    def server(self, config: dict, settings: dict, runtime) -> Any: ...

    def report(self, summary: dict) -> str: ...

    def runtime_for(self, config: dict) -> str:
        """The runtime ``fedstream deploy local`` uses for ``config``: :attr:`runtime`, unless the
        task's modes fit different runtimes."""
        return self.runtime

    def frame_limit(self, config: dict) -> int | None:
        """The bytes past the runtime's base a frame of this run may carry, where the task's frames
        grow with the config's shapes; None: the shared limit, :data:`fedstream.deploy.records.MAX_PAYLOAD`
        (the gRPC runtime's message limit, :func:`fedstream.deploy.runtimes.grpc_wire.message_limit`)."""
        return None


def adapter_for(task: str) -> Adapter:
    """The deployment adapter of ``task``; ConfigError naming the tasks that deploy for any other."""
    # The adapter modules are imported by name when first asked for: CHFL's and batch VFL's import
    # torch (2.7 s measured on a loaded 2-core machine), which an online VFL node, a fresh ClientApp
    # process per message on Flower, must not pay for.
    module = get_task(task).deploy
    if module is None:
        deployable = ", ".join(repr(t.name) for t in TASKS.values() if t.deploy is not None)
        raise ConfigError(f"task = {task!r} does not deploy; these do: {deployable}")
    return importlib.import_module(module).ADAPTER


def default_runtime(config: dict) -> str:
    """The runtime ``fedstream deploy local`` uses for ``config`` unless ``--runtime`` says otherwise
    (the adapter's :meth:`Adapter.runtime_for`)."""
    return adapter_for(config["task"]).runtime_for(config)


def check_deployable(config: dict) -> Adapter:
    """Reject what the network backend does not carry yet, naming the key; return the task's adapter."""
    adapter = adapter_for(config["task"])
    adapter.check(config)
    return adapter
