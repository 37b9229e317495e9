"""CHFL deployment tests: tiny settings on covertype, the simulator, loopback deployments and the
comparison of their results. Shared by test_deploy_chfl, _chfl_faults and _chfl_resume."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from fedstream.chfl.cohort import LocalCohort
from fedstream.chfl.deploy.data import chfl_config_settings, load_part
from fedstream.chfl.deploy.driver import NetworkCHFL
from fedstream.chfl.plan import prepare
from fedstream.chfl.rounds import BatchRun
from fedstream.chfl.trainer import result_of, variants_of
from fedstream.config import load_config
from fedstream.data.chfl_datasets import SPECS, load_chfl_dataset
from fedstream.deploy.runtimes.loopback import LoopbackLink

CHFL_TINY = {
    "chfl.clients": 3,
    "chfl.max_rows": 600,
    "chfl.hidden": "16,8",
    "chfl.rounds": 2,
    "chfl.local_epochs": 1,
    "chfl.lrs": "0.01",
    "chfl.mus": "0,1",
    "chfl.baselines": "common,concat",
    "seed": 1,
}
# two federations of three rounds: checkpoints after rounds 0 and 1 and at each federation's end
# (test_deploy_chfl_faults, test_deploy_chfl_resume)
FAULTS = {"chfl.rounds": 3, "chfl.lrs": "0.01,0.003"}
_TIMING = {"wall_seconds", "resumed"}  # result keys that differ between equal runs


def chfl_tiny_config(root: Path | str, **extra) -> dict:
    """``chfl-covertype`` with :data:`CHFL_TINY` on the data under ``root``."""
    return load_config("chfl-covertype", CHFL_TINY | {"data.root": str(root)} | extra)


def simulate_chfl(config: dict) -> tuple[dict, dict[str, np.ndarray]]:
    """The simulator (run_on_table's steps): its result and the final global common column."""
    s = chfl_config_settings(config)
    table = load_chfl_dataset(s.dataset, config["data.root"]).table
    ex = prepare(table.X, table.y, s, method=config["chfl.method"], seed=config["seed"],
                 n_classes=SPECS[s.dataset].n_classes)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as run_on_table
    try:
        run = BatchRun(ex.plan, LocalCohort(ex))
        run.run()
        result = result_of(
            run, run.test_choices(variants_of(ex.method, s)), n_rows=ex.n_rows, features=ex.features
        )
    finally:
        torch.set_num_threads(threads)
    return result, dict(run.server.state) if run.server is not None else {}


def chfl_link(
    config: dict, data_root: Path, tmp: Path, cls=LoopbackLink, *, store: bool = True
) -> LoopbackLink:
    """Nodes (rebuilt from their saved state for every request) that read their own part from
    ``data_root`` (cached in ``tmp/cache``) and keep their checkpoints in ``tmp/nodes``."""
    return cls(lambda cfg, m: load_part(cfg, m, data_root=str(data_root), cache_dir=tmp / "cache"),
               config["chfl.clients"], persist=True, store=tmp / "nodes" if store else None)


def server_config(config: dict, tmp: Path) -> dict:
    """``config`` for the server, whose data folder does not exist: it never reads the data."""
    return dict(config, **{"data.root": str(tmp / "the-server-has-no-data")})


def deploy_chfl(
    config: dict, data_root: Path, tmp: Path, link_cls=LoopbackLink
) -> tuple[NetworkCHFL, dict, LoopbackLink]:
    """The deployment's code over an in-process link (:func:`chfl_link`), run: the server, its
    result and the link."""
    link = chfl_link(config, data_root, tmp, link_cls)
    net = NetworkCHFL(server_config(config, tmp), link)
    return net, net.run(), link


def assert_same_result(got: dict, want: dict) -> None:
    """Every key of ``want`` but its timings has the same value in ``got``."""
    for key, value in want.items():
        if key not in _TIMING:
            assert got[key] == value, key
