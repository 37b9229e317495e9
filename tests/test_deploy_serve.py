"""One serve template for every task (issue 29): ``--resume`` and ``--out`` follow ``fedstream run``'s
rules whatever the task, and the run's outputs are written by one writer.

Before, each task's adapter had its own copy and they disagreed: online VFL ignored ``--resume``
without ``--out``, batch VFL and CHFL refused it; batch VFL and CHFL started afresh when asked to
resume with no checkpoint; a fresh run overwrote a finished run's folder; the summary's config key
was ``run_config`` (batch VFL), ``config`` (CHFL) or absent."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import fedstream.deploy.serve as serve_module
from fedstream.cli import main
from fedstream.config import load_config
from fedstream.deploy.serve import serve
from fedstream.errors import ConfigError

PRESETS = {"ovfl-imnist": "checkpoint.npz", "vfl-mnist": "checkpoint.pt", "chfl-covertype": "checkpoint.pt"}


class NoRuntime:
    """A runtime that must not be reached: every refusal comes before the server waits for a node."""

    def connect(self, n_clients: int):
        raise AssertionError("serve connected before checking --out and --resume")


def settings(out: Path | None, *, resume: bool) -> dict:
    return {"out": str(out) if out else "", "resume": resume, "audit": False, "data-root": ""}


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_task_refuses_resume_without_out(preset):
    with pytest.raises(ConfigError, match=rf"^--resume needs --out DIR \(the folder holding the server's "
                                          rf"{PRESETS[preset]}\)$"):
        serve(load_config(preset), settings(None, resume=True), NoRuntime())


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_task_refuses_resume_without_a_checkpoint(preset, tmp_path):
    with pytest.raises(ConfigError, match=rf"{PRESETS[preset]} does not exist: nothing to resume$"):
        serve(load_config(preset), settings(tmp_path, resume=True), NoRuntime())


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_task_refuses_a_fresh_run_over_another_runs_folder(preset, tmp_path):
    finished, stopped = tmp_path / "finished", tmp_path / "stopped"
    finished.mkdir()
    (finished / "summary.json").write_text("{}")
    stopped.mkdir()
    (stopped / PRESETS[preset]).write_bytes(b"")
    with pytest.raises(ConfigError, match=r"summary.json exists: the run there has finished: choose another"):
        serve(load_config(preset), settings(finished, resume=False), NoRuntime())
    with pytest.raises(ConfigError, match=r"exists: add --resume to continue it, or choose another --out"):
        serve(load_config(preset), settings(stopped, resume=False), NoRuntime())


def test_the_cli_says_it_in_one_line_with_exit_2_before_any_process_starts(tmp_path, capsys):
    """``fedstream serve server`` before it listens, ``fedstream deploy local`` before it starts a node."""
    assert main(["serve", "server", "vfl-mnist", "--listen", "127.0.0.1:0", "--resume"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--resume needs --out DIR" in err and len(err.splitlines()) == 1, err
    assert main(["deploy", "local", "ovfl-imnist", "--out", str(tmp_path / "run"), "--resume"]) == 2
    err = capsys.readouterr().err.strip()
    assert "checkpoint.npz does not exist: nothing to resume" in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "run").exists()
    assert main(["deploy", "app", str(tmp_path / "app"), "chfl-covertype", "--resume"]) == 2
    assert "--resume needs --out DIR" in capsys.readouterr().err
    assert not (tmp_path / "app").exists()


class FakeServer:
    """A deployed server that plays nothing: what serve does around it is under test."""

    def __init__(self):
        self.loaded: Path | None = None

    def load(self, path: Path) -> None:
        self.loaded = path

    def where(self) -> str:
        return "at round 7"

    def play(self, checkpoint: Path | None, *, audit: bool) -> dict:
        if checkpoint is not None:
            checkpoint.parent.mkdir(parents=True, exist_ok=True)
            checkpoint.write_bytes(b"state")
        return {"rounds": 7, "audited": audit}

    def audit(self) -> dict:
        return {"models": {"server.0": np.arange(3.0)}, "message_sizes": [[1, 2], [3]]}


class FakeAdapter:
    def __init__(self, server: FakeServer):
        self.made = server

    def server(self, config: dict, settings: dict, runtime) -> FakeServer:
        return self.made

    def report(self, summary: dict) -> str:
        return f"{summary['rounds']} rounds"


class Runtime:
    def connect(self, n_clients: int):
        raise AssertionError("the fake adapter connects nothing")

    def extra(self) -> dict:
        return {"runtime_says": 1}

    def note(self) -> str:
        return "0 messages"


def test_one_writer_for_the_outputs_and_one_resume_sequence(tmp_path, monkeypatch, capsys):
    """summary.json: the server's summary, the run's config under ``config`` and what the runtime adds;
    with ``audit`` named arrays as NAME.npz, anything else as NAME.json. A resumed run loads the
    checkpoint in ``out`` and says where it goes on."""
    server = FakeServer()
    monkeypatch.setattr(serve_module, "check_deployable", lambda config: FakeAdapter(server))
    config = load_config("ovfl-imnist")
    out = tmp_path / "out"
    serve(config, settings(out, resume=False) | {"audit": True}, Runtime())
    summary = json.loads((out / "summary.json").read_text())
    assert summary["config"] == json.loads(json.dumps(config))
    assert summary["rounds"] == 7 and summary["audited"] is True and summary["runtime_says"] == 1
    assert np.load(out / "models.npz")["server.0"].tolist() == [0.0, 1.0, 2.0]
    assert json.loads((out / "message_sizes.json").read_text()) == [[1, 2], [3]]
    assert "fedstream: done, 7 rounds, 0 messages" in capsys.readouterr().out
    assert server.loaded is None

    serve(config, settings(out, resume=True), Runtime())
    assert server.loaded == out / "checkpoint.npz"
    assert f"fedstream: resuming at round 7 from {out / 'checkpoint.npz'}" in capsys.readouterr().out
