"""Links and drivers that crash on purpose, shared by the deployment fault tests.

:class:`CrashOnce` is a :class:`~fedstream.deploy.runtimes.loopback.LoopbackLink` on which one client's node
crashes once; :func:`crash_then_load` kills an online VFL server mid-run and loads a new one from
its checkpoint; :func:`run_with_fault` runs a real local Flower deployment while a thread harms it;
:func:`stop_when` stops a whole deployment, :func:`kill_then_replace` kills a node and starts a new
one in its place, and :func:`run_resumed` runs a deployment again with ``resume``.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from fedstream.deploy.records import Envelope, Failure
from fedstream.deploy.runtimes.loopback import LoopbackLink
from fedstream.ovfl.deploy.driver import NetworkVFL
from tests.helpers.links import ServerCrash


class CrashOnce(LoopbackLink):
    """Client ``client``'s node crashes when the first request :meth:`crashes_on` accepts arrives:
    it loses what it kept in memory (Flower's context.state) and the request fails; the next time
    the server asks (``rejoined``) it is back, once, on a new node."""

    client = 1
    crashed = returned = False

    def crashes_on(self, env: Envelope) -> bool:
        raise NotImplementedError("a CrashOnce link says which request its node crashes on")

    def exchange(self, requests):
        env = requests.get(self.client)
        if env is not None and not self.crashed and self.crashes_on(env):
            self.crashed = True
            del self.memory[self.client]
            others = {m: e for m, e in requests.items() if m != self.client}
            return super().exchange(others) | {self.client: Failure("no reply within 5 s")}
        return super().exchange(requests)

    def rejoined(self):
        if self.crashed and not self.returned:
            self.returned = True
            return {self.client}
        return set()


def crash_then_load(make: Callable[[], NetworkVFL], *, at: int, checkpoint: Path) -> NetworkVFL:
    """Run ``make()`` (an online VFL server) with checkpoints until round ``at``, where it dies; a
    second ``make()`` loads its checkpoint (the same run token) and is returned, not yet run."""
    first = make()

    def crash(t, y, prediction):
        if t == at:
            raise ServerCrash

    with pytest.raises(ServerCrash):
        first.run(on_round=crash, checkpoint=checkpoint)
    second = make()
    second.load(checkpoint)
    assert second.run_token == first.run_token
    return second


def run_with_fault(workdir: Path, app: Path, fault: Callable, *, nodes: int = 2, timeout: float = 900,
                   run_config: dict | None = None) -> tuple[subprocess.CompletedProcess, str]:
    """Run ``app`` on a local Flower deployment of ``nodes`` SuperNodes in ``workdir`` while
    ``fault(deployment, ended)`` acts on it from a thread (``ended`` is set when the run is over);
    return the run's result and the ``flwr run`` log. An exception in ``fault`` fails the test."""
    from fedstream.deploy.local import LocalDeployment

    errors: list[BaseException] = []
    ended = threading.Event()
    with LocalDeployment(nodes, workdir) as deployment:
        def act() -> None:
            try:
                fault(deployment, ended)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        thread = threading.Thread(target=act, daemon=True)
        thread.start()
        result = deployment.run(app, run_config=run_config, timeout=timeout)
        ended.set()
        thread.join(timeout=120)
    assert not errors, errors
    return result, (Path(workdir) / "flwr-run.log").read_text(errors="replace")


def stop_when(condition: Callable[[], bool], what: str) -> Callable:
    """A fault for :func:`run_with_fault`: stop the whole deployment (SuperLink with the ServerApp,
    and the SuperNodes) once ``condition()`` holds (``what`` names it if it never does)."""
    def stop(deployment, ended) -> None:
        wait_for(condition, 600, what, ended=ended)
        deployment.stop()

    return stop


def kill_then_replace(reached: Callable[[], bool], what: str, reply_timeout: float) -> Callable:
    """A fault for :func:`run_with_fault`: once ``reached()`` (``what`` names it if it never does),
    SIGKILL client 1's SuperNode (and its ClientApp); the server times it out meanwhile (its
    ``reply_timeout``), and once it has recorded client 1's fault a new node takes client 1's place."""
    def crash(deployment, ended) -> None:
        wait_for(reached, 600, what, ended=ended)
        deployment.kill_node(1)
        wait_for(fault_logged(deployment.workdir / "flwr-run.log", 1), 4 * reply_timeout + 300,
                 "the server to record client 1's fault", ended=ended)
        deployment.start_node(1)

    return crash


def run_resumed(workdir: Path, app: Path, *, nodes: int = 2,
                timeout: float = 900) -> tuple[subprocess.CompletedProcess, str]:
    """Run ``app`` again with ``resume=true`` on a new local deployment over ``workdir``'s cache
    folders (new processes); return the run's result and its ``flwr run`` log."""
    from fedstream.deploy.local import LocalDeployment

    with LocalDeployment(nodes, workdir) as deployment:
        result = deployment.run(app, run_config={"resume": True}, timeout=timeout)
    return result, (Path(workdir) / "flwr-run.log").read_text(errors="replace")


def wait_for(
    predicate: Callable[[], bool], timeout: float, what: str, *, ended: threading.Event | None = None
) -> None:
    """Poll ``predicate`` every half second; fail after ``timeout`` seconds or once ``ended`` is set
    (the run is over and it never came true)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline or (ended is not None and ended.is_set()):
            pytest.fail(f"{what}: not seen within {timeout} s, or before the run ended")
        time.sleep(0.5)


def scaled_timeout(seconds: float) -> float:
    """``seconds`` (what an idle 2-core machine needs, with a margin) scaled by how busy this
    machine is now: times the load average per core when that is above 1. The Flower fault tests
    take their reply time-out from this, so that a healthy node on a loaded machine is not timed
    out (a request took over 30 s at a load of 7 per core)."""
    try:
        load = os.getloadavg()[0] / (os.cpu_count() or 1)
    except OSError:  # no load average on this platform
        load = 1.0
    return round(seconds * max(1.0, load), 1)  # a tenth of a second: messages quote it


def fault_logged(log: Path, client: int) -> Callable[[], bool]:
    """A condition for :func:`wait_for`: the server has recorded a new fault of ``client`` since
    this was called (one more warning "client M, <request> request for <unit> T: <reason>" in
    the ``flwr run`` log ``log``)."""
    pattern = re.compile(rf"^client {client}, [\w-]+ request for \w+ \d+: ", re.MULTILINE)

    def count() -> int:
        try:
            return len(pattern.findall(log.read_text(errors="replace")))
        except FileNotFoundError:
            return 0

    before = count()
    return lambda: count() > before
