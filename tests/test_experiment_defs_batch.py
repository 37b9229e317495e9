"""Experiment definitions of the batch tasks (vfl: the compression paper; chfl: the CHFL paper):
they load, their paper rows are grid points with accuracies as fractions, every grid point resolves,
each runs end to end at small scale and renders its report; and the report's curve and scatter
drawing that these definitions rely on (lines averaged over the other grid keys, x a grid key,
tick labels of a scatter within two decades)."""

from __future__ import annotations

import itertools
import json
import math

import pytest

from fedstream.config import load_config
from fedstream.experiments.definition import (
    list_experiments,
    load_experiment,
    parse_experiment,
)
from tests.helpers.configs import grid_points

VFL = {
    "vfl-compression-mnist": "mnist", "vfl-compression-mnist-cache": "mnist",
    "vfl-compression-fmnist": "fashion_mnist", "vfl-compression-fmnist-cache": "fashion_mnist",
}
CHFL = {
    "chfl-table2": ("covertype_kaggle", "sensorless_subset", "jannis_partial"),
    "chfl-vb5": ("covertype_kaggle", "sensorless_subset", "jannis_partial"),
    "chfl-table3": ("covertype_kaggle",), "chfl-fig4-ratio": ("covertype_kaggle",),
    "chfl-table4-corr": ("covertype_kaggle",), "chfl-stream": ("covertype_kaggle",),
}
ISSUE23 = {"vfl-compression-gap-mnist": "mnist", "vfl-compression-frontier-mnist": "mnist",
           "vfl-compression-frontier-fmnist": "fashion_mnist"}
NEW = sorted(VFL) + sorted(CHFL) + sorted(ISSUE23)
ACCURACY = {"final_accuracy", "best_accuracy", "test_acc", "prequential_acc"}


@pytest.mark.parametrize("name", NEW)
def test_new_definition_loads_and_cites_its_paper(name):
    exp = load_experiment(name)
    assert exp.name == name and exp.path.stem == name
    paper = (
        "vfl_bidirectional_compression_zh.txt"
        if name.startswith("vfl-")
        else "chfl_continual_horizontal_fl.txt"
    )
    assert paper in exp.source
    assert exp.notes.strip(), "interpretations belong in notes"
    assert set(exp.scales) == {"small", "paper"}
    assert exp.figures
    task = "vfl" if name.startswith("vfl-") else "chfl"
    assert load_config(exp.base)["task"] == task
    assert name in {e.name for e in list_experiments()}


@pytest.mark.parametrize("name", NEW)
def test_every_grid_point_resolves_and_paper_rows_are_fractions(name):
    exp = load_experiment(name)
    points = grid_points(exp)
    for scale in exp.scales:  # every combination, cross-key checks too (cache needs a top-k uplink)
        for point in points:
            load_config(exp.base, exp.overrides(scale) | point)
    for table in exp.paper:
        seen = []
        for run, values in table.rows:  # a row may leave grid keys open: it gathers every run it matches
            assert any(all(p[k] == v for k, v in run.items()) for p in points), (table.table, run)
            assert run not in seen, (table.table, run)
            seen.append(run)
            for column, v in zip(table.columns, values):
                if column in ACCURACY and v is not None:
                    assert 0.0 <= v <= 1.0, (table.table, run, column, v)


def test_vfl_scales_and_codec_sets():
    codecs = set()
    for name in VFL:
        exp = load_experiment(name)
        small, paper = (load_config(exp.base, exp.overrides(s)) for s in ("small", "paper"))
        assert small["data.train_rows"] and small["data.test_rows"] and small["train.epochs"] <= 5
        assert (
            paper["data.train_rows"] is None
            and paper["data.test_rows"] is None
            and paper["train.epochs"] == 20  # the plateau (issue 23)
        )
        assert paper["compression.ratio"] == 0.125 and paper["compression.levels"] == 24
        if "mnist-" in name or name.endswith("mnist"):
            for point in grid_points(exp):
                cfg = load_config(exp.base, exp.overrides("paper") | point)
                codecs.add((cfg["compression.up"], cfg["compression.cache"], cfg["compression.down"]))
    # the paper's six settings (figs. 2 and 4, table 2), and the extra runs that separate the effects
    # (scaled signSGD; top-k + quantisation; plain top-k with the cache)
    paper = {("none", False, "none"), ("topk", False, "none"), ("topk-grad", True, "none"),
             ("none", False, "sign"), ("none", False, "quant-huffman"), ("topk-grad", True, "quant-huffman")}
    assert paper <= codecs
    assert codecs - paper == {
        ("topk", False, "sign"),
        ("topk", False, "quant-huffman"),
        ("none", False, "sign-scaled"),
        ("topk", False, "sign-scaled"),
        ("topk", True, "none"),
        ("topk", True, "quant-huffman"),
    }


def test_chfl_paper_scale_is_the_papers_setting():
    for name in CHFL:
        exp = load_experiment(name)
        for point in grid_points(exp):
            cfg = load_config(exp.base, exp.overrides("paper") | point)
            assert cfg["chfl.max_rows"] is None and cfg["chfl.hidden"] == "512,256,128"
            if cfg["chfl.mode"] == "batch":
                assert (cfg["chfl.local_epochs"], cfg["chfl.batch_size"], cfg["chfl.rounds"]) == (5, 64, 3)
            small = load_config(exp.base, exp.overrides("small") | point)
            assert small["chfl.max_rows"] is not None and small["chfl.hidden"] == "64,32"
            if small["chfl.mode"] == "batch":  # the stream reads neither
                assert small["chfl.rounds"] == 1 and small["chfl.local_epochs"] == 1
    t2 = load_experiment("chfl-table2")  # the paper's average: 3 feature splits x 5 runs
    assert t2.grid["chfl.split_index"] == [0, 1, 2] and t2.grid["seed"] == [0, 1, 2, 3, 4]
    vb5 = load_experiment("chfl-vb5")  # V-B5 and FedProx on Table II's very seeds and splits
    assert {k: vb5.grid[k] for k in ("seed", "chfl.split_index", "data.name")} == {
        k: t2.grid[k] for k in ("seed", "chfl.split_index", "data.name")}
    assert t2.grid["chfl.method"] == ["chfl", "local"] and vb5.grid["chfl.method"] == ["concat", "fedprox"]
    assert load_experiment("chfl-table4-corr").overrides("paper")["data.name"] == "helena"


def test_numbers_repeated_across_chfl_tables_agree():
    """Common, Local, CHFL mu = 0 and mu > 0 on covertype, 5 clients, r = 30 %: one row of Tables II,
    III, Fig. 4."""

    def row(name: str, key: tuple) -> dict:
        table = load_experiment(name).paper[0]
        values = next(v for run, v in table.rows if tuple(run.values()) == key)
        return dict(zip(table.columns, values))

    columns = ("test_acc_common", "test_acc_local", "test_acc_mu0", "test_acc_mupos")
    t2, t3, f4 = row("chfl-table2", ("covertype",)), row("chfl-table3", (5,)), row("chfl-fig4-ratio", (0.3,))
    for c in columns:
        assert t2[c] == t3[c] == f4[c] and t2[c] is not None, c
    assert t2["test_acc_mupos"] > max(t2["test_acc_common"], t2["test_acc_local"])  # the paper's headline


# --- each definition end to end at small scale --------------------------------------------------

# further cuts for the test suite (the definitions' own small scales were measured at 3-40 s)
FAST_VFL = ["data.train_rows=800", "data.test_rows=200", "train.epochs=2"]
FAST_CHFL = ["chfl.max_rows=600"]


@pytest.mark.parametrize("name", NEW)
def test_small_scale_runs_end_to_end_and_reports(name, data_root, tmp_path):
    from fedstream.experiments.report import write_report
    from fedstream.experiments.runner import run_experiment

    if name in ("vfl-compression-frontier-mnist", "vfl-compression-frontier-fmnist"):
        pytest.skip("28 runs: the gap definition checks the same wiring ([[grid]] blocks, options)")
    vfl = VFL | ISSUE23
    folders = (vfl[name],) if name in vfl else CHFL[name]
    missing = [f for f in folders if not (data_root / f).is_dir()]
    if missing:
        pytest.skip(f"data folders {missing} not under {data_root}")
    exp = load_experiment(name)
    if len(exp.grid.get("seed", [])) > 1:  # a wiring check: one seed is enough
        exp.grid["seed"] = exp.grid["seed"][:1]
        for block in exp.blocks or []:
            block["seed"] = block["seed"][:1]
    out = tmp_path / name
    sets = [f"data.root={data_root}"] + (FAST_VFL if name in vfl else FAST_CHFL)
    index = run_experiment(exp, scale="small", out=out, sets=sets, workers=1)
    report = write_report(out)
    assert len(index["runs"]) == len(grid_points(exp))
    for run in index["runs"]:
        summary = json.loads((out / run["folder"] / "summary.json").read_text())
        assert summary["config"]["task"] == ("vfl" if name in vfl else "chfl")
        key = "final_accuracy" if name in vfl else "prequential_acc" if name == "chfl-stream" else "test_acc"
        if "diverged_at" in summary:  # +-1 signSGD blows up, as the paper reports (recorded, not fatal)
            assert summary["config"]["compression.down"] == "sign" and "diverged" in summary["error"]
            continue
        assert 0.0 <= summary[key] <= 1.0
        assert (out / run["folder"] / "metrics.csv").read_text().count("\n") >= 2
    text = report.read_text()
    assert "## Every run" in text and "(running)" not in text
    for table in exp.paper:
        section = text.split(f"### {table.table}")[1].split("\n## ")[0]
        first = next(
            line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| run")
        )
        assert first.split(" | ")[1] != "–", f"our value missing in {table.table}: {first}"
    pngs = sorted((out / "figures").glob("*.png"))
    # a frontier against another experiment's runs is drawn only with that folder beside this one
    alone = [f for f in exp.figures if f.compare is None or f.compare.experiment is None]
    assert len(pngs) == len(alone) and all(p.stat().st_size > 10_000 for p in pngs)


# --- the drawing these definitions need -------------------------------------------------------


class _Capture:
    """pyplot, except that ``close`` keeps the figure for inspection."""

    def __init__(self, plt):
        self.plt, self.figures = plt, []

    def __getattr__(self, name):
        return getattr(self.plt, name)

    def close(self, fig):
        self.figures.append(fig)


def _experiment(grid: dict, figure: dict):
    raw = {"name": "t", "title": "t", "source": "test", "base": "chfl-covertype",
           "scale": {"small": {"chfl.rounds": 1}}, "grid": grid, "figure": [figure]}
    return parse_experiment(raw, "test")


def _run(grid: dict, summary: dict | None = None, curve: list[dict] = ()):
    from fedstream.experiments.report import Run

    return Run("-".join(map(str, grid.values())), grid, {"task": "chfl"}, summary, list(curve))


@pytest.fixture
def capture():
    from fedstream.experiments.plots import _pyplot

    pytest.importorskip("matplotlib")
    cap = _Capture(_pyplot())
    yield cap
    for fig in cap.figures:
        cap.plt.close(fig)


def _lines(fig):
    return {
        line.get_label(): (list(line.get_xdata()), list(line.get_ydata())) for line in fig.axes[0].get_lines()
    }


def test_curves_average_the_runs_of_a_line_over_the_other_grid_keys(capture, tmp_path):
    from fedstream.experiments.plots import curves

    exp = _experiment({"chfl.method": ["chfl", "local"], "seed": [0, 1]},
                      {"kind": "curves", "title": "t", "lines": "chfl.method", "x": "tick", "y": "acc"})
    runs = [
        _run({"chfl.method": m, "seed": s}, {}, [{"tick": 10.0, "acc": a}, {"tick": 20.0, "acc": a + 0.1}])
        for m, s, a in [("chfl", 0, 0.5), ("chfl", 1, 0.7), ("local", 0, 0.2), ("local", 1, 0.4)]
    ]
    curves(capture, exp, exp.figures[0], runs, tmp_path / "c.png")
    lines = _lines(capture.figures[0])
    assert set(lines) == {"chfl (mean of 2 runs)", "local (mean of 2 runs)"}
    xs, ys = lines["chfl (mean of 2 runs)"]
    assert xs == [10.0, 20.0] and ys == pytest.approx([0.6, 0.7])
    assert capture.figures[0].axes[0].get_legend().get_title().get_text() == "chfl.method"


def test_curves_keep_one_line_per_run_when_lines_cover_the_grid(capture, tmp_path):
    from fedstream.experiments.plots import curves

    exp = _experiment({"chfl.method": ["chfl", "local"]},
                      {"kind": "curves", "title": "t", "lines": "chfl.method", "x": "tick", "y": "acc"})
    runs = [
        _run({"chfl.method": m}, {}, [{"tick": 10.0, "acc": a}]) for m, a in [("chfl", 0.5), ("local", 0.3)]
    ]
    curves(capture, exp, exp.figures[0], runs, tmp_path / "c.png")
    assert _lines(capture.figures[0]) == {"chfl": ([10.0], [0.5]), "local": ([10.0], [0.3])}


def test_curves_against_a_grid_key_plot_a_summary_column(capture, tmp_path):
    from fedstream.experiments.plots import curves

    exp = _experiment(
        {"chfl.common_ratio": [0.1, 0.3], "chfl.method": ["chfl", "common"], "seed": [0, 1]},
        {"kind": "curves", "title": "t", "lines": "chfl.method", "x": "chfl.common_ratio", "y": "test_acc"},
    )
    runs = [_run({"chfl.common_ratio": r, "chfl.method": m, "seed": s},
                 {"test_acc": r + (0.5 if m == "chfl" else 0) + s / 10})
            for r in (0.3, 0.1) for m in ("chfl", "common") for s in (0, 1)]  # out of grid order on purpose
    runs.append(
        _run({"chfl.common_ratio": 0.1, "chfl.method": "chfl", "seed": 2}, None)
    )  # not finished: left out
    curves(capture, exp, exp.figures[0], runs, tmp_path / "c.png")
    lines = _lines(capture.figures[0])
    assert lines["chfl (mean of 2 runs)"][0] == [0.1, 0.3]
    assert lines["chfl (mean of 2 runs)"][1] == pytest.approx([0.65, 0.85])
    assert lines["common (mean of 2 runs)"][1] == pytest.approx([0.15, 0.35])
    assert list(capture.figures[0].axes[0].get_xticks()) == pytest.approx([0.1, 0.3])


def test_curves_against_a_categorical_grid_key(capture, tmp_path):
    from fedstream.experiments.plots import curves

    exp = _experiment(
        {"chfl.split": ["max-corr", "min-corr"], "chfl.method": ["chfl", "local"]},
        {"kind": "curves", "title": "t", "lines": "chfl.method", "x": "chfl.split", "y": "test_acc"},
    )
    runs = [_run({"chfl.split": k, "chfl.method": m}, {"test_acc": 0.1 * i}) for i, (k, m) in
            enumerate(itertools.product(["max-corr", "min-corr"], ["chfl", "local"]))]
    curves(capture, exp, exp.figures[0], runs, tmp_path / "c.png")
    fig = capture.figures[0]
    fig.canvas.draw()
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["max-corr", "min-corr"]
    assert _lines(fig)["local"][1] == pytest.approx([0.1, 0.3])


def test_one_two_five_tick_labels():
    from fedstream.experiments.plots import _one_two_five

    assert [_one_two_five(v) for v in (1, 2, 3, 5, 20000, 0.5, 0.3, 1e6, 0)] == \
        ["1", "2", "", "5", "20000", "0.5", "", "1e+06", ""]
    assert math.isclose(float(_one_two_five(0.2)), 0.2)


@pytest.mark.parametrize(
    "low, high, labelled", [(3.7, 39.0, True), (1465.0, 78125.0, True), (0.01, 500.0, False)]
)
def test_scatter_labels_more_than_decades_within_two_decades(capture, tmp_path, low, high, labelled):
    from fedstream.experiments.plots import scatter

    exp = _experiment({"chfl.method": ["chfl", "local"]},
                      {"kind": "scatter", "title": "t", "x": "total_mb", "y": "test_acc"})
    runs = [_run({"chfl.method": m}, {"test_acc": 0.5, "bytes": {"total": mb * 2**20, "up": 0, "down": 0}})
            for m, mb in [("chfl", low), ("local", high)]]
    scatter(capture, exp, exp.figures[0], runs, tmp_path / "s.png")
    fig = capture.figures[0]
    fig.canvas.draw()
    ax = fig.axes[0]
    minor = [t.get_text() for t in ax.get_xticklabels(minor=True) if t.get_text()]
    texts = [t.get_text() for t in ax.get_xticklabels() if t.get_text()] + minor
    if labelled:  # e.g. 5, 10, 20 (batch VFL codecs) or 2000, 5000, ..., 50000 (online VFL tables)
        assert len(texts) >= 3, texts
    else:  # beyond two decades: decade labels only, as before
        assert not minor


def test_scatter_of_an_experiment_with_no_finished_run_draws_an_empty_linear_axis(capture, tmp_path):
    """While every run is still going there is nothing positive to put on a log axis; the report of a
    running experiment must still render (it used to raise matplotlib's 'cannot be log-scaled')."""
    from fedstream.experiments.plots import scatter

    exp = _experiment({"chfl.method": ["chfl", "local"]},
                      {"kind": "scatter", "title": "t", "x": "total_mb", "y": "test_acc"})
    runs = [_run({"chfl.method": m}, None) for m in ("chfl", "local")]
    scatter(capture, exp, exp.figures[0], runs, tmp_path / "s.png")
    fig = capture.figures[0]
    fig.canvas.draw()
    assert fig.axes[0].get_xscale() == "linear"


# --- [[grid]] blocks (issue 23: seeds for some rows, settings that exclude each other) -------------
def _vfl_raw(grid) -> dict:
    return {"name": "t", "title": "t", "source": "test", "base": "vfl-mnist",
            "scale": {"small": {"train.epochs": 1}}, "grid": grid}


def test_grid_blocks_are_the_union_of_their_products_without_repeats():
    exp = parse_experiment(_vfl_raw([
        {"compression.up": ["none", "topk"], "compression.cache": [False], "seed": [0]},
        {"compression.up": ["topk"], "compression.cache": [True, False], "seed": [0, 1]},
    ]), "test")
    assert exp.points() == [
        {"compression.up": "none", "compression.cache": False, "seed": 0},
        {"compression.up": "topk", "compression.cache": False, "seed": 0},
        {"compression.up": "topk", "compression.cache": True, "seed": 0},
        {"compression.up": "topk", "compression.cache": True, "seed": 1},
        {"compression.up": "topk", "compression.cache": False, "seed": 1},
    ]
    assert exp.grid == {"compression.up": ["none", "topk"], "compression.cache": [False, True],
                        "seed": [0, 1]}
    assert grid_points(exp) == exp.points()


def test_grid_blocks_must_name_the_same_keys_and_each_run_must_resolve():
    from fedstream.errors import ConfigError

    with pytest.raises(ConfigError, match="same keys"):
        parse_experiment(_vfl_raw([{"seed": [0]}, {"compression.up": ["topk"]}]), "test")
    with pytest.raises(ConfigError, match="compression.cache = true needs compression.up"):
        parse_experiment(_vfl_raw([{"compression.up": ["none"], "compression.cache": [True]}]), "test")
