"""The gRPC runtime over real processes (issue 19; marked slow): ``fedstream deploy local`` equals the
simulator bit for bit at B = 1 (plaintext and mutual TLS); a client node killed mid-run is padded
and recorded, and started again it rejoins from its checkpoint; a hung one (SIGSTOP) is timed out
and a new process takes its place; a server killed mid-run and
started again with ``--resume`` continues bit for bit while the client processes reconnect."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedstream.config import load_config
from tests.helpers.data import write_learnable_mnist
from tests.helpers.ovfl_deploy import assert_same_as_simulator, load_models, overrides, simulate

pytest.importorskip("grpc")
pytestmark = pytest.mark.slow


def _sets(values: dict) -> list[str]:
    return [f"{k}={v}" for k, v in values.items()]


def _base(tmp: Path) -> str:
    """An empty config file: the defaults, as ``load_config(None, ...)`` in the simulator's run."""
    (tmp / "base.toml").write_text("")
    return str(tmp / "base.toml")


def _cli(*args: str, timeout: float = 600, **kw) -> subprocess.CompletedProcess:
    env = os.environ | {"PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    return subprocess.run([sys.executable, "-m", "fedstream", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, check=False, **kw)


def _wait_for(path: Path, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


@pytest.mark.parametrize("secure", [False, True])
def test_deploy_local_over_grpc_equals_the_simulator(tmp_path, secure):
    values = overrides(write_learnable_mnist(tmp_path), 300)
    engine, sizes, summary = simulate(load_config(None, values))
    sets = [item for s in _sets(values) for item in ("--set", s)]
    done = _cli("deploy", "local", _base(tmp_path), *sets, "--out", str(tmp_path / "out"), "--audit",
                *(["--secure"] if secure else []))
    assert done.returncode == 0, done.stdout + done.stderr
    got = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert got["runtime"] == "grpc" and got["grpc"]["tls"] is secure and got["faults"] == []
    for key in ("bytes", "accumulated_error", "interval_errors", "activation_rate"):
        assert got[key] == summary[key], key
    assert json.loads((tmp_path / "out" / "message_sizes.json").read_text()) == [list(s) for s in sizes]
    assert_same_as_simulator(engine, load_models(tmp_path / "out" / "models.npz"))


def test_a_killed_client_is_padded_and_rejoins_from_its_checkpoint(tmp_path):
    """Client 1's process is SIGKILLed by the server's own thread just before an exchange once the
    first checkpoint is written (so the kill falls inside the run however loaded the machine is); a
    new process is started once the server saw the old stream close, and the server waits for it
    to connect before it goes on (events, no sleeps)."""
    import threading

    from fedstream.deploy.runtimes.grpc_local import GrpcLocalDeployment, serve_server
    from tests.helpers.crashing import scaled_timeout

    values = overrides(write_learnable_mnist(tmp_path), 3000) | {"checkpoint.every": 500}
    config = load_config(None, values)
    out = tmp_path / "out"
    nodes = GrpcLocalDeployment(_base(tmp_path), _sets(values), 2, tmp_path / "deployment",
                                retry_for=120)
    killed, gone, back = threading.Event(), threading.Event(), threading.Event()

    def start_and_harm(link):
        nodes.start(f"127.0.0.1:{link.port}")
        exchange = link.exchange

        def harm(requests, ahead=None):
            if not killed.is_set() and (out / "checkpoint.npz").exists():
                nodes.kill_node(1)  # SIGKILL: its stream closes
                killed.set()
            replies = exchange(requests, ahead)
            deadline = time.monotonic() + scaled_timeout(300)
            while killed.is_set() and not back.is_set() and time.monotonic() < deadline:
                if 1 not in link.available():
                    if not gone.is_set():  # the old stream closed: a new process of client 1
                        gone.set()
                        nodes.start_node(1)
                elif gone.is_set():
                    back.set()
                time.sleep(0.02)
            return replies

        link.exchange = harm

    with nodes:
        serve_server(config, listen="127.0.0.1:0", out=out, on_listen=start_and_harm,
                     reply_timeout=scaled_timeout(30))
    assert killed.is_set() and gone.is_set() and back.is_set()
    s = json.loads((out / "summary.json").read_text())
    # killed between two requests its stream just closes (no request failed): it is left out, padded,
    # and that is a fault of its own (issue 31: every missed event has a fault)
    assert s["rounds"] == 3000 and {f["client"] for f in s["faults"]} == {1}, s["faults"]
    assert s["missed_events"][1] > 0 and s["missed_events"][0] == 0
    assert [r["client"] for r in s["rejoins"]] == [1] and s["rejoins"][0]["node_round"] >= 0
    assert len(s["clients"]) == 2


def test_a_hung_client_is_timed_out_padded_and_replaced_by_a_new_process(tmp_path):
    """Client 1's process is SIGSTOPped by the server's own thread just before an exchange (so the
    hang falls inside the run, however fast or slow the machine): it is timed out because it really
    hangs, never because the machine is busy (the reply time-out is scaled to the load, and a setup
    has its own, longer one). A new process of client 1 is started once the server recorded the
    time-out, and the server waits for it to connect before it goes on (event-driven, no sleeps)."""
    import threading

    from fedstream.deploy.records import Failure
    from fedstream.deploy.runtimes.grpc_local import GrpcLocalDeployment, serve_server
    from tests.helpers.crashing import scaled_timeout

    reply_timeout = scaled_timeout(20.0)  # a healthy node answers a round in milliseconds
    values = overrides(write_learnable_mnist(tmp_path), 3000) | {"checkpoint.every": 500,
                                                                "network.max_missed": 1.0}
    config = load_config(None, values)
    out = tmp_path / "out"
    nodes = GrpcLocalDeployment(_base(tmp_path), _sets(values), 2, tmp_path / "deployment", retry_for=120)
    hung: list[subprocess.Popen] = []
    timed_out, back = threading.Event(), threading.Event()

    def start_and_harm(link):
        nodes.start(f"127.0.0.1:{link.port}")
        exchange = link.exchange

        def harm(requests, ahead=None):
            if not hung and (out / "checkpoint.npz").exists():
                hung.append(nodes.nodes[1])
                nodes.kill_node(1, signal.SIGSTOP)  # it hangs: its stream stays open, nothing answers
            replies = exchange(requests, ahead)
            if hung and not timed_out.is_set() and isinstance(replies.get(1), Failure):
                timed_out.set()
                nodes.start_node(1)  # a new process of client 1 takes the hung one's place
            deadline = time.monotonic() + scaled_timeout(300)
            while timed_out.is_set() and not back.is_set() and time.monotonic() < deadline:
                if 1 in link.available():  # the new process connected: the server sets it up next
                    back.set()
                time.sleep(0.02)
            return replies

        link.exchange = harm

    try:
        with nodes:
            serve_server(config, listen="127.0.0.1:0", out=out, on_listen=start_and_harm,
                         reply_timeout=reply_timeout)
    finally:
        alive = [proc for proc in hung if proc.poll() is None]
        for proc in alive:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert not alive, "the deployment left the replaced, hung process running"
    assert hung and timed_out.is_set() and back.is_set()
    s = json.loads((out / "summary.json").read_text())
    assert s["rounds"] == 3000 and {f["client"] for f in s["faults"]} == {1}, s["faults"]
    # The hang is found by whichever comes first: the reply time-out, or gRPC's keepalive (a stopped
    # process answers no ping, so its stream is closed after 20 + 10 s). Under a heavy load the
    # load-scaled reply time-out is the longer one; both are the hang, neither is the machine's load.
    hang = (f"no reply within {reply_timeout:g} s", "the node's stream closed")
    assert any(h in f["reason"] for f in s["faults"] for h in hang), s["faults"]
    assert s["missed_events"][1] > 0 and s["missed_events"][0] == 0
    assert [r["client"] for r in s["rejoins"]] == [1]


def test_a_killed_server_resumes_bit_for_bit_with_the_same_client_processes(tmp_path):
    from fedstream.deploy.local import free_port
    from fedstream.deploy.runtimes.grpc_local import GrpcLocalDeployment

    values = overrides(write_learnable_mnist(tmp_path), 3000) | {"checkpoint.every": 1000}
    engine, _, summary = simulate(load_config(None, values))
    port, out = free_port(), tmp_path / "out"
    sets = [item for s in _sets(values) for item in ("--set", s)]
    base = _base(tmp_path)
    server = ["serve", "server", base, *sets, "--listen", f"127.0.0.1:{port}", "--out", str(out), "--audit"]
    env = os.environ | {"PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    with GrpcLocalDeployment(base, _sets(values), 2, tmp_path / "deployment", retry_for=120) as nodes:
        first = subprocess.Popen([sys.executable, "-m", "fedstream", *server], env=env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        nodes.start(f"127.0.0.1:{port}")
        _wait_for(out / "checkpoint.npz")
        first.send_signal(signal.SIGKILL)
        first.wait()
        assert not (out / "summary.json").exists()
        done = _cli(*server, "--resume")
        assert done.returncode == 0, done.stdout + done.stderr
    # the last checkpoint before the kill: round 1000, or 2000 on a machine slow to see the first
    at = int(re.search(r"resuming at round (\d+)", done.stdout).group(1))
    assert at in (1000, 2000), done.stdout
    got = json.loads((out / "summary.json").read_text())
    assert got["restarts"] == [{"round": at}] and got["status"] == "succeeded"  # issue 31: recorded
    assert "since its last start" in got["grpc"]["counts"]  # the frames of the resumed process only
    assert got["accumulated_error"] == summary["accumulated_error"] and got["bytes"] == summary["bytes"]
    assert_same_as_simulator(engine, load_models(out / "models.npz"))


def test_a_client_killed_while_the_server_is_stopped_is_a_fault(tmp_path):
    """Issue 31: ``kill -STOP server; kill -9 client; kill -CONT server`` left missed events and no
    fault, and the server's log said "Task exception was never retrieved". Every missed event of a
    client has a fault of that client; nothing is left unretrieved."""
    from fedstream.deploy.local import free_port
    from fedstream.deploy.runtimes.grpc_local import GrpcLocalDeployment

    values = overrides(write_learnable_mnist(tmp_path), 20000) | {"checkpoint.every": 500,
                                                                 "network.max_missed": 1.0}
    port, out, log = free_port(), tmp_path / "out", tmp_path / "server.log"
    sets = [item for s in _sets(values) for item in ("--set", s)]
    server = ["serve", "server", _base(tmp_path), *sets, "--listen", f"127.0.0.1:{port}", "--out", str(out)]
    env = os.environ | {"PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    deployment = GrpcLocalDeployment(_base(tmp_path), _sets(values), 2, tmp_path / "deployment", retry_for=60)
    with deployment as nodes, open(log, "w") as sink:
        first = subprocess.Popen([sys.executable, "-m", "fedstream", *server], env=env, stdout=sink,
                                 stderr=subprocess.STDOUT)
        nodes.start(f"127.0.0.1:{port}")
        _wait_for(out / "checkpoint.npz")
        first.send_signal(signal.SIGSTOP)
        time.sleep(0.5)  # the server stopped mid-exchange, the client idle between two requests
        nodes.kill_node(1)
        time.sleep(0.5)
        first.send_signal(signal.SIGCONT)
        assert first.wait(timeout=600) == 0, log.read_text()[-3000:]
    s = json.loads((out / "summary.json").read_text())
    assert s["missed_events"][1] > 0 and s["missed_events"][0] == 0
    for m, missed in enumerate(s["missed_events"]):
        assert not missed or any(f["client"] == m for f in s["faults"]), (m, s["faults"])
    assert "never retrieved" not in log.read_text()


def test_deploy_local_stops_before_round_0_when_a_client_file_is_spoiled(tmp_path):
    """Issue 31: a nan in the bank's row 6 gave a "successful" run without the bank. Now its node
    says why and ``deploy local`` exits 2 with that one line, before round 0."""
    from tests.test_deploy_table import split_customers, table_config

    paths = split_customers(tmp_path, 60)
    lines = paths[1].read_text().splitlines()  # the bank's file: client 0
    cells = lines[6].split(",")
    lines[6] = ",".join([cells[0], "nan", *cells[2:]])
    paths[1].write_text("\n".join(lines) + "\n")
    config = {k: v for k, v in table_config(paths).items() if k != "task"}
    sets = [item for k, v in config.items() if v is not None and v != load_config(None)[k]
            for item in ("--set", f"{k}={v}")]
    done = _cli("deploy", "local", _base(tmp_path), *sets, "--out", str(tmp_path / "out"), timeout=300)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "clients [0] did not set up (client 0: " in done.stderr and "bank.csv" in done.stderr
    assert "before round 0" in done.stderr
    assert not (tmp_path / "out" / "summary.json").exists()


def test_bench_network_grpc_measures_the_floor_around_every_batch_size(data_root, tmp_path):
    """`fedstream bench network --runtime grpc` in small: the echo floor is measured before each B and
    after the last, on the same client processes, and each B's ratio is to the mean of the two
    floors around it. B = 1 runs twice, with requests ahead and without (the plain path)."""
    from fedstream.bench.network import bench_network_grpc, format_network_grpc

    d = bench_network_grpc(batches=(1, 4), events=64, min_requests=4, echo_rounds=40, profile=False,
                           sets=[f"data.root={data_root}"], workdir=tmp_path / "bench", log=lambda s: None)
    rates = d["floor"]["measured_rounds_per_second"]
    assert len(rates) == 4 and all(r > 0 for r in rates)
    assert [(r["batch"], r["ahead"]) for r in d["rows"]] == [(1, True), (1, False), (4, True)]
    assert d["rows"][0]["requests_ahead_per_event"] > 0 and d["rows"][1]["requests_ahead_per_event"] == 0
    assert d["rows"][0]["payload_bytes_per_event"] == d["rows"][1]["payload_bytes_per_event"]
    for row, (before, after) in zip(d["rows"], zip(rates, rates[1:])):
        assert row["floor_rounds_per_second"] == (before + after) / 2
        assert row["ratio_to_floor"] == row["requests_per_second"] / row["floor_rounds_per_second"]
        assert row["faults"] == 0 and row["tcp_bytes_per_event"] > row["payload_bytes_per_event"]
    assert "before each B and after the last" in format_network_grpc(d)
    assert "*: the plain path" in format_network_grpc(d)
    for row in d["rows"]:  # what each party spent, per request: the server's process and each node's
        assert row["server_cpu_ms_per_request"] > 0 and row["node_cpu_ms_per_request"] >= 0  # (10 ms ticks)
    assert d["floor"]["server_cpu_ms_per_round"] > 0 and d["floor"]["node_cpu_ms_per_round"] >= 0
    assert "CPU ms/req" in format_network_grpc(d)
    engines = d["engine_measured_events_per_second"]  # the engine before and after: x engine is to their mean
    assert len(engines) == 2 and d["engine_events_per_second"] == sum(engines) / 2
    for row in d["rows"]:
        assert row["ratio_to_engine"] == row["events_per_second"] / d["engine_events_per_second"]
