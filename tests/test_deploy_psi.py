"""Private entity alignment over a deployment's channel (issue 30): the server runs PSI with each
client node in ``psi`` frames on the gRPC stream before setup, and the deployed run on per-party
files (shuffled, partial overlap, foreign ids) is the simulator's: the same models, errors and
training bytes at B = 1. Hostile peers and bad files stop the run with one error naming the party,
and every node ends (none is left waiting)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("grpc")
pytest.importorskip("private_set_intersection.python", reason="openmined-psi: pip install 'fedstream[psi]'")

import fedstream.deploy.psi as deploy_psi  # noqa: E402
from fedstream.alignment.messages import PsiReply  # noqa: E402
from fedstream.alignment.psi import AlignmentClient  # noqa: E402
from fedstream.alignment.session import ClientEndpoint  # noqa: E402
from fedstream.config import load_config  # noqa: E402
from fedstream.deploy.runtimes.grpc import GrpcRuntime  # noqa: E402
from fedstream.errors import DataError, FedstreamError, ProtocolError  # noqa: E402
from fedstream.ovfl.deploy.driver import NetworkVFL  # noqa: E402
from fedstream.ovfl.deploy.parties import server_stream  # noqa: E402
from tests.helpers.grpc_deploy import grpc_nodes  # noqa: E402
from tests.helpers.ovfl_deploy import assert_same_as_simulator, party_models, simulate  # noqa: E402
from tests.test_data_table import write_csv  # noqa: E402
from tests.test_table_alignment import ovfl_config, party_files  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _alignment_matches(got: dict, want: dict) -> None:
    """The same parties, sizes and intersections; the bytes within a few (a Golomb set's size varies
    by a byte with the keys, which are fresh every run)."""
    assert got["server_ids"] == want["server_ids"]
    for g, w in zip(got["clients"], want["clients"], strict=True):
        assert (g["party"], g["ids"], g["shared"]) == (w["party"], w["ids"], w["shared"])
        assert abs(g["bytes_down"] - w["bytes_down"]) <= 8 and abs(g["bytes_up"] - w["bytes_up"]) <= 8


def _ended(nodes) -> None:
    """Every node ended (the server said bye), none with an error."""
    for n in nodes:
        n.thread.join(timeout=30)
        assert not n.thread.is_alive(), "a node was left waiting"
        assert n.error is None, n.error


@pytest.mark.parametrize("policy", [{"activation.name": "full"},
                                    {"activation.name": "random", "activation.p": 0.6},
                                    {"activation.name": "topl", "activation.l": 1, "activation.explore": 3,
                                     "activation.window": 20}])
def test_online_vfl_deployed_with_psi_is_the_simulators(tmp_path, monkeypatch, policy):
    """Shuffled files, client 1 lacking every third id, foreign ids on both: over gRPC (the alignment
    messages cut in 4 KiB pieces) the models are the simulator's bit for bit, and so are the errors,
    training bytes and activation rates; the alignment is reported apart, as simulated."""
    paths, _, _ = party_files(tmp_path)
    config = ovfl_config(paths, **{"model.embedding": 4, "stream.passes": 2, "seed": 1} | policy)
    engine, sizes, want = simulate(dict(config))
    monkeypatch.setattr(deploy_psi, "PIECE", 4096)
    with grpc_nodes(config, tmp_path, timeout=60) as (link, nodes):
        net = NetworkVFL(config, GrpcRuntime(link, node_timeout=30).connect(2), stream=server_stream(config),
                         record_sizes=True)
        net.run()
        reports = net.finish(models=True)
    _ended(nodes)
    got = net.summary()
    assert got["faults"] == []
    assert_same_as_simulator(engine, party_models(net, reports))
    assert net.transport.sizes == sizes
    for key in ("bytes", "activation_rate", "accumulated_error", "interval_errors"):
        assert got[key] == want[key], key
    if policy["activation.name"] == "full":
        assert got["activation_rate"][1] == pytest.approx(40 / 60)  # exactly the events whose id it holds
    _alignment_matches(got["alignment"], want["alignment"])
    # a node process started again (it rejoins) reads its placement back from its store
    from fedstream.deploy.psi import PsiNode
    from fedstream.ovfl.deploy.rows import PartyRows

    again = PsiNode(1, tmp_path / "nodes").place(PartyRows(config, 1), config)
    np.testing.assert_array_equal(again.table.X, nodes[1].node.node.psi.place(PartyRows(config, 1)).table.X)
    assert again.held.sum() == 40


def test_batch_vfl_deployed_with_psi_trains_on_the_rows_every_party_holds(tmp_path):
    from fedstream.vfl.data import load_vertical
    from fedstream.vfl.deploy.data import batch_settings
    from fedstream.vfl.deploy.driver import NetworkBatchVFL
    from fedstream.vfl.deploy.table import load_table_labels
    from tests.helpers.models import assert_same_models
    from tests.helpers.vfl_deploy import ATOL, assert_same_run, deployed_models, simulate_vfl

    paths, _, _ = party_files(tmp_path)
    config = load_config(None, {
        "task": "vfl", "data.name": "table", "data.path": ";".join(map(str, paths)), "data.id": "id",
        "data.label": "label", "vfl.clients": 2, "data.test_fraction": 0.25, "model.hidden": 8,
        "train.epochs": 2, "train.batch_size": 8, "optimizer.lr": 0.05, "seed": 2})
    want, want_models = simulate_vfl(config)
    with grpc_nodes(config, tmp_path, timeout=60) as (link, nodes):
        net = NetworkBatchVFL(config, GrpcRuntime(link).connect(2), labels=load_table_labels(config))
        got = net.run(models=True)
    _ended(nodes)
    assert got["faults"] == []
    assert_same_run(got, want)
    assert_same_models(deployed_models(net), want_models, atol=ATOL)
    simulated = load_vertical(batch_settings(config), None).summary_fields()["alignment"]
    assert got["alignment"]["intersection"] == simulated["intersection"] == 40
    _alignment_matches(got["alignment"], simulated)


def _refused(config, tmp_path, match: str) -> str:
    """The server's error when it aligns with the nodes of ``config``; every node ends."""
    with grpc_nodes(config, tmp_path, timeout=20) as (link, nodes):
        with pytest.raises(FedstreamError) as refused:
            NetworkVFL(config, GrpcRuntime(link, node_timeout=30).connect(2), stream=server_stream(config))
    _ended(nodes)
    text = str(refused.value)
    assert "\n" not in text and match in text, text
    return text


def _on_client(ids_of, change):
    """Wrap ``AlignmentClient.reply``: ``change(reply, client)`` for the client whose ids are ``ids_of``."""
    original = AlignmentClient.reply

    def reply(self, request):
        out = original(self, request)
        return change(out, self) if set(self.ids) == ids_of else out

    return reply


def test_a_client_that_lies_about_its_set_size_is_named(tmp_path, monkeypatch):
    paths, _, _ = party_files(tmp_path)
    ids = {line.split(",")[0] for line in Path(paths[2]).read_text().splitlines()[1:]}
    lie = _on_client(ids, lambda r, _: PsiReply(r.n_items + 20, r.setup, r.response))
    monkeypatch.setattr(AlignmentClient, "reply", lie)
    text = _refused(ovfl_config(paths), tmp_path, "client 1 (c1.csv) announced 65 ids")
    assert isinstance(text, str)


def test_a_malformed_psi_message_is_named(tmp_path, monkeypatch):
    paths, _, _ = party_files(tmp_path)
    original = ClientEndpoint.handle

    def garbled(self, data):
        out = original(self, data)
        return b"FSA1\x02" + b"\x00" * 7 if out is not None and len(self.client.ids) == 65 else out

    monkeypatch.setattr(ClientEndpoint, "handle", garbled)
    _refused(ovfl_config(paths), tmp_path, "client 0 (c0.csv): alignment message")


def test_a_client_file_with_a_repeated_id_is_named(tmp_path):
    paths, server, _ = party_files(tmp_path)
    lines = Path(paths[1]).read_text().splitlines()
    Path(paths[1]).write_text("\n".join([*lines, lines[1]]) + "\n")
    text = _refused(ovfl_config(paths), tmp_path, "client 0 (c0.csv)")
    assert "repeats" in text and "c0.csv" in text


def test_an_empty_intersection_is_the_simulators_error(tmp_path):
    paths, _, _ = party_files(tmp_path)
    write_csv(tmp_path / "c1.csv", "id,d,e,f", [[f"other{k}", "1", "2", "3"] for k in range(10)])
    config = ovfl_config(paths)
    with pytest.raises(DataError) as simulated:
        simulate(dict(config))
    text = _refused(config, tmp_path, "c1.csv (client 1): no id in common")
    assert text == str(simulated.value)


def test_fixed_activation_with_absent_ids_is_refused_in_one_line(tmp_path):
    paths, _, _ = party_files(tmp_path)
    _refused(ovfl_config(paths, **{"activation.name": "fixed", "activation.k": 1}), tmp_path,
             'activation.name = "fixed" with clients that lack some ids is simulated only')


def test_a_setup_without_alignment_is_refused_by_the_node(tmp_path):
    """A server that skips the alignment (an older one) cannot set up a node on a per-party file."""
    from fedstream.deploy.psi import PsiNode
    from fedstream.ovfl.deploy.rows import PartyRows

    paths, _, _ = party_files(tmp_path)
    with pytest.raises(ProtocolError, match="before private entity alignment"):
        PsiNode(0).place(PartyRows(ovfl_config(paths), 0))


def test_a_node_refuses_alignment_requests_out_of_turn_or_malformed(tmp_path):
    """What a hostile or broken server may send a node: each is a ProtocolError (the node's error
    reply), never another exception, and the node's placement stays unset."""
    from fedstream.alignment import AlignmentServer, Intersection, Placement
    from fedstream.deploy.psi import PsiNode, PsiStep
    from fedstream.deploy.records import PSI, Envelope

    paths, server_ids, _ = party_files(tmp_path)
    text = json.dumps(ovfl_config(paths))

    def step(data, **fields):
        return Envelope(PSI, 0, [data], PsiStep(**{"piece": 0, "pieces": 1} | fields).info())

    node = PsiNode(0)
    with pytest.raises(ProtocolError, match="before the run's config"):
        node.handle(step(b"FSA1\x03"))
    with pytest.raises(ProtocolError, match="piece 1"):
        node.handle(step(b"x", config=text, piece=1, pieces=2))
    with pytest.raises(ProtocolError, match="fetch"):
        node.handle(Envelope(PSI, 0, [], PsiStep(pieces=0).info()))
    with pytest.raises(ProtocolError, match="out of turn"):  # an intersection before the request
        node.handle(step(Intersection(("r1",)).encode(), config=text))
    request = AlignmentServer([r[0] for r in server_ids]).request().encode()
    node = PsiNode(0)
    assert len(node.handle(step(request, config=text)).parts) == 1
    with pytest.raises(ProtocolError, match="does not hold"):
        node.handle(step(Intersection(("not-an-id-of-it",)).encode()))
    node = PsiNode(0)
    node.handle(step(request, config=text))
    node.handle(step(Intersection(("r0", "r1")).encode()))
    with pytest.raises(ProtocolError, match="rank 5 of 2"):
        node.handle(step(Placement(np.array([0, 5, -1])).encode()))
    with pytest.raises(ProtocolError, match="placed twice"):
        node.handle(step(Placement(np.array([0, 0])).encode()))
    assert node.placement is None


# -- real processes: fedstream deploy local against fedstream run ----------------------------------
def _cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fedstream", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=900, env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"})


@pytest.mark.slow
@pytest.mark.parametrize("example, keys", [
    ("customers-psi-ovfl.toml", ("accumulated_error", "bytes", "activation_rate", "interval_errors")),
    ("customers-psi-vfl.toml", ("final_accuracy", "bytes")),
])
def test_the_readme_psi_commands_deploy_the_simulated_run(tmp_path, example, keys):
    """The README's PSI block, run as written on real processes (the vfl example in place of the
    ovfl one): `fedstream deploy local` gives `fedstream run`'s models' errors and bytes."""
    from tests.test_own_data import readme_commands

    commands = readme_commands("#### Per-party files with private entity alignment (PSI)")
    assert [c[:3] for c in commands[1:3]] == [["fedstream", "run", "examples/customers-psi-ovfl.toml"],
                                              ["fedstream", "deploy", "local"]]
    outs = []  # (the block's predictions: tests/test_serving_psi.py)
    for n, command in enumerate(commands[1:3]):
        args = [a.replace("customers-psi-ovfl.toml", example) for a in command[1:]]
        args[args.index("--out") + 1] = str(tmp_path / f"run{n}")
        done = _cli(*args)
        assert done.returncode == 0, done.stderr[-2000:]
        outs.append(json.loads((tmp_path / f"run{n}" / "summary.json").read_text()))
    want, got = outs
    for key in keys:
        assert got[key] == want[key], key
    if "per_epoch" in want:
        accuracy = [[r["test_accuracy"] for r in s["per_epoch"]] for s in (got, want)]
        assert accuracy[0] == accuracy[1]
    _alignment_matches(got["alignment"], want["alignment"])
    assert got["alignment"]["seconds"] > 0 and got["faults"] == []


@pytest.mark.slow
def test_deploy_local_with_an_empty_intersection_exits_2_in_one_line(tmp_path):
    paths, _, _ = party_files(tmp_path)
    write_csv(tmp_path / "c1.csv", "id,d,e,f", [[f"other{k}", "1", "2", "3"] for k in range(10)])
    config = tmp_path / "run.toml"
    config.write_text(f'task = "ovfl"\n[data]\nname = "table"\npath = "{";".join(map(str, paths))}"\n'
                      'id = "id"\nlabel = "label"\n[vfl]\nclients = 2\n')
    out = _cli("deploy", "local", str(config), "--out", str(tmp_path / "dep"))
    assert out.returncode == 2, out.stderr[-2000:]
    errors = [line for line in out.stderr.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and "c1.csv (client 1): no id in common" in errors[0], out.stderr[-2000:]
