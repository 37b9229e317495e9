"""Experiments as data: one TOML file per table or figure of a paper.

An experiment names a base config (a preset or a config file), the overrides of each scale, a grid
of runs, an optional learning-rate search, the paper's reported values and the figures to draw::

    name = "ovfl-table1"
    title = "Stationary i-MNIST: OGD / SLR / DLR x Full / Random / Event"
    source = "event_driven_online_vfl.md, section 5.2, Table 1 and Figure 2"
    base = "ovfl-imnist"

    [set]                                  # every run, every scale
    "stream.drift" = "none"

    [scale.small]                          # a smoke test in minutes
    rounds = 20000
    "eval.interval" = 2000
    [scale.paper]                          # the paper's size
    rounds = 2000000
    "eval.interval" = 20000

    [grid]                                 # cartesian product; a run is named by its values
    "optimizer.name" = ["ogd", "slr", "dlr"]
    "activation.name" = ["full", "random", "event"]

    # or, instead of [grid], several [[grid]] blocks naming the same keys: the runs are the union
    # of their cartesian products (in order, a repeated run once), for sets of runs that are not
    # one product (e.g. 3 seeds for some rows only, or settings that exclude each other)

    [tune]                                 # optional: one short run per candidate value
    key = "optimizer.lr"
    values = [0.003, 0.01, 0.03]
    metric = "accumulated_error"           # a summary.json field; lower is better
    rounds = { small = 2000, paper = 100000 }
    per = ["optimizer.name", "activation.name"]   # grid keys the choice depends on (default: all)

    [[paper]]                              # the paper's reported values (one entry per table)
    table = "Table 1"
    columns = ["accumulated_error", "client_compute_seconds", "total_mb"]
    rows = [
      { run = { "optimizer.name" = "ogd", "activation.name" = "full" }, values = [0.0575, 4520.0, 1953.13] },
    ]

    [[figure]]                             # what `fedstream report` draws
    kind = "curves"                        # prequential error per eval interval; or "scatter";
                                           # or "frontier" / "gap" against a reference run (frontier.py)
    title = "Run-time error rate, stationary stream (Fig. 2)"
    panels = "activation.name"             # optional: one panel per value of this grid key
    lines = "optimizer.name"               # optional: one line per value (default: one per run)

Columns are summary fields (``accumulated_error``, ``client_compute_seconds``, ...), ``total_mb``
(bytes.total / 2^20, the paper's MB) or ``activation_rate.<m>`` (client m). ``nan`` (TOML has no
null) stands for a value the paper does not give. Scales are ``small`` and ``paper``; a scale may be
omitted only if no run needs it.
Grid values may be strings, numbers or booleans, and ``values`` lists of a ``[tune]`` likewise.
Every key is checked here, with the file, the key and what was expected in the message.
"""

from __future__ import annotations

import difflib
import itertools
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from fedstream.config import load_config
from fedstream.config.schema import schema
from fedstream.errors import ConfigError
from fedstream.experiments.columns import CUMULATIVE_COLUMNS
from fedstream.experiments.frontier import KEYS as COMPARE_KEYS
from fedstream.experiments.frontier import KINDS as COMPARE_KINDS
from fedstream.experiments.frontier import Comparison, parse_comparison

SCALES = ("small", "paper")
TOP_KEYS = {"name", "title", "source", "base", "set", "scale", "grid", "tune", "paper", "figure", "notes"}
TUNE_KEYS = {"key", "values", "metric", "rounds", "per"}
PAPER_KEYS = {"table", "columns", "rows", "caption"}
FIGURE_KEYS = {"kind", "title", "panels", "lines", "x", "y"} | COMPARE_KEYS
FIGURE_KINDS = ("curves", "scatter", *COMPARE_KINDS)
SUMMARY_COLUMNS = (
    "accumulated_error",
    *CUMULATIVE_COLUMNS,
    "rounds_per_second",
    "mean_activation_rate",
    # batch VFL (task = vfl) and CHFL (task = chfl) summaries
    "final_accuracy",
    "best_accuracy",
    "bytes_per_client_mb",
    "test_acc",
    "prequential_acc",
    # batch VFL, best over the epochs (the Dynamic VF-PS report's "maximum so far"), selection cost
    "best_train_accuracy",
    "best_train_loss",
    "best_test_loss",
    "selection_seconds",
    # CHFL: test accuracy by method / variant (a chfl run also reports mu = 0, mu > 0 and the
    # baselines scored in its own federation; see fedstream.chfl.trainer)
    "test_acc_chfl",
    "test_acc_mu0",
    "test_acc_mupos",
    "test_acc_common",
    "test_acc_concat",
    "test_acc_local",
    "test_acc_fedprox",
)


@dataclass
class Tune:
    """A learning-rate (or other key) search: one short run per value and per ``per`` combination."""

    key: str
    values: list
    metric: str
    rounds: dict[str, int]
    per: list[str]


@dataclass
class PaperTable:
    """The paper's reported values: rows keyed by the grid values of a run."""

    table: str
    columns: list[str]
    rows: list[tuple[dict, list]]
    caption: str = ""


@dataclass
class Figure:
    """A figure of the report. Curves plot metrics.csv column ``y`` against ``x`` (online VFL:
    interval error per round; batch VFL: test_accuracy per epoch or per bytes_total); a scatter
    plots summary column ``y`` against ``x`` (default: accumulated error against total MB); a frontier
    or gap compares summary columns with a reference run (:mod:`fedstream.experiments.frontier`)."""

    kind: str
    title: str
    panels: str | None = None
    lines: str | None = None
    x: str | None = None
    y: str | None = None
    compare: Comparison | None = None

    @property
    def axes(self) -> tuple[str, str]:
        if self.kind == "curves":
            return self.x or "round", self.y or "interval_error"
        if self.compare is not None:
            return self.x or "bytes_per_client_mb", self.y or "final_accuracy"
        return self.x or "total_mb", self.y or "accumulated_error"


@dataclass
class Experiment:
    """A validated experiment definition."""

    name: str
    title: str
    source: str
    base: str
    sets: dict
    scales: dict[str, dict]
    grid: dict[str, list]
    tune: Tune | None
    paper: list[PaperTable]
    figures: list[Figure]
    notes: str = ""
    path: Path | None = field(default=None, repr=False)
    blocks: list[dict[str, list]] | None = None  # [[grid]] blocks (``grid`` then holds their values)

    def points(self) -> list[dict]:
        """Every run's grid values, in definition order: the product of [grid], or the union of the
        products of the [[grid]] blocks (a point repeated in a later block runs once)."""
        out: list[dict] = []
        for block in self.blocks or [self.grid]:
            keys = list(block)
            for combo in itertools.product(*(block[k] for k in keys)):
                point = dict(zip(keys, combo))
                if point not in out:
                    out.append(point)
        return out

    def overrides(self, scale: str) -> dict:
        """The overrides shared by every run at ``scale``."""
        if scale not in self.scales:
            raise ConfigError(f"experiment {self.name} has no scale {scale!r}; it has {sorted(self.scales)}")
        return self.sets | self.scales[scale]


def _fail(where: str, message: str) -> ConfigError:
    return ConfigError(f"{where}: {message}")


def _check_keys(where: str, table: dict, allowed: set[str]) -> None:
    for key in table:
        if key not in allowed:
            hint = difflib.get_close_matches(key, sorted(allowed), n=1)
            extra = f" (did you mean {hint[0]!r}?)" if hint else f"; expected one of {sorted(allowed)}"
            raise _fail(where, f"unknown key {key!r}{extra}")


def _config_key(where: str, key: str) -> str:
    known = schema().fields
    if key not in known:
        hint = difflib.get_close_matches(key, sorted(known), n=1)
        raise _fail(where, f"{key!r} is not a config key" + (f" (did you mean {hint[0]!r}?)" if hint else ""))
    return key


def _overrides(where: str, table) -> dict:
    if not isinstance(table, dict):
        raise _fail(where, f"expected a table of config keys, got {type(table).__name__}")
    return {_config_key(where, k): v for k, v in table.items()}


def _string(where: str, raw: dict, key: str, default: str | None = None) -> str:
    value = raw.get(key, default)
    if not isinstance(value, str) or not value:
        raise _fail(where, f"{key!r} must be a non-empty string, got {value!r}")
    return value


def _blocks(where: str, raw) -> tuple[dict[str, list], list[dict[str, list]] | None]:
    """``[grid]`` as (grid, None), or ``[[grid]]`` blocks as (each key's values over the blocks, blocks)."""
    if not isinstance(raw, list):
        return _grid(where, raw), None
    blocks = [_grid(f"{where} [[grid]] block {i + 1}", b) for i, b in enumerate(raw)]
    if not blocks or any(list(b) != list(blocks[0]) for b in blocks):
        raise _fail(where, "[[grid]] blocks must name the same keys in the same order (runs are named by "
                    f"their values); got {[list(b) for b in blocks]}")
    merged = {k: list(dict.fromkeys(v for b in blocks for v in b[k])) for k in blocks[0]}
    return merged, blocks


def _grid(where: str, raw) -> dict[str, list]:
    grid = _overrides(f"{where} [grid]", raw or {})
    for key, values in grid.items():
        if not isinstance(values, list) or not values:
            raise _fail(f"{where} [grid]", f"{key!r} must be a non-empty list of values, got {values!r}")
        if len(set(map(str, values))) != len(values):
            raise _fail(f"{where} [grid]", f"{key!r} repeats a value: {values!r}")
    return grid


def _tune(where: str, raw, grid: dict) -> Tune | None:
    if raw is None:
        return None
    where = f"{where} [tune]"
    _check_keys(where, raw, TUNE_KEYS)
    key = _config_key(where, _string(where, raw, "key"))
    values = raw.get("values")
    if not isinstance(values, list) or len(values) < 2:
        raise _fail(where, f"'values' must list at least two candidates, got {values!r}")
    rounds = raw.get("rounds")
    if not isinstance(rounds, dict) or not rounds or any(s not in SCALES for s in rounds):
        raise _fail(where, f"'rounds' must be a table with keys among {list(SCALES)}, got {rounds!r}")
    for scale, n in rounds.items():
        if not isinstance(n, int) or n < 1:
            raise _fail(where, f"rounds.{scale} must be a positive integer, got {n!r}")
    per = raw.get("per", list(grid))
    unknown = [k for k in per if k not in grid]
    if unknown:
        raise _fail(where, f"'per' names {unknown}, which are not grid keys ({list(grid)})")
    if key in grid:
        raise _fail(where, f"{key!r} is both tuned and a grid axis")
    return Tune(key, values, _string(where, raw, "metric", "accumulated_error"), dict(rounds), list(per))


def _column(where: str, name: str) -> str:
    if name in SUMMARY_COLUMNS or (name.startswith("activation_rate.") and name.split(".", 1)[1].isdigit()):
        return name
    raise _fail(
        where, f"unknown column {name!r}; expected one of {list(SUMMARY_COLUMNS)} or activation_rate.<client>"
    )


def _paper(where: str, raw, grid: dict) -> list[PaperTable]:
    tables = []
    for i, entry in enumerate(raw or []):
        w = f"{where} [[paper]] #{i + 1}"
        _check_keys(w, entry, PAPER_KEYS)
        columns = [_column(w, c) for c in entry.get("columns", [])]
        if not columns:
            raise _fail(w, "'columns' must list at least one column")
        rows = []
        for j, row in enumerate(entry.get("rows", [])):
            run, values = row.get("run"), row.get("values")
            if not isinstance(run, dict) or any(k not in grid for k in run):
                raise _fail(w, f"row {j + 1}: 'run' must map grid keys ({list(grid)}) to values, got {run!r}")
            for k, v in run.items():
                if v not in grid[k]:
                    raise _fail(w, f"row {j + 1}: {k} = {v!r} is not in the grid values {grid[k]}")
            if not isinstance(values, list) or len(values) != len(columns) or not all(
                    isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
                raise _fail(
                    w,
                    f"row {j + 1}: 'values' must hold {len(columns)} numbers (nan: not given), "
                    f"got {values!r}",
                )
            rows.append((run, [None if v != v else float(v) for v in values]))
        tables.append(PaperTable(_string(w, entry, "table"), columns, rows, entry.get("caption", "")))
    return tables


def _figures(where: str, raw, grid: dict) -> list[Figure]:
    figures = []
    for i, entry in enumerate(raw or []):
        w = f"{where} [[figure]] #{i + 1}"
        _check_keys(w, entry, FIGURE_KEYS)
        kind = entry.get("kind")
        if kind not in FIGURE_KINDS:
            raise _fail(w, f"'kind' must be one of {list(FIGURE_KINDS)}, got {kind!r}")
        for key in ("panels", "lines"):
            if entry.get(key) is not None and entry[key] not in grid:
                raise _fail(w, f"{key!r} = {entry[key]!r} is not a grid key ({list(grid)})")
        for key in ("x", "y"):
            if kind != "curves" and entry.get(key) is not None:
                _column(w, entry[key])
            elif entry.get(key) is not None and not isinstance(entry[key], str):
                raise _fail(w, f"{key!r} must name a metrics.csv column, got {entry[key]!r}")
        figures.append(Figure(kind, _string(w, entry, "title"), entry.get("panels"), entry.get("lines"),
                              entry.get("x"), entry.get("y"), parse_comparison(w, entry, kind)))
    return figures


def parse_experiment(raw: dict, where: str) -> Experiment:
    """Validate a parsed TOML document; ``where`` names it in error messages."""
    _check_keys(where, raw, TOP_KEYS)
    scales = raw.get("scale", {})
    if not isinstance(scales, dict) or not scales or any(s not in SCALES for s in scales):
        raise _fail(
            where,
            f"[scale] must have sub-tables among {list(SCALES)}, "
            f"got {sorted(scales) if isinstance(scales, dict) else scales!r}",
        )
    grid, blocks = _blocks(where, raw.get("grid"))
    exp = Experiment(
        name=_string(where, raw, "name"), title=_string(where, raw, "title"),
        source=_string(where, raw, "source"), base=_string(where, raw, "base"),
        sets=_overrides(f"{where} [set]", raw.get("set", {})),
        scales={s: _overrides(f"{where} [scale.{s}]", v) for s, v in scales.items()},
        grid=grid, tune=_tune(where, raw.get("tune"), grid), paper=_paper(where, raw.get("paper"), grid),
        figures=_figures(where, raw.get("figure"), grid), notes=raw.get("notes", ""), blocks=blocks,
    )
    for scale in exp.scales:  # every run's config must resolve: catch bad values now, not mid-run
        for point in exp.points() if blocks else ():  # blocks: every run (their values go together)
            try:
                load_config(exp.base, exp.overrides(scale) | point)
            except ConfigError as exc:
                raise _fail(f"{where} [scale.{scale}] with {point}", str(exc)) from None
        for key, values in {} if blocks else grid.items():
            for v in values:
                try:
                    load_config(exp.base, exp.overrides(scale) | {key: v})
                except ConfigError as exc:
                    raise _fail(f"{where} [scale.{scale}] with {key} = {v!r}", str(exc)) from None
    return exp


def _definitions() -> dict[str, Path]:
    folder = resources.files("fedstream.experiments") / "defs"
    return {p.name[:-5]: Path(str(p)) for p in folder.iterdir() if p.name.endswith(".toml")}


def list_experiments() -> list[Experiment]:
    """Every experiment shipped with fedstream, by name."""
    return [load_experiment(name) for name in sorted(_definitions())]


def load_experiment(name_or_path: str | Path) -> Experiment:
    """A shipped experiment by name, or an experiment file by path."""
    shipped = _definitions()
    path = shipped.get(str(name_or_path)) or Path(name_or_path)
    if not path.is_file():
        hint = difflib.get_close_matches(str(name_or_path), sorted(shipped), n=1)
        raise ConfigError(
            f"no experiment {str(name_or_path)!r}"
            + (f" (did you mean {hint[0]!r}?)" if hint else "")
            + f"; see `fedstream experiment list` ({len(shipped)} shipped)"
        )
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from None
    exp = parse_experiment(raw, str(path))
    exp.path = path
    return exp
