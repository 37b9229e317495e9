"""Predictions by id on per-party files aligned by PSI (issue 30, part 2): a client's rows for an id are
encoded exactly as the training encoded that id, by ``fedstream predict --ids`` (the simulator) and by
``fedstream deploy predict`` (the deployed nodes, each from its own file and saved model).

The files here have the PSI shape (shuffled rows, partial overlap, ids the server never saw), and a
small ``data.stats_rows``: a client's training statistics are those of the first training rows (in
the server's order) that it holds, not of its own file's first rows, so an encoding by its file's
order shows. The truth is what the training saw: the simulator's stream rows
(:meth:`~fedstream.data.table_source.TableSource.features`), batch VFL's train and test rows.
"""

from __future__ import annotations

import csv
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("grpc")
pytest.importorskip("private_set_intersection.python", reason="openmined-psi: pip install 'fedstream[psi]'")

from fedstream.config import load_config  # noqa: E402
from fedstream.deploy.serving import serve_in_process  # noqa: E402
from fedstream.predict import predict_run  # noqa: E402
from fedstream.predict.ids import id_keys, id_positions, source_block  # noqa: E402
from tests.test_deploy_serving import deploy_in_process, simulate, write_ids  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PARTIES = {
    "bank": ["income", "balance", "loans", "card_spend"],
    "shop": ["visits", "basket", "returns", "channel"],
    "telecom": ["minutes", "data_gb", "tenure", "late_payments"],
}


def psi_files(folder: Path, rows: int, seed: int = 7) -> tuple[list[Path], dict]:
    """examples/customers.csv's first ``rows`` rows as per-party files in the PSI shape: each file
    shuffled on its own, each client holding about 85 % of the server's ids, foreign ids (some held
    by every client, some by one); and who holds what (``{"server": ids, party: ids}``)."""
    with open(ROOT / "examples" / "customers.csv") as f:
        customers = list(csv.DictReader(f))[:rows]
    rng = random.Random(seed)
    server = customers[:]
    rng.shuffle(server)
    paths, held = [folder / "server.csv"], {"server": [r["id"] for r in server]}
    with open(paths[0], "w", newline="") as f:
        csv.writer(f).writerows([["id", "segment"], *([r["id"], r["segment"]] for r in server)])
    common = [dict(rng.choice(customers), id=f"G{k:03d}") for k in range(4)]  # every client, not the server
    for m, (party, columns) in enumerate(PARTIES.items()):
        body = rng.sample(customers, round(0.85 * rows)) + common
        body += [dict(rng.choice(customers), id=f"F{m}{k:03d}") for k in range(rows // 10)]
        rng.shuffle(body)
        path = folder / f"{party}.csv"
        with open(path, "w", newline="") as f:
            csv.writer(f).writerows([["id", *columns], *([r["id"], *(r[c] for c in columns)] for r in body)])
        paths.append(path)
        held[party] = [r["id"] for r in body]
    return paths, held


def ovfl_config(paths, **more) -> dict:
    return load_config(None, {
        "task": "ovfl", "data.name": "table", "data.path": ";".join(map(str, paths)), "data.id": "id",
        "data.label": "segment", "data.categorical": "channel", "data.stats_rows": 40, "stream.passes": 1,
        "model.embedding": 4, "activation.name": "full", "eval.interval": 40, "seed": 5} | more)


def vfl_config(paths, **more) -> dict:
    return load_config(None, {
        "task": "vfl", "data.name": "table", "data.path": ";".join(map(str, paths)), "data.id": "id",
        "data.label": "segment", "data.categorical": "channel", "data.test_fraction": 0.25,
        "model.hidden": 8, "train.epochs": 2, "train.batch_size": 16, "optimizer.lr": 0.05, "seed": 2} | more)


def served_encoding(served, ids: np.ndarray) -> list[np.ndarray]:
    """What each deployed node embeds for ``ids``: its own file's rows, as it encodes them to serve."""
    out = []
    for m, host in sorted(served.link.hosts.items()):
        out.append(host.encode(host.table, id_positions(host.table, host.config["data.id"], ids)))
    return out


@pytest.fixture(scope="module")
def ovfl_psi(tmp_path_factory):
    """A simulated and a deployed online VFL run on the same PSI-shaped files (tests change neither)."""
    tmp = tmp_path_factory.mktemp("ovfl-psi")
    paths, held = psi_files(tmp, 160)
    config = ovfl_config(paths)
    nodes = deploy_in_process(config, tmp / "deployed")
    sim = simulate(config, tmp / "sim", tmp)
    return config, sim, tmp / "deployed", nodes, held


def some_server_ids(held: dict, n: int) -> list[str]:
    """``n`` ids of the server's file, late ones first (past the statistics' rows), among them ids
    that some client lacks."""
    server = held["server"]
    lacking = [i for i in server if any(i not in set(held[p]) for p in PARTIES)]
    return list(dict.fromkeys(server[::-7][:n - 3] + lacking[:3]))


def test_ovfl_predict_by_id_is_the_training_s_forward_pass(ovfl_psi, tmp_path):
    """For ids of the server's file, `fedstream predict --ids` and the deployed nodes encode each
    client's rows exactly as the training's stream rows of those ids (an absent client: zeros), and
    the predictions are the final parties' forward pass on those stream rows."""
    from fedstream.ovfl.inference import predict_proba
    from fedstream.predict.ovfl import load_final
    from fedstream.transport import InProcessTransport

    config, sim, run, nodes, held = ovfl_psi
    ids = some_server_ids(held, 24)
    engine = load_final(sim)
    source = engine.stream.source
    assert source.held is not None and not source.held.all()  # some client lacks some ids
    truth = source.features(np.array([held["server"].index(i) for i in ids]))  # what the training saw
    keys = id_keys(ids)
    for m, block in enumerate(source.blocks):
        assert np.array_equal(source_block(source, config, m, keys).X, truth[:, block])
    want = predict_proba(engine.server, engine.clients, [truth[:, b] for b in source.blocks],
                         InProcessTransport(len(engine.clients)), engine.t)
    assert np.array_equal(predict_run(sim, ids=write_ids(tmp_path / "ids.csv", ids)).proba, want)
    served = serve_in_process(run, nodes)
    assert np.array_equal(served.predict(ids).predictions.proba, want)
    for m, got in enumerate(served_encoding(served, keys)):
        assert np.array_equal(got, truth[:, source.blocks[m]]), f"client {m}: not the training's encoding"


def test_ovfl_deployed_predict_equals_simulated_predict_on_psi_files(ovfl_psi, tmp_path):
    """Bit for bit, for ids every client holds, ids some client lacks (padded), ids only clients
    hold (foreign to the server), and an id nobody holds."""
    _, sim, run, nodes, held = ovfl_psi
    ids = some_server_ids(held, 20) + ["G000", "G003", "F0001", held["telecom"][0], "NOPE"]
    want = predict_run(sim, ids=write_ids(tmp_path / "ids.csv", ids))
    served = serve_in_process(run, nodes).predict(ids)
    assert served.predictions.ids.tolist() == want.ids.tolist() == ids
    assert np.array_equal(served.predictions.proba, want.proba)
    assert served.predictions.labels == want.labels
    assert served.absent[-1] == [0, 1, 2] and served.absent[ids.index("F0001")] == [1, 2]


def test_vfl_deployed_predict_equals_simulated_predict_and_the_training_rows(tmp_path):
    """Batch VFL on PSI-shaped files: both predict paths encode an id's rows as its training (or
    test) row, and the deployed predictions are the simulated ones within 1e-6."""
    from fedstream.data import resolve_data_root
    from fedstream.predict.files import run_summary
    from fedstream.vfl.data import load_vertical
    from fedstream.vfl.settings import BatchVFLSettings

    paths, held = psi_files(tmp_path, 160, seed=11)
    config = vfl_config(paths)
    nodes = deploy_in_process(config, tmp_path / "deployed")
    sim = simulate(config, tmp_path / "sim", tmp_path)
    settings = BatchVFLSettings.from_config(run_summary(sim)["config"]).resolved()
    data = load_vertical(settings, resolve_data_root(config["data.root"]))
    kept = np.array(held["server"])[data.source.alignment.kept]  # the ids every party holds, played order
    rows = np.concatenate([data.train_x, data.test_x])  # what the training (and its test) saw
    pick = list(range(0, len(kept), 5)) + [len(kept) - 1]  # train rows and the held-out test rows
    ids = [str(i) for i in kept[pick]] + ["G001", "G002"]  # and ids only the clients hold
    keys = id_keys(ids)
    served = serve_in_process(tmp_path / "deployed", nodes)
    for m, strip in enumerate(data.strips):
        assert np.array_equal(source_block(data.source, config, m, keys).X[:len(pick)], rows[pick][:, strip])
    want = predict_run(sim, ids=write_ids(tmp_path / "ids.csv", ids))
    got = served.predict(ids)
    assert np.allclose(got.predictions.proba, want.proba, rtol=0, atol=1e-6)
    assert got.predictions.labels == want.labels
    for m, enc in enumerate(served_encoding(served, keys)):
        assert np.array_equal(enc, source_block(data.source, config, m, keys).X), f"client {m}"


def test_a_node_without_its_saved_alignment_says_so(ovfl_psi, tmp_path):
    import shutil

    from fedstream.errors import FedstreamError

    _, _, run, nodes, _ = ovfl_psi
    copy = tmp_path / "nodes"
    shutil.copytree(nodes, copy)
    for p in copy.glob("psi-*-2.npy"):
        p.unlink()
    with pytest.raises(FedstreamError, match="client 2: .*no saved alignment of the run's files"):
        serve_in_process(run, copy)


@pytest.mark.slow
def test_readme_psi_commands_simulated_and_deployed_predict_alike(tmp_path):
    """The README's PSI block, run as written on real processes in a copy of examples/: make the
    files, run simulated and deployed, predict the server file's first 40 ids both ways; the two
    CSVs are the same, byte for byte (the block's own `cmp`)."""
    import os
    import re
    import shutil

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("#### Per-party files with private entity alignment (PSI)\n", 1)[1]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    lines = [line for line in block.splitlines() if line.strip()]
    assert len(lines) < 10 and any("deploy predict" in line for line in lines)
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    for line in lines:
        line = re.sub(r"^fedstream ", f"{sys.executable} -m fedstream ", line)
        line = re.sub(r"^python ", f"{sys.executable} ", line)
        done = subprocess.run(["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, line + "\n" + done.stdout[-2000:] + done.stderr[-2000:]
    with open(tmp_path / "examples" / "parties-psi" / "server.csv") as f:
        ids = [r["id"] for r in csv.DictReader(f)][:40]
    sim, dep = (tmp_path / "sim.csv").read_text(), (tmp_path / "dep.csv").read_text()
    assert [row.split(",")[0] for row in sim.splitlines()[1:]] == ids
    assert dep == sim
    assert "same predictions" in done.stdout
