"""Running Flower in a test: a script in its own Python and process group, and the simulation runtime.

Shared by the deployment tests (online VFL, batch VFL, CHFL): Flower's simulation runtime starts
Ray workers that outlive their parent unless the whole process group is killed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

QUIET = {"FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1"}


def flower_available() -> bool:
    """Whether Flower (the optional extra) is installed."""
    try:
        import flwr  # noqa: F401
    except ImportError:
        return False
    return True


needs_flower = pytest.mark.skipif(
    not flower_available(), reason="Flower is the optional extra: pip install 'fedstream[flower]'"
)


def run_isolated(script: str, timeout: float, cwd: Path) -> subprocess.CompletedProcess:
    """Run ``script`` in its own Python and process group; kill the whole group when done."""
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env=os.environ | QUIET, cwd=cwd, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"timed out after {timeout} s:\n{out.decode(errors='replace')[-3000:]}")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # whatever the run left behind (Ray workers)
        except ProcessLookupError:
            pass
    return subprocess.CompletedProcess(proc.args, proc.returncode, out.decode(errors="replace"))


def run_simulation(config: str, sets: str, out: Path, nodes: int, *, timeout: float,
                   cwd: Path) -> subprocess.CompletedProcess:
    """fedstream's ServerApp (``config`` with the space-separated ``sets``, writing to ``out``, with
    ``audit``) and ``nodes`` ClientApps on Flower's simulation runtime (Ray), isolated."""
    script = textwrap.dedent(f"""
        from flwr.simulation import run_simulation
        from fedstream.deploy.runtimes.flower import make_client_app, make_server_app
        server = make_server_app(config={config!r}, set={sets!r}, out={str(out)!r}, audit=True)
        run_simulation(server_app=server, client_app=make_client_app(), num_supernodes={nodes},
                       backend_config={{"client_resources": {{"num_cpus": 1}},
                                        "init_args": {{"num_cpus": 2, "include_dashboard": False}}}})
    """)
    return run_isolated(script, timeout, cwd)


def as_set(values: dict) -> str:
    """``values`` as the space-separated ``key=value`` of a ServerApp's ``set``."""
    return " ".join(f"{k}={v}" for k, v in values.items())


def flower_app(folder: Path, config: str, values: dict, out: Path, *, reply_timeout: float,
               audit: bool = False) -> Path:
    """A Flower app folder (``fedstream.deploy.local.write_app``) whose ServerApp runs ``config`` (a
    preset; "": the defaults) with the overrides ``values``, writing to ``out``."""
    from fedstream.deploy.local import write_app

    audited = {"audit": True} if audit else {}
    return write_app(folder, {"config": config, "set": as_set(values), "out": str(out), **audited,
                              "reply-timeout": reply_timeout})


def simulated_summary(
    config: str, values: dict, nodes: int, *, timeout: float, tmp_path: Path
) -> tuple[dict, Path]:
    """Run ``config`` with the overrides ``values`` on the simulation runtime; its fault-free
    ``summary.json`` (as read back) and the output folder (``models.npz`` with ``audit``)."""
    pytest.importorskip("flwr", reason="Flower is the optional extra: pip install 'fedstream[flower]'")
    pytest.importorskip("ray", reason="Flower's simulation runtime runs ClientApps on Ray")
    out = tmp_path / "out"
    result = run_simulation(config, as_set(values), out, nodes, timeout=timeout, cwd=tmp_path)
    assert (out / "summary.json").exists(), result.stdout[-3000:]
    got = json.loads((out / "summary.json").read_text())
    assert got["faults"] == []
    return got, out
