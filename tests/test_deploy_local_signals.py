"""``fedstream deploy local`` stopped by SIGTERM or Ctrl-C (issue 31, defect 8): its client
processes end with it, none is left retrying (real processes; slow)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.data import write_learnable_mnist
from tests.helpers.ovfl_deploy import overrides

pytest.importorskip("grpc")
pytestmark = pytest.mark.slow


def _processes_of(folder: Path) -> list[int]:
    """The processes whose command line names ``folder`` (the client nodes name their cache in it)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if str(folder) in (entry / "cmdline").read_bytes().decode(errors="replace"):
                    found.append(int(entry.name))
            except OSError:  # gone meanwhile
                pass
    return found


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stopped_deploy_local_leaves_no_client_process(tmp_path, sig):
    out = tmp_path / "out"
    values = overrides(write_learnable_mnist(tmp_path), 10**6) | {"checkpoint.every": 500}
    sets = [item for k, v in values.items() for item in ("--set", f"{k}={v}")]
    (tmp_path / "base.toml").write_text("")
    env = os.environ | {"PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    args = [sys.executable, "-m", "fedstream", "deploy", "local", str(tmp_path / "base.toml"), *sets,
            "--out", str(out)]
    parent = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 300
        while len(children := [p for p in _processes_of(out) if p != parent.pid]) < 2:
            assert parent.poll() is None and time.monotonic() < deadline, parent.stdout.read()
            time.sleep(0.1)
        while not (out / "checkpoint.npz").exists():  # the nodes connected and the run goes on
            assert parent.poll() is None and time.monotonic() < deadline, parent.stdout.read()
            time.sleep(0.1)
        parent.send_signal(sig)
        output, _ = parent.communicate(timeout=120)
        assert parent.returncode != 0, output
        assert [p for p in children if p in _processes_of(out)] == [], f"clients left running; {output}"
    finally:
        if parent.poll() is None:
            parent.kill()
        for pid in _processes_of(out):
            os.kill(pid, signal.SIGKILL)
