"""numba's one-off compilation is measured and kept out of a run's wall time and rate (issue 31)."""

import json
import time

import numpy as np
from numba import njit

import fedstream.ovfl.fused
from fedstream.cli import main
from fedstream.jit import MESSAGE, Stopwatch, announce, compile_seconds
from fedstream.ovfl.engine import OnlineVFL
from tests.helpers.configs import small_config
from tests.helpers.data import synthetic_stream


def _fresh_kernel():
    """A kernel numba has not compiled yet in this process (a new function object each call)."""
    @njit
    def kernel(x):  # pragma: no cover (jit)
        acc = 0.0
        for v in x:
            acc += v * v
        return acc

    return kernel


def test_compilation_is_timed_announced_once_and_left_out_of_a_stopwatch():
    seen = []
    watch = Stopwatch()
    with announce(lambda: seen.append(compile_seconds())):
        _fresh_kernel()(np.ones(3))
        _fresh_kernel()(np.ones(3))
    assert len(seen) == 1  # once, at the first compilation
    assert watch.compile() > 0
    assert 0 <= watch.seconds() < watch.compile() + watch.seconds()
    kernel = _fresh_kernel()
    kernel(np.ones(3))
    before = compile_seconds()
    kernel(np.ones(5))  # compiled already: no compilation, nothing added
    assert compile_seconds() == before


def _compiling(monkeypatch, pause: float):
    """Make the fused path's first segment compile a fresh kernel that takes ``pause`` seconds,
    as numba does on the first run on a machine."""
    original = fedstream.ovfl.fused.play_segment
    state = {"first": True}

    def play_segment(*args):
        if state["first"]:
            state["first"] = False
            kernel = _fresh_kernel()
            from numba.core import event

            data = {"dispatcher": kernel, "args": (), "return_type": None}
            with event.trigger_event("numba:compile", data=data):
                time.sleep(pause)
        return original(*args)

    monkeypatch.setattr(fedstream.ovfl.fused, "play_segment", play_segment)


def test_a_run_reports_its_compilation_apart(monkeypatch):
    """The summary's compile_seconds holds the compilation; wall_seconds and rounds_per_second
    leave it out."""
    _compiling(monkeypatch, 0.5)
    s = OnlineVFL(small_config(rounds=400), stream=synthetic_stream()).run()
    assert s["compile_seconds"] >= 0.5
    assert s["wall_seconds"] < s["compile_seconds"]  # 400 rounds take far less than the pause
    assert s["rounds_per_second"] == 400 / s["wall_seconds"]
    s = OnlineVFL(small_config(rounds=400), stream=synthetic_stream()).run()
    assert s["compile_seconds"] == 0  # compiled now (this test's stand-in does not compile twice)


def test_the_command_line_says_it_compiles_and_shows_the_seconds(monkeypatch, tmp_path, capsys, mnist_root):
    _compiling(monkeypatch, 0.3)
    out = tmp_path / "run"
    assert main(["run", "ovfl-imnist", f"--set=data.root={mnist_root}", "--set=rounds=300",
                 "--set=eval.interval=100", "--out", str(out)]) == 0
    printed = capsys.readouterr()
    text = printed.out
    assert printed.err.count(MESSAGE) == 1  # beside the progress bar, on stderr
    s = json.loads((out / "summary.json").read_text())
    assert s["compile_seconds"] >= 0.3 and s["rounds_per_second"] == 300 / s["wall_seconds"]
    assert "compiling kernels (s), apart" in text and "once per machine" in text
