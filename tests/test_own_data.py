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
    return [shlex.split(line) for line in block.replace("\\\n", " ").splitlines() if line.strip()]


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
