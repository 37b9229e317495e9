"""The command line: runs, outputs, resume, and one-line errors with exit code 2."""

import gzip
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fedstream.cli import main
from tests.helpers.data import write_susy
from tests.helpers.runs import untimed


def run_cli(*args):
    return main(["run", *args])


def test_presets_lists_the_default(capsys):
    assert main(["presets"]) == 0
    assert "ovfl-imnist" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args,needle",
    [
        (["ovfl-imnist", "--set", "optimizer.nme=dlr"], "optimizer.name"),
        (["ovfl-imnist", "--set", "activation.name=sometimes"], "full, random, event, fixed"),
        (["no-such-preset"], "no such config file or preset"),
        (["ovfl-imnist", "--resume"], "--resume needs --out"),
    ],
)
def test_user_errors_exit_2_with_one_line(capsys, args, needle):
    assert run_cli(*args) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


def test_entry_point_exits_2_without_traceback():
    proc = subprocess.run([sys.executable, "-m", "fedstream", "run", "ovfl-imnist", "--set", "rounds=-3"],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "rounds = -3 is out of range" in proc.stderr and "Traceback" not in proc.stderr


def test_truncated_data_file_is_named(tmp_path, capsys):
    (tmp_path / "mnist").mkdir()
    header = np.array([2051, 60000, 28, 28], dtype=">u4").tobytes()
    with gzip.open(tmp_path / "mnist" / "train-images-idx3-ubyte.gz", "wb") as fh:
        fh.write(header + b"\x00" * 1000)
    with gzip.open(tmp_path / "mnist" / "train-labels-idx1-ubyte.gz", "wb") as fh:
        fh.write(np.array([2049, 60000], dtype=">u4").tobytes() + b"\x00" * 60000)
    assert run_cli("ovfl-imnist", "--set", f"data.root={tmp_path}", "--quiet") == 2
    err = capsys.readouterr().err
    assert "train-images-idx3-ubyte.gz" in err and "truncated" in err


def _summary(out):
    return json.loads((out / "summary.json").read_text())


def test_run_writes_outputs_and_resume_equals_uninterrupted(tmp_path, data_root):
    common = ["--quiet", "--set", f"data.root={data_root}", "--set", "eval.interval=200",
              "--set", "checkpoint.every=200", "--set", "stream.drift=class-prior"]
    full, part = tmp_path / "full", tmp_path / "part"
    assert run_cli("ovfl-imnist", "--set", "rounds=600", "--out", str(full), *common) == 0
    s = _summary(full)
    for key in (
        "task",
        "config",
        "rounds",
        "accumulated_error",
        "interval_errors",
        "bytes",
        "activation_rate",
        "client_compute_seconds",
        "server_compute_seconds",
        "wall_seconds",
        "rounds_per_second",
        "fedstream_version",
    ):
        assert key in s, key
    assert s["rounds"] == 600 and len(s["interval_errors"]) == 3
    assert {"total", "up", "down", "per_client"} <= set(s["bytes"]) and len(s["bytes"]["per_client"]) == 4
    assert len((full / "metrics.csv").read_text().strip().splitlines()) == 1 + 3
    assert (full / "config.yaml").exists() and (full / "checkpoint.npz").exists()

    # "crash" after 400 rounds, then resume to 600
    assert run_cli("ovfl-imnist", "--set", "rounds=400", "--out", str(part), *common) == 0
    assert run_cli("ovfl-imnist", "--set", "rounds=600", "--out", str(part), "--resume", *common) == 0
    a, b = _summary(full), _summary(part)
    assert untimed(a, "output") == untimed(b, "output")
    assert (full / "metrics.csv").read_text().count("\n") == (part / "metrics.csv").read_text().count("\n")

    # an existing checkpoint is never overwritten silently; a changed config cannot resume it
    assert run_cli("ovfl-imnist", "--set", "rounds=600", "--out", str(part), *common) == 2
    assert run_cli("ovfl-imnist", "--set", "rounds=800", "--set", "optimizer.name=ogd", "--out", str(part),
                   "--resume", *common) == 2


def test_config_file_written_by_a_run_can_be_rerun(tmp_path, data_root):
    out = tmp_path / "a"
    assert run_cli("ovfl-imnist", "--quiet", "--set", f"data.root={data_root}", "--set", "rounds=100",
                   "--set", "optimizer.name=slr", "--set", "activation.name=event", "--out", str(out)) == 0
    assert run_cli(str(out / "config.yaml"), "--quiet", "--out", str(tmp_path / "b")) == 0
    assert _summary(out)["accumulated_error"] == _summary(tmp_path / "b")["accumulated_error"]


def test_susy_csv_written_in_the_uci_format_runs(tmp_path):
    write_susy(tmp_path, 400, seed=0, shift=1.0)
    out = tmp_path / "susy"
    assert run_cli("ovfl-susy", "--quiet", "--set", f"data.root={tmp_path}", "--set", "rounds=300",
                   "--out", str(out)) == 0
    s = _summary(out)
    assert s["rounds"] == 300 and len(s["activation_rate"]) == 2


def test_higgs_subset_from_shared_data(tmp_path, data_root):
    out = tmp_path / "higgs"
    assert (
        run_cli(
            "ovfl-higgs",
            "--quiet",
            "--set",
            f"data.root={data_root}",
            "--set",
            "rounds=300",
            "--set",
            "activation.name=event",
            "--set",
            "activation.threshold=0",
            "--out",
            str(out),
        )
        == 0
    )
    assert _summary(out)["rounds"] == 300


BENCH_OPTIONS = {
    "ovfl": {"--rounds", "--ref-rounds", "--sweep-rounds", "--workers", "--quick", "--forms", "--data-root",
             "--json"},
    "huffman": {"--symbols", "--repeats", "--seed", "--json"},
    "selection": {"--samples", "--ref-samples", "--k", "--groups", "--seed", "--scale-clients",
                  "--scale-samples", "--scale-queries", "--no-paillier", "--key-bits", "--reselection-reps",
                  "--workers",
                  "--data-root", "--json"},
    "network": {"--runtime", "--events", "--requests", "--batches", "--rtt-ms", "--mbit", "--rounds",
                "--error-rounds", "--config", "--set", "--workdir", "--json"},
    "device": {"--devices", "--tiny", "--data-root", "--json"},
    "estimators": {"--which", "--seed", "--json"},
    "psi": {"--ids", "--overlap", "--json"},
    "vfl": {"--reps", "--data-root", "--json"},
    "torch": {"--rounds", "--warmup", "--data-root", "--json"},
}


@pytest.mark.parametrize("bench", sorted(BENCH_OPTIONS))
def test_each_bench_help_lists_only_its_own_options(capsys, bench):
    with pytest.raises(SystemExit) as stop:
        main(["bench", bench, "--help"])
    assert stop.value.code == 0
    text = capsys.readouterr().out
    listed = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", text)) - {"--help"}
    assert listed == BENCH_OPTIONS[bench]


@pytest.mark.parametrize("bench, option", [("ovfl", "--key-bits"), ("huffman", "--tiny"),
                                           ("device", "--runtime"), ("network", "--quick"),
                                           ("selection", "--devices")])
def test_an_option_of_another_bench_exits_2(capsys, bench, option):
    with pytest.raises(SystemExit) as stop:
        main(["bench", bench, option, "1"])
    assert stop.value.code == 2
    assert f"unrecognized arguments: {option}" in capsys.readouterr().err


def test_bench_needs_a_bench_name(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["bench"])
    assert stop.value.code == 2
    assert "ovfl" in capsys.readouterr().err


def test_bench_huffman_runs_with_its_own_options(tmp_path, capsys):
    out = tmp_path / "h.json"
    assert main(["bench", "huffman", "--symbols", "20000", "--repeats", "1", "--json", str(out)]) == 0
    figures = json.loads(out.read_text())
    assert figures["n"] == 20000 and figures["repeats"] == 1
    assert main(["bench", "huffman", "--symbols", "0"]) == 2
    assert "--symbols and --repeats must be >= 1" in capsys.readouterr().err


def _documented_bench_commands() -> list[list[str]]:
    """``fedstream bench ...`` as README.md, docs/ and scripts/ write it (shell variables as ``x``)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    files = [root / "README.md", *(root / "docs").rglob("*.md"), *(root / "scripts").glob("*.sh")]
    found = set()
    for path in files:
        text = path.read_text(encoding="utf-8").replace("\\\n", " ")
        for match in re.findall(r"fedstream bench [a-z]+[^`|#)\n]*", text):
            found.add(re.sub(r'"?\$(\{\w+\}|\w+|@)"?', "x", match).strip())
    return sorted(found)


@pytest.mark.parametrize("command", _documented_bench_commands())
def test_documented_bench_invocations_parse(command):
    from fedstream.cli import build_parser

    args = command.split()[1:]
    if args[-1] == "x":  # the script's "$@": extra options, not a value
        args = args[:-1]
    build_parser().parse_args(args)  # SystemExit(2) for an option the bench does not take


def test_bench_psi_aligns_and_writes_its_figures(tmp_path, capsys):
    out = tmp_path / "psi.json"
    assert main(["bench", "psi", "--ids", "300", "--json", str(out)]) == 0
    assert "exact: True" in capsys.readouterr().out
    (row,) = json.loads(out.read_text())
    assert row["ids"] == 300 and row["exact"] and row["shared"] == 255 and row["bytes_up"] > 0
    assert main(["bench", "psi", "--ids", "0"]) == 2


def test_the_cli_runs_without_the_deploy_extra():
    """The README's first command installs fedstream without extras: no protobuf, no grpcio. A fresh
    virtual environment showed `fedstream` failing at import (the network bench pulled in protobuf)."""
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('google', 'grpc', 'flwr'):\n"
        "            raise ImportError('not installed: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "from fedstream.cli import main\n"
        "sys.exit(main(['run', 'ovfl-imnist', '--set', 'rounds=300', '--quiet']))\n"
    )
    root = Path(__file__).resolve().parents[1]  # ../shared/data, as the README's command finds it
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root)
    assert "not installed" not in done.stderr, done.stderr[-2000:]
    assert done.returncode in (0, 2), done.stderr[-2000:]  # 2: no MNIST on this machine, never a crash
