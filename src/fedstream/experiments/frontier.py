"""Runs against a reference run: traffic saved, accuracy gap, the Pareto frontier and the best setting.

A figure of kind ``frontier`` or ``gap`` names a reference by config values::

    [[figure]]
    kind = "frontier"                      # every setting a point, the frontier a line
    title = "Traffic saved against accuracy gap"
    reference = { "compression.up" = "none", "compression.down" = "none" }
    reference_experiment = "vfl-compression-mnist"   # optional: the reference runs live there
    target = -0.5                          # points: the largest loss of accuracy allowed

    [[figure]]
    kind = "gap"                           # one bar per row: its gap, mean +- std over the seeds
    title = "Each component alone against uncompressed"
    reference = { "compression.up" = "none", "compression.cache" = false, "compression.down" = "none" }
    rows = [{ label = "quantiser alone", run = { "compression.down" = "quant-huffman",
              "compression.up" = "none" } }]

Each run is compared with the reference run of its own seed and settings: the reference must
equal the run on every config key outside the sections its keys name (``compression.*`` above),
so the dataset, rows, epochs and seed are the same. Traffic saved = 1 - x / x of that reference
(``x``: a summary column, default ``bytes_per_client_mb``); gap = 100 x (y - y of the reference),
in points (``y``, default ``final_accuracy``). A setting (the grid values but the seed) is the
mean over its seeds. The reference runs are this experiment's own, or, with
``reference_experiment``, those of the folder next to this one (same parent) that ran that
experiment at the same scale.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from fedstream.config import load_config
from fedstream.config.schema import schema
from fedstream.errors import ConfigError
from fedstream.experiments.columns import column_value, label
from fedstream.runs.files import atomic_write

KINDS = ("frontier", "gap")
KEYS = {"reference", "reference_experiment", "target", "rows"}


@dataclass
class Comparison:
    """What a ``frontier`` or ``gap`` figure compares with: reference values, where, the target."""

    reference: dict
    experiment: str | None = None
    target: float | None = None  # accuracy points (negative: a loss)
    rows: list[tuple[str, dict]] | None = None  # (label, config values) of the settings to show


def _values(where: str, name: str, table) -> dict:
    if not isinstance(table, dict) or not table:
        raise ConfigError(f"{where}: {name!r} must be a non-empty table of config keys, got {table!r}")
    unknown = [k for k in table if k not in schema().fields]
    if unknown:
        raise ConfigError(f"{where}: {name!r} names {unknown}, which are not config keys")
    return dict(table)


def parse_comparison(where: str, entry: dict, kind: str) -> Comparison | None:
    """The comparison keys of a ``[[figure]]`` entry (None for the other kinds, which refuse them)."""
    if kind not in KINDS:
        given = sorted(KEYS & set(entry))
        if given:
            raise ConfigError(f"{where}: {given} apply to kind = {' or '.join(KINDS)} only (kind = {kind!r})")
        return None
    reference = _values(where, "reference", entry.get("reference"))
    experiment = entry.get("reference_experiment")
    if experiment is not None and (not isinstance(experiment, str) or not experiment):
        raise ConfigError(f"{where}: 'reference_experiment' must name an experiment, got {experiment!r}")
    target = entry.get("target")
    if kind == "frontier" and (not isinstance(target, (int, float)) or isinstance(target, bool)):
        raise ConfigError(f"{where}: kind = 'frontier' needs 'target', the accuracy gap allowed in points "
                          f"(e.g. target = -0.5), got {target!r}")
    rows = None
    if entry.get("rows") is not None:
        if not isinstance(entry["rows"], list) or not entry["rows"]:
            raise ConfigError(f"{where}: 'rows' must list {{ label = ..., run = {{...}} }} tables")
        rows = []
        for i, row in enumerate(entry["rows"]):
            if not isinstance(row, dict) or set(row) != {"label", "run"} or not isinstance(row["label"], str):
                raise ConfigError(f"{where}: rows[{i}] must be {{ label = \"...\", run = {{ key = value }} "
                                  f"}}, got {row!r}")
            rows.append((row["label"], _values(f"{where} rows[{i}]", "run", row["run"])))
    return Comparison(reference, experiment, None if target is None else float(target), rows)


@dataclass
class Point:
    """One setting against the reference: traffic saved (fractions) and gaps (points), per seed."""

    label: str
    setting: dict
    saved: list[float]
    gaps: list[float]
    seeds: list

    @property
    def gap(self) -> float:
        return sum(self.gaps) / len(self.gaps)

    @property
    def gap_std(self) -> float:
        """Population standard deviation over the seeds (as the report's other mean +- std)."""
        return (sum((g - self.gap) ** 2 for g in self.gaps) / len(self.gaps)) ** 0.5

    @property
    def traffic_saved(self) -> float:
        return sum(self.saved) / len(self.saved)


def _matches(config: dict, values: dict) -> bool:
    return all(str(config.get(k)) == str(v) for k, v in values.items())


def _comparable(config: dict, reference: dict, sections: set[str]) -> bool:
    """Whether ``reference`` differs from ``config`` only within ``sections`` (and data.root). A key
    one side lacks (a run written before the key existed) counts as its default for the task."""
    fields, task = schema().fields, config.get("task")

    def value(c: dict, k: str):
        return c[k] if k in c else (fields[k].default_for(task) if k in fields else None)

    keys = (set(config) | set(reference)) - {"data.root"}
    return all(value(config, k) == value(reference, k) for k in keys if k.split(".", 1)[0] not in sections)


def _ok(run) -> bool:
    return run.done and not run.summary.get("diverged") and run.summary.get("diverged_at") is None


def compare(comp: Comparison, runs: list, references: list, x: str, y: str) -> tuple[list[Point], list[str]]:
    """Every setting of ``runs`` (or the comparison's rows) against ``references``; and notes on the
    runs left out (unfinished, diverged, without a reference of their seed and settings)."""
    refs = [r for r in references if _ok(r) and _matches(r.config, comp.reference)]
    sections = {k.split(".", 1)[0] for k in comp.reference}
    points: dict[str, Point] = {}
    if comp.rows:
        points = {name: Point(name, values, [], [], []) for name, values in comp.rows}
    waiting, notes = 0, []
    for run in runs:
        if _matches(run.config, comp.reference):
            continue
        setting = {k: v for k, v in run.grid.items() if k != "seed"}
        if comp.rows:
            name = next((n for n, values in comp.rows if _matches(run.config, values)), None)
            if name is None:
                continue
        else:
            name = label(setting)
        if not run.done:
            waiting += 1
            continue
        if not _ok(run):
            notes.append(f"{run.name}: diverged, left out")
            continue
        ref = next((r for r in refs if _comparable(run.config, r.config, sections)), None)
        rx, ry = column_value(run.summary, x), column_value(run.summary, y)
        bx, by = (column_value(ref.summary, x), column_value(ref.summary, y)) if ref else (None, None)
        if ref is None or None in (rx, ry, bx, by) or not bx:
            notes.append(f"{run.name}: no finished reference run ({label(comp.reference)}) with its seed "
                         f"({run.config.get('seed')}) and settings" if ref is None else
                         f"{run.name}: {x} or {y} missing from a summary")
            continue
        point = points.setdefault(name, Point(name, setting, [], [], []))
        point.saved.append(1.0 - rx / bx)
        point.gaps.append(100.0 * (ry - by))
        point.seeds.append(run.config.get("seed"))
    if waiting:
        notes.append(f"{waiting} run(s) not finished yet, left out")
    return [p for p in points.values() if p.gaps], notes


def pareto(points: list[Point]) -> list[Point]:
    """The points no other point beats on both counts (more saved and a smaller loss), by traffic saved."""
    out, best_gap = [], float("-inf")
    for p in sorted(points, key=lambda p: (-p.traffic_saved, -p.gap)):
        if p.gap > best_gap:
            out.append(p)
            best_gap = p.gap
    return out[::-1]


def best(points: list[Point], target: float) -> tuple[Point | None, bool]:
    """The most traffic saved with a gap >= ``target`` (True), else the point closest to it (False)."""
    if not points:
        return None, False
    ok = [p for p in points if p.gap >= target]
    if ok:
        return max(ok, key=lambda p: (p.traffic_saved, p.gap)), True
    return max(points, key=lambda p: (p.gap, p.traffic_saved)), False


def reference_folder(folder: Path, experiment: str, scale: str) -> Path:
    """The folder next to ``folder`` (same parent) that ran ``experiment`` at ``scale``."""
    found = []
    for candidate in sorted(Path(folder).resolve().parent.iterdir()):
        index = candidate / "experiment.json"
        if candidate == Path(folder).resolve() or not index.is_file():
            continue
        try:
            meta = json.loads(index.read_text())
        except (json.JSONDecodeError, OSError):
            continue
        if meta.get("experiment") == experiment and meta.get("scale") == scale:
            found.append(candidate)
    if len(found) != 1:
        what = "none" if not found else ", ".join(str(f) for f in found)
        raise ConfigError(f"reference_experiment {experiment!r}: expected one folder next to {folder} that "
                          f"ran it at scale {scale!r}, found {what}; run it with `fedstream experiment run "
                          f"{experiment} --scale {scale} --out {Path(folder).resolve().parent}/NAME`")
    return found[0]


def _setting(point: Point, named: bool) -> str:
    """A point in a table: its row label, or its settings as key=value (the key's last part)."""
    if not named:
        return point.label
    return ", ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in point.setting.items()) or point.label


def _pct(value: float) -> str:
    return f"{100 * value:.1f} %"


def _gap(point: Point) -> str:
    return f"{point.gap:+.2f}" + (f" ± {point.gap_std:.2f}" if len(point.gaps) > 1 else "")


def _preamble(comp: Comparison, x: str, y: str) -> str:
    where = f" (experiment {comp.experiment})" if comp.experiment else ""
    return (f"Against the reference {label(comp.reference)}{where}, run by run with the same seed and "
            f"settings: traffic saved = 1 − {x} / reference's; gap = {y} − reference's, in points; "
            "mean ± std (population) over the seeds.")


def gap_table(title: str, comp: Comparison, points: list[Point], x: str, y: str) -> list[str]:
    """Markdown lines: each setting's traffic saved and gap against the reference."""
    lines = [f"### {title}", "", _preamble(comp, x, y), "",
             "| setting | traffic saved | gap (points) | seeds |", "|---|---|---|---|"]
    for p in points:
        lines.append(f"| {p.label} | {_pct(p.traffic_saved)} | {_gap(p)} | {', '.join(map(str, p.seeds))} |")
    return lines + [""]


def set_flags(sets: dict, point: Point) -> list[str]:
    """``--set KEY=VALUE`` flags that give a run the point's setting (the definition's [set] included)."""
    values = {k: v for k, v in (sets | point.setting).items() if k != "seed"}
    return [f"--set {k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in values.items()]


def frontier_table(title: str, comp: Comparison, points: list[Point], x: str, y: str,
                   base: str, sets: dict) -> tuple[list[str], Point | None, bool]:
    """Markdown lines: every point (frontier marked), then the best configuration or the closest."""
    on = {id(p) for p in pareto(points)}
    lines = [f"### {title}", "", _preamble(comp, x, y) + " ★: on the Pareto frontier.", "",
             "| setting | traffic saved | gap (points) | seeds | frontier |", "|---|---|---|---|---|"]
    for p in sorted(points, key=lambda p: -p.traffic_saved):
        lines.append(f"| {_setting(p, not comp.rows)} | {_pct(p.traffic_saved)} | {_gap(p)} | "
                     f"{', '.join(map(str, p.seeds))} | "
                     + ("★" if id(p) in on else "") + " |")
    chosen, reached = best(points, comp.target)
    lines.append("")
    if chosen is None:
        return lines + ["No finished run to compare yet.", ""], None, False
    summary = (f"{_setting(chosen, not comp.rows)}: {_pct(chosen.traffic_saved)} saved, gap {_gap(chosen)} "
               f"points (seeds {', '.join(map(str, chosen.seeds))})")
    if reached:
        lines.append(f"**Best configuration** (most traffic saved with a gap ≥ {comp.target:+g} points): "
                     f"{summary}.")
    else:
        lines.append(f"**The target was not reached**: no setting has a gap ≥ {comp.target:+g} points. "
                     f"The closest is {summary}.")
    lines += ["", f"`fedstream run {base} {' '.join(set_flags(sets, chosen))}`", ""]
    return lines, chosen, reached


def preset_text(config: dict, header: list[str], keep: set[str] = frozenset()) -> str:
    """A preset file (TOML, nested tables) holding the keys of ``config`` that differ from the defaults,
    and those of ``keep`` (the task and the dataset always)."""
    fields = schema().fields
    task = config["task"]
    keep = set(keep) | {"task", "data.name"}
    flat = {k: v for k, v in config.items()
            if v is not None and (k in keep or v != fields[k].default_for(task))}
    top = [k for k in flat if "." not in k]
    lines = [f"# {h}" for h in header] + [f"{k} = {_toml(flat[k])}" for k in top]
    sections: dict[str, list[str]] = {}
    for key in flat:
        if "." in key:
            section, leaf = key.rsplit(".", 1)
            sections.setdefault(section, []).append(f"{leaf} = {_toml(flat[key])}")
    for section, items in sections.items():
        lines += ["", f"[{section}]", *items]
    return "\n".join(lines) + "\n"


def write_preset(path: Path, exp, title: str, chosen: Point, target: float) -> Path:
    """Write the chosen setting as a preset file: the experiment's base preset, its [set] and the
    setting (not the scale's overrides: epochs and rows are the user's), keys at their default left out.
    ``fedstream run PATH`` runs it; copied into ``fedstream/config/presets/`` it becomes a named preset."""
    values = {k: v for k, v in (exp.sets | chosen.setting).items() if k != "seed"}
    atomic_write(path, preset_text(load_config(exp.base, values), [
        f"The best configuration of {exp.name} ({title}), written by `fedstream report`:",
        f"{chosen.label}: {100 * chosen.traffic_saved:.1f} % traffic saved, gap {chosen.gap:+.2f} points "
        f"(target {target:+g}), seeds {', '.join(map(str, chosen.seeds))}.",
        f"Preset {exp.base} + the experiment's [set] + the setting; its scale's overrides are not included.",
        f"Run it: fedstream run {path.name} --set seed=N"], keep=set(values)))
    return path


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    return repr(value)
