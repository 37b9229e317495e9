"""Shipped experiment definitions (src/fedstream/experiments/defs): they load, their paper rows name
grid points, their smoke scale stays cheap; broken definitions fail with the file and the key."""

import math
from pathlib import Path

import pytest

from fedstream.config import load_config
from fedstream.errors import ConfigError
from fedstream.experiments.definition import SCALES, list_experiments, load_experiment
from tests.helpers.configs import grid_points

SMALL_MAX_ROUNDS = 20000

# the tables and figures of event_driven_online_vfl.md (sections 5.2-5.4, appendix D)
OVFL = {
    "ovfl-table1", "ovfl-table2", "ovfl-table3", "ovfl-table4", "ovfl-table5", "ovfl-table5-random",
    "ovfl-fig5-window", "ovfl-fig6-alpha", "ovfl-fig7-susy", "ovfl-fig8-susy-drift", "ovfl-fig9-higgs",
    "ovfl-fig10-higgs-drift", "ovfl-fig11-8clients", "ovfl-fig12-16clients", "ovfl-fig13-fixed",
}


@pytest.fixture(scope="module")
def experiments():
    """The online VFL experiments (the batch tasks' definitions have their own tests)."""
    return [e for e in list_experiments() if e.name.startswith("ovfl-")]


def test_every_shipped_definition_loads_and_is_named_by_its_file(experiments):
    names = [e.name for e in experiments]
    assert OVFL <= set(names), f"missing: {sorted(OVFL - set(names))}"
    assert len(names) == len(set(names))
    for exp in experiments:
        assert exp.path is not None and exp.path.stem == exp.name
        assert exp.title and exp.source and exp.base
        assert load_experiment(exp.name).path == exp.path


def test_ovfl_definitions_cite_the_paper(experiments):
    for exp in experiments:
        if exp.name in OVFL:
            assert "event_driven_online_vfl.md" in exp.source, exp.name
            assert exp.notes.strip(), f"{exp.name}: interpretations belong in notes"


def test_every_grid_point_resolves_at_every_scale(experiments):
    # the definition loader checks each grid value alone; here every combination (cross-key checks too)
    for exp in experiments:
        for scale in exp.scales:
            for point in grid_points(exp):
                cfg = load_config(exp.base, exp.overrides(scale) | point)
                assert cfg["rounds"] >= cfg["eval.interval"], (exp.name, scale, point)


def test_paper_rows_name_existing_grid_points(experiments):
    for exp in experiments:
        points = grid_points(exp)
        for table in exp.paper:
            seen = []
            for run, values in table.rows:
                assert set(run) == set(exp.grid), (
                    f"{exp.name} {table.table}: row {run} is not a full grid point"
                )
                assert run in points, f"{exp.name} {table.table}: {run} is not a grid point"
                assert run not in seen, f"{exp.name} {table.table}: {run} appears twice"
                seen.append(run)
                assert len(values) == len(table.columns)
                for v in values:
                    assert v is None or (
                        isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                    )
                for column, v in zip(table.columns, values):
                    if column.startswith("activation_rate.") and v is not None:
                        assert 0.0 <= v <= 1.0
                        assert (
                            int(column.split(".")[1])
                            < load_config(exp.base, exp.overrides(next(iter(exp.scales))) | run)[
                                "vfl.clients"
                            ]
                        )


def test_small_scale_stays_cheap_and_paper_scale_is_complete(experiments):
    for exp in experiments:
        assert set(exp.scales) <= set(SCALES)
        small = exp.overrides("small")
        rounds = small.get("rounds", load_config(exp.base)["rounds"])
        interval = small.get("eval.interval", load_config(exp.base)["eval.interval"])
        assert rounds <= SMALL_MAX_ROUNDS, f"{exp.name}: small scale runs {rounds} rounds"
        assert rounds // interval >= 5, f"{exp.name}: small scale has fewer than 5 eval intervals"
        if exp.tune is not None and "small" in exp.tune.rounds:
            assert exp.tune.rounds["small"] <= rounds, f"{exp.name}: small tuning runs longer than the runs"
        if exp.name in OVFL:
            paper = exp.overrides("paper")
            assert paper["rounds"] == 2_000_000 and paper["eval.interval"] == 20000, exp.name


def test_tuned_values_are_valid_config_values(experiments):
    # the definition loader does not check tune values against the schema
    for exp in experiments:
        if exp.tune is not None:
            for value in exp.tune.values:
                load_config(exp.base, exp.overrides("small") | {exp.tune.key: value})


def test_numbers_repeated_across_tables_agree(experiments):
    by_name = {e.name: e for e in experiments}
    rows = lambda name: {tuple(run.values()): values for run, values in by_name[name].paper[0].rows}
    t2, t3 = rows("ovfl-table2"), rows("ovfl-table3")
    assert t3[(0.5,)] == t2[("dlr", "random")]  # Table 3 p = 0.50 is Table 2's DLR-Random
    assert t3[(1.0,)] == t2[("dlr", "full")]  # Table 3 p = 1.00 is Table 2's DLR-Full
    assert rows("ovfl-table5")[(-100.0,)] == [1.0] * 4 and rows("ovfl-table5")[(100.0,)] == [0.0] * 4
    assert rows("ovfl-table5-random")[(1.0,)] == [1.0] * 4


# --- broken definitions -------------------------------------------------------------------------

VALID = """
name = "broken"
title = "A small valid definition"
source = "test"
base = "ovfl-imnist"

[set]
"stream.drift" = "none"

[scale.small]
rounds = 100
"eval.interval" = 20

[grid]
"optimizer.name" = ["ogd", "dlr"]

[[paper]]
table = "Table X"
columns = ["accumulated_error"]
rows = [{ run = { "optimizer.name" = "dlr" }, values = [0.1] }]

[[figure]]
kind = "curves"
title = "curves"
lines = "optimizer.name"
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "broken.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_the_valid_template_loads(tmp_path):
    exp = load_experiment(_write(tmp_path, VALID))
    assert exp.name == "broken" and exp.paper[0].rows[0][0] == {"optimizer.name": "dlr"}


@pytest.mark.parametrize(
    "old, new, key",
    [
        ('base = "ovfl-imnist"', 'base = "ovfl-imnist"\nbasis = "x"', "basis"),  # unknown top-level key
        ('"stream.drift" = "none"', '"stream.drfit" = "none"', "stream.drfit"),  # unknown config key
        (
            'run = { "optimizer.name" = "dlr" }',
            'run = { "optimizer.name" = "slr" }',
            "optimizer.name",
        ),  # not in grid
        ('kind = "curves"', 'kind = "histogram"', "kind"),  # bad figure kind
    ],
)
def test_broken_definitions_name_the_file_and_key(tmp_path, old, new, key):
    assert old in VALID
    path = _write(tmp_path, VALID.replace(old, new))
    with pytest.raises(ConfigError) as info:
        load_experiment(path)
    message = str(info.value)
    assert str(path) in message and key in message, message
