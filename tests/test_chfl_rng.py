"""CHFL runs draw from their own generators: the global torch RNG is neither used nor changed, so
runs sharing a process (one after another, or interleaved in threads) give the same results as
each run alone, whatever ran before."""

import threading

import torch

from fedstream.chfl.stream import StreamSettings, run_stream_on_table
from fedstream.chfl.trainer import run_on_table
from tests.helpers.configs import tiny_settings
from tests.helpers.data import synthetic_table
from tests.helpers.runs import untimed


def test_global_torch_rng_is_untouched():
    X, y = synthetic_table(n=500)
    torch.manual_seed(7)
    before = torch.get_rng_state()
    run_on_table(X, y, tiny_settings(), method="chfl", seed=1)
    run_stream_on_table(X, y, StreamSettings(clients=2, hidden=(8,), batch=8, stats_rows=16), seed=1)
    assert torch.equal(torch.get_rng_state(), before)


def test_results_do_not_depend_on_the_global_rng():
    X, y = synthetic_table(n=500)
    torch.manual_seed(0)
    a = run_on_table(X, y, tiny_settings(), method="chfl", seed=2)
    torch.manual_seed(12345)
    torch.rand(1000)  # whatever ran before
    b = run_on_table(X, y, tiny_settings(), method="chfl", seed=2)
    assert untimed(a, "resumed") == untimed(b, "resumed")


def test_two_runs_interleaved_equal_the_runs_alone():
    """Two runs in two threads: their torch ops interleave; each result equals its run alone."""
    X, y = synthetic_table(n=500)
    jobs = {"chfl": {"method": "chfl", "seed": 4}, "fedprox": {"method": "fedprox", "seed": 5}}
    alone = {name: untimed(run_on_table(X, y, tiny_settings(), **kw), "resumed") for name, kw in jobs.items()}
    together: dict = {}
    start = threading.Barrier(len(jobs))

    def work(name: str, kw: dict) -> None:
        start.wait()
        together[name] = untimed(run_on_table(X, y, tiny_settings(), **kw), "resumed")

    threads = [threading.Thread(target=work, args=item) for item in jobs.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert together == alone
    assert alone["chfl"]["test_acc"] != alone["fedprox"]["test_acc"]  # two different runs, not one twice


def test_stream_runs_interleaved_equal_the_runs_alone():
    X, y = synthetic_table(n=500)
    s = StreamSettings(clients=2, hidden=(8,), batch=8, stats_rows=16, sync_every=3)
    alone = [untimed(run_stream_on_table(X, y, s, seed=k), "resumed") for k in (0, 1)]
    together: dict = {}
    threads = [
        threading.Thread(
            target=lambda k=k: together.__setitem__(
                k, untimed(run_stream_on_table(X, y, s, seed=k), "resumed")
            )
        )
        for k in (0, 1)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [together[0], together[1]] == alone
