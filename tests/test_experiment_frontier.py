"""Frontier and gap figures: runs against a reference run (traffic saved, accuracy gap in points), the
Pareto frontier, the best configuration and its preset file; the definition checks of their keys.

The end-to-end tests run tiny batch VFL experiments (a written 400-image MNIST, 1 epoch) and render
their reports; the rest works on hand-made runs whose numbers are known.
"""

from __future__ import annotations

import json

import pytest

from fedstream.cli import main
from fedstream.config import load_config
from fedstream.errors import ConfigError
from fedstream.experiments.definition import load_experiment, parse_experiment
from fedstream.experiments.frontier import Comparison, best, compare, pareto
from fedstream.experiments.report import Run, write_report
from fedstream.experiments.runner import run_experiment
from tests.helpers.data import write_learnable_mnist_splits

BASE = load_config("vfl-mnist")
REFERENCE = {"compression.up": "none", "compression.down": "none"}


def _run(name: str, acc: float, mb: float, *, seed: int = 0, done: bool = True, **config) -> Run:
    """A finished batch VFL run of the vfl-mnist preset with the given accuracy and bytes per client."""
    cfg = BASE | {"seed": seed} | config
    grid = {k: v for k, v in config.items()} | {"seed": seed}
    summary = {"final_accuracy": acc, "bytes_per_client": mb * 2**20} if done else None
    return Run(name, grid, cfg, summary, [])


def _refs() -> list[Run]:
    return [_run("none-0", 0.97, 100.0, seed=0), _run("none-1", 0.95, 100.0, seed=1)]


def test_each_run_is_paired_with_the_reference_of_its_seed():
    runs = [_run("a0", 0.965, 20.0, seed=0, **{"compression.up": "topk"}),
            _run("a1", 0.93, 10.0, seed=1, **{"compression.up": "topk"})]
    points, notes = compare(Comparison(REFERENCE, target=-0.5), runs, _refs(), "bytes_per_client_mb",
                            "final_accuracy")
    (p,) = points
    assert p.seeds == [0, 1] and notes == []
    assert p.gaps == pytest.approx([-0.5, -2.0])  # 96.5 - 97 and 93 - 95, not against the mean
    assert p.gap == pytest.approx(-1.25) and p.gap_std == pytest.approx(0.75)
    assert p.traffic_saved == pytest.approx(0.85)  # (0.8 + 0.9) / 2


def test_a_reference_of_other_settings_or_an_unfinished_run_is_not_used():
    runs = [_run("a0", 0.96, 20.0, seed=0, **{"compression.up": "topk", "train.epochs": 3}),
            _run("b0", 0.96, 20.0, seed=0, done=False, **{"compression.up": "topk"})]
    points, notes = compare(Comparison(REFERENCE, target=-0.5), runs, _refs(), "bytes_per_client_mb",
                            "final_accuracy")
    assert points == []
    assert any("a0: no finished reference run" in n for n in notes)
    assert any("1 run(s) not finished" in n for n in notes)


def test_a_run_written_before_a_key_existed_pairs_when_the_other_has_its_default():
    old = _run("a0", 0.965, 20.0, seed=0, **{"compression.up": "topk"})
    del old.config["device"]  # a run from before the `device` key; its reference has the default
    other = _run("b0", 0.965, 20.0, seed=0, **{"compression.up": "topk", "device": "cpu"})
    del other.config["device"]
    refs = [_run("none-0", 0.97, 100.0, seed=0, device="cpu")]  # not the default: no pair
    comp = Comparison(REFERENCE, target=-0.5)
    points, notes = compare(comp, [old], _refs(), "bytes_per_client_mb", "final_accuracy")
    assert [p.seeds for p in points] == [[0]] and notes == []
    points, notes = compare(comp, [other], refs, "bytes_per_client_mb", "final_accuracy")
    assert points == [] and any("b0: no finished reference run" in n for n in notes)


def _points(*pairs):
    runs = [_run(f"r{i}", 0.97 + gap / 100, 100.0 * (1 - saved),
                 **{"compression.up": "topk", "compression.ratio": 0.1 * (i + 1)})
            for i, (saved, gap) in enumerate(pairs)]
    points, _ = compare(Comparison(REFERENCE, target=-0.5), runs, _refs()[:1], "bytes_per_client_mb",
                        "final_accuracy")
    return points


def test_pareto_keeps_the_points_no_other_beats_on_both_counts():
    points = _points((0.5, -0.1), (0.8, -0.4), (0.7, -0.6), (0.9, -2.0), (0.4, -0.3))
    front = pareto(points)
    assert [(round(p.traffic_saved, 2), round(p.gap, 2)) for p in front] == [(0.5, -0.1), (0.8, -0.4),
                                                                            (0.9, -2.0)]


def test_best_is_the_most_saved_within_the_target_else_the_closest():
    points = _points((0.5, -0.1), (0.8, -0.4), (0.9, -2.0))
    chosen, reached = best(points, -0.5)
    assert reached and chosen.traffic_saved == pytest.approx(0.8)
    chosen, reached = best(points, -0.05)
    assert not reached and chosen.gap == pytest.approx(-0.1)


def _definition(name: str, figures: list[dict], grid: dict, **extra) -> dict:
    return {"name": name, "title": name, "source": "test", "base": "vfl-mnist",
            "scale": {"small": {"train.epochs": 1, "data.train_rows": 300, "data.test_rows": 100}},
            "grid": grid, "figure": figures, **extra}


def test_the_definition_checks_the_comparison_keys():
    frontier = {"kind": "frontier", "title": "f", "reference": REFERENCE}
    grid = {"compression.up": ["none", "topk"]}
    with pytest.raises(ConfigError, match="needs 'target'"):
        parse_experiment(_definition("x", [frontier], grid), "x.toml")
    with pytest.raises(ConfigError, match="not config keys"):
        parse_experiment(_definition("x", [frontier | {"target": -0.5, "reference": {"compression.upp": 1}}],
                                     grid), "x.toml")
    with pytest.raises(ConfigError, match="apply to kind"):
        parse_experiment(_definition("x", [{"kind": "scatter", "title": "s", "target": -0.5}], grid),
                         "x.toml")
    with pytest.raises(ConfigError, match=r"rows\[0\]"):
        parse_experiment(_definition("x", [{"kind": "gap", "title": "g", "reference": REFERENCE,
                                            "rows": [{"run": {"compression.up": "topk"}}]}], grid), "x.toml")


@pytest.mark.parametrize("name", ["vfl-compression-frontier-mnist", "vfl-compression-frontier-fmnist",
                                  "vfl-compression-gap-mnist", "vfl-compression-options-mnist",
                                  "vfl-compression-best"])
def test_shipped_definitions_have_their_comparison(name):
    kinds = {f.kind for f in load_experiment(name).figures}
    assert kinds & {"frontier", "gap"}


def test_the_shipped_best_preset_is_the_configuration_the_best_experiment_measured():
    """vfl-mnist-compressed = the third block of vfl-compression-best (its measured settings), at the
    paper scale's 20 epochs (the options sweep ran the same setting); vfl-fashion-mnist-compressed =
    its fourth block on Fashion-MNIST."""
    preset = load_config("vfl-mnist-compressed")
    exp = load_experiment("vfl-compression-best")
    point = exp.points()[12] | {"seed": 0, "data.name": "mnist"}
    measured = load_config(exp.base, exp.overrides("paper") | point)
    assert preset == measured
    options = load_experiment("vfl-compression-options-mnist")
    setting = {k: v for k, v in exp.points()[12].items() if k.startswith("compression.")}
    assert any(setting.items() <= p.items() for p in options.points())
    fashion = load_config("vfl-fashion-mnist-compressed")  # the fourth block, on Fashion-MNIST
    point = exp.points()[-1] | {"seed": 0}
    assert point["data.name"] == "fashion-mnist"
    assert fashion == load_config(exp.base, exp.overrides("paper") | point)


@pytest.fixture(scope="module")
def vfl_root(tmp_path_factory):
    """A small learnable MNIST, train (300 images) and test (100), for batch VFL runs of a second."""
    return write_learnable_mnist_splits(tmp_path_factory.mktemp("data"), 300, noise=60)


def _write(tmp_path, raw: dict):
    """The definition written as TOML and loaded from its file (the report finds it by path)."""
    path = tmp_path / f"{raw['name']}.toml"
    path.write_text(_toml(raw))
    return load_experiment(path)


def test_frontier_against_another_experiment_and_gap_in_one_end_to_end(vfl_root, tmp_path, capsys):
    sets = [f"data.root={vfl_root}"]
    ref = _write(tmp_path, _definition("tiny-ref", [], {"compression.up": ["none"]}))
    run_experiment(ref, scale="small", out=tmp_path / "ref", sets=sets, workers=1)
    frontier = {"kind": "frontier", "title": "tiny frontier", "reference": REFERENCE,
                "reference_experiment": "tiny-ref", "target": -100.0}
    exp = _write(tmp_path, _definition("tiny-front", [frontier], {"compression.ratio": [0.125, 0.5]},
                                       set={"compression.up": "topk"}))
    run_experiment(exp, scale="small", out=tmp_path / "front", sets=sets, workers=1)
    assert main(["report", str(tmp_path / "front")]) == 0
    told = capsys.readouterr().out  # `fedstream report` prints the best configuration as a command
    report = (tmp_path / "front" / "report.md").read_text()
    assert "| ratio=0.125 |" in report and "| ratio=0.5 |" in report and "**Best configuration**" in report
    assert "fedstream run vfl-mnist --set compression.up=topk --set compression.ratio=0.125" in told
    preset = tmp_path / "front" / "best-1.toml"
    assert load_config(str(preset)) == load_config("vfl-mnist", {"compression.up": "topk",
                                                                 "compression.ratio": 0.125})
    assert len(list((tmp_path / "front" / "figures").glob("1-*.png"))) == 1

    gap = {"kind": "gap", "title": "tiny gap", "reference": REFERENCE,
           "rows": [{"label": "top-k alone", "run": {"compression.up": "topk"}}]}
    exp = _write(tmp_path, _definition("tiny-gap", [gap],
                                       {"compression.up": ["none", "topk"], "seed": [0, 1]}))
    run_experiment(exp, scale="small", out=tmp_path / "gap", sets=sets, workers=1)
    report = write_report(tmp_path / "gap").read_text()
    row = next(line for line in report.splitlines() if line.startswith("| top-k alone |"))
    assert " ± " in row and row.endswith("| 0, 1 |")
    assert len(list((tmp_path / "gap" / "figures").glob("1-*.png"))) == 1


def test_a_missing_reference_experiment_is_said_in_the_report(tmp_path):
    folder = tmp_path / "front"
    (folder / "runs").mkdir(parents=True)
    frontier = {"kind": "frontier", "title": "f", "reference": REFERENCE, "reference_experiment": "nowhere",
                "target": -0.5}
    exp = _write(tmp_path, _definition("f", [frontier], {"compression.up": ["topk"]}))
    (folder / "experiment.json").write_text(json.dumps({
        "experiment": "f", "definition": str(exp.path), "scale": "small", "runs": []}))
    warnings: list[str] = []
    report = write_report(folder, warn=warnings.append).read_text()
    assert "Not drawn: reference_experiment 'nowhere'" in report and warnings


def _toml(value: dict, prefix: str = "") -> str:
    """A definition dict as TOML (enough for these tests: scalars, lists, inline tables, tables)."""
    def one(v) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, list):
            return "[" + ", ".join(one(x) for x in v) + "]"
        if isinstance(v, dict):
            return "{ " + ", ".join(f"{json.dumps(k)} = {one(x)}" for k, x in v.items()) + " }"
        return repr(v)
    lines = [f"{json.dumps(k)} = {one(v)}" for k, v in value.items()
             if not isinstance(v, dict) and not (isinstance(v, list) and v and isinstance(v[0], dict))]
    for k, v in value.items():
        if isinstance(v, dict) and k != "scale":
            lines += [f"[{k}]"] + [f"{json.dumps(a)} = {one(b)}" for a, b in v.items()]
        elif k == "scale":
            for s, table in v.items():
                lines += [f"[scale.{s}]"] + [f"{json.dumps(a)} = {one(b)}" for a, b in table.items()]
        elif isinstance(v, list) and v and isinstance(v[0], dict):
            for entry in v:
                lines += [f"[[{k}]]"] + [f"{json.dumps(a)} = {one(b)}" for a, b in entry.items()]
    return "\n".join(lines) + "\n"
