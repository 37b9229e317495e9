"""Every shipped online VFL experiment runs end to end at a CI size and its report renders.

The definitions' own ``small`` scale (20,000 rounds, 5-candidate tuning) takes about a minute per
experiment; here each is shrunk with ``--set``-style overrides to 200 rounds (50 to tune), which runs
the same code paths: tuning, the grid, resume bookkeeping, the report and its figures.
"""

import pytest

from fedstream.errors import DataError
from fedstream.experiments.definition import list_experiments
from fedstream.experiments.report import write_report
from fedstream.experiments.runner import run_experiment

ONLINE = [e.name for e in list_experiments() if e.name.startswith("ovfl-")]


@pytest.mark.parametrize("name", ONLINE)
def test_online_experiment_runs_and_reports(name, data_root, tmp_path):
    exp = next(e for e in list_experiments() if e.name == name)
    sets = [f"data.root={data_root}", "rounds=200", "eval.interval=50", "checkpoint.every=0"]
    try:
        index = run_experiment(exp, scale="small", out=tmp_path, sets=sets, workers=1, tune_rounds=50)
    except DataError as exc:  # SUSY is not in shared/data; its loader is tested on written files
        pytest.skip(f"data for {name} not available: {exc}")
    assert all((tmp_path / r["folder"] / "summary.json").exists() for r in index["runs"])
    report = write_report(tmp_path).read_text()
    assert exp.title in report and "| run |" in report
    assert len(list((tmp_path / "figures").glob("*.png"))) == len(exp.figures)
