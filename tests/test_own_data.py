"""README's "Your own data": the commands of its fenced block, run as written (fewer rounds, epochs)."""

import json
import shlex
import subprocess
import sys
from pathlib import Path

from fedstream.cli import main

ROOT = Path(__file__).resolve().parents[1]


def readme_commands(heading: str = "### Your own data") -> list[list[str]]:
    """The commands of the first ```bash block under ``heading`` (continuation lines joined)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split(heading + "\n", 1)[1]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    lines = block.replace("\\\n", " ").splitlines()
    return [shlex.split(line, comments=True) for line in lines if line.strip()]


def test_readme_own_data_section_runs(tmp_path, monkeypatch):
    commands = readme_commands()
    first = [["python", "examples/make_customers.py"]]
    assert [c[:2] for c in commands] == first + [["fedstream", "run"]] * 4
    monkeypatch.chdir(ROOT)
    shipped = (ROOT / "examples" / "customers.csv").read_bytes()
    subprocess.run([sys.executable, *commands[0][1:]], check=True, capture_output=True)
    assert (ROOT / "examples" / "customers.csv").read_bytes() == shipped  # deterministic
    for n, command in enumerate(commands[1:]):
        args = command[1:]
        out = args.index("--out") + 1
        args[out] = str(tmp_path / f"run{n}")
        online, horizontal = "ovfl" in args[1], "chfl" in args[1]
        short = (["rounds=240", "eval.interval=80"] if online else
                 ["chfl.rounds=1", "chfl.local_epochs=1"] if horizontal else ["train.epochs=2"])
        assert main([*args, *(x for s in short for x in ("--set", s)), "--quiet"]) == 0
        summary = json.loads((tmp_path / f"run{n}" / "summary.json").read_text())
        assert summary["classes"] == ["bronze", "gold", "silver"]
        if horizontal:
            assert summary["test_acc"] > 0.4 and len(summary["columns"]) == 13  # channel: two one-hot
            continue
        assert len(summary["client_columns"]) == summary["config"]["vfl.clients"]
        if online:
            assert summary["rounds"] == 240 and summary["accumulated_error"] < 0.8
        else:
            assert summary["epochs"] == 2 and summary["final_accuracy"] > 0.4
            assert (summary["train_rows"], summary["test_rows"]) == (480, 120)


def short(args: list[str]) -> list[str]:
    """The settings that make a README run quick (as above), for the config file in ``args``."""
    config = next(a for a in args if a.endswith(".toml"))
    sets = (["rounds=240", "eval.interval=80"] if "ovfl" in config else
            ["chfl.rounds=1", "chfl.local_epochs=1"] if "chfl" in config else ["train.epochs=2"])
    return [x for s in sets for x in ("--set", s)]


def test_readme_one_file_per_party_section_deploys_the_simulated_run(tmp_path, monkeypatch):
    commands = readme_commands("#### One file per party, deployed")
    assert [c[:2] for c in commands] == [["python", "examples/split_customers.py"], ["fedstream", "deploy"],
                                         ["fedstream", "run"], ["fedstream", "deploy"]]
    monkeypatch.chdir(ROOT)
    parties = sorted((ROOT / "examples" / "parties").glob("*.csv"))
    shipped = [p.read_bytes() for p in parties]
    subprocess.run([sys.executable, *commands[0][1:]], check=True, capture_output=True)
    assert [p.read_bytes() for p in parties] == shipped and len(parties) == 4  # deterministic
    outs = []
    for n, command in enumerate(commands[1:]):
        args = command[1:]
        args[args.index("--out") + 1] = str(tmp_path / f"run{n}")
        more = ["--set", "train.epochs=5"] if args[2].endswith("-vfl.toml") else []  # a slow start
        assert main([*args, *short(args), *more] + (["--quiet"] if args[0] == "run" else [])) == 0
        outs.append(json.loads((tmp_path / f"run{n}" / "summary.json").read_text()))
    deployed, simulated, vfl = outs
    assert deployed["faults"] == [] and deployed["rounds"] == simulated["rounds"] == 240
    for key in ("accumulated_error", "interval_errors", "bytes", "activation_rate"):
        assert deployed[key] == simulated[key], key
    assert vfl["faults"] == [] and vfl["epochs"] == 5 and vfl["final_accuracy"] > 0.45
    assert deployed["classes"] == vfl["classes"] == simulated["classes"] == ["bronze", "gold", "silver"]


def test_readme_predictions_section_runs_for_every_task(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    runs = {c[c.index("--out") + 1]: c for c in readme_commands()[1:]}  # the runs of "Your own data"
    commands = readme_commands("#### Predictions")
    assert [c[:2] for c in commands] == [["fedstream", "predict"]] * 3
    for n, command in enumerate(commands):
        args = command[1:]
        made = [*runs[args[1]][1:]]
        made[made.index("--out") + 1] = str(tmp_path / f"run{n}")
        assert main([*made, *short(made), "--quiet"]) == 0
        args[1] = str(tmp_path / f"run{n}")
        args[args.index("--out") + 1] = str(tmp_path / f"preds{n}.csv")
        assert main([*args, "--quiet"]) == 0
        rows = (tmp_path / f"preds{n}.csv").read_text().splitlines()
        assert rows[0] == "id,prediction,p_bronze,p_gold,p_silver" and len(rows) == 601
        assert rows[1].startswith("C1000,")
