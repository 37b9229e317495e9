"""``fedstream bench ovfl --forms``: what each exact form of DLR's layer update costs against OGD's step.

DLR moves a dense layer by ``W <- W - c S_t`` with ``S_t = sum_{i<l} alpha^i g_{t-i}`` (rank one each),
so W changes by a matrix of rank min(l, in, out) every round; OGD's change is rank one. Per layer of
the ``ovfl-imnist`` model and per window length l this times, in this process and per CPU second,
the kernels the simulator runs (:mod:`fedstream.models.kernels`, :mod:`fedstream.optim.dlr`,
:mod:`fedstream.optim.ogd`):

* OGD: the forward pass, the input gradient (where the layer needs one) and the rank-one step;
* running sum: the same passes and :func:`~fedstream.optim.dlr.dlr_layer_update`;
* deferred: :func:`~fedstream.optim.dlr.dlr_deferred_update` plus the l deferred terms of the
  forward pass and of the input gradient;

and two floors no exact form can go below (in real arithmetic the weight after the step is fixed):

* a form that keeps the window as a dense matrix beside W must at least apply it once a round,
  ``W -= c S`` (:func:`second_matrix_pass`, S left as it is: cheaper than any real update of S),
  in place of OGD's step: its floor is that pass less OGD's step;
* a form that keeps W implicit, as a base minus pending rank-one terms, holds at least l of them
  (every entry of the window still has a share to come), and pays the deferred terms of the
  forward pass and the input gradient.

Delta rows are zero with probability 1/2 on ReLU layers (OGD's step and the deferred fold skip
them, as in a run). The figures per round are the layers' sums, the model's layer counts included;
"DLR/OGD at most" divides a fused OGD round (timed here) by that round plus the cheapest floor.
"""

from __future__ import annotations

import os
import time

import numpy as np
from numba import njit

from fedstream.config import load_config
from fedstream.models import MLP
from fedstream.models.kernels import (
    deferred_input_grad,
    dense_backward,
    dense_forward,
    dense_forward_deferred,
)
from fedstream.optim.dlr import DLR, dlr_deferred_update, dlr_layer_update
from fedstream.optim.ogd import low_rank_descent
from fedstream.ovfl.engine import CHUNK, OnlineVFL

F32 = np.float32
ALPHA = 0.95


@njit(cache=True, fastmath=True)
def second_matrix_pass(W, S, c):  # pragma: no cover (jit)
    """W <- W - c S: the least a form that keeps DLR's window as a dense matrix does each round."""
    n_out, n_in = W.shape
    for i in range(n_out):
        W_i, S_i = W[i], S[i]
        for j in range(n_in):
            W_i[j] -= c * S_i[j]


@njit(cache=True)
def _time_kernel(kind, n, X, W, b, out, D, delta, gin, S, S_b, U, V, A, alpha, alpha_l,
                 c):  # pragma: no cover (jit)
    """``n`` calls of one kernel (``kind``: 0 forward, 1 input gradient, 2 OGD step, 3 running-sum
    step, 4 deferred step, 5 deferred forward, 6 deferred input-gradient terms, 7
    :func:`second_matrix_pass`); the step's sign alternates so that W stays bounded."""
    length = U.shape[0]
    for k in range(n):
        sc = c if k % 2 == 0 else -c
        if kind == 0:
            dense_forward(X, W, b, True, out)
        elif kind == 1:
            dense_backward(D, out, W, False, delta, gin, True)
        elif kind == 2:
            low_rank_descent(W, b, D, X, sc)
        elif kind == 3:
            dlr_layer_update(W, b, S, S_b, U, V, k % length, D, X, alpha, alpha_l, sc)
        elif kind == 4:
            dlr_deferred_update(W, b, S_b, U, V, A, k % length, D, X, alpha, alpha_l, sc)
        elif kind == 5:
            dense_forward_deferred(X, W, b, True, out, U, V, A)
        elif kind == 6:
            deferred_input_grad(D, U, V, A, gin)
        else:
            second_matrix_pass(W, S, sc)


KINDS = ("forward", "input_grad", "ogd_step", "running_sum_step", "deferred_step", "deferred_forward",
         "deferred_input_grad", "second_matrix_pass")
FORMS = ("ogd", "running_sum", "deferred", "dense_floor", "factored_floor")


def imnist_config(data_root: str | None) -> dict:
    """The bench's model: the ``ovfl-imnist`` preset, Full activation."""
    return load_config("ovfl-imnist", {"data.root": data_root, "activation.name": "full"})


def model_layers(run: OnlineVFL) -> list[dict]:
    """A run's dense layers, the same kind counted once: (out, in), how many, ReLU, and whether the
    layer computes an input gradient (the server's do; a client's first does not)."""
    rows: dict[tuple, dict] = {}
    for party, needs in [*((c, False) for c in run.clients), (run.server, True)]:
        for k, layer in enumerate(party.model.layers):
            key = (*layer.W.shape, layer.relu, needs or k > 0)
            rows.setdefault(key, {"out": key[0], "in": key[1], "relu": key[2], "input_grad": key[3],
                                  "count": 0})
            rows[key]["count"] += 1
    return list(rows.values())


def dlr_defers(layer: dict, window: int) -> bool:
    """Whether :class:`~fedstream.optim.dlr.DLR` (``defer="auto"``) keeps this layer the deferred way."""
    model = MLP([layer["in"], layer["out"]], relu_last=layer["relu"], rng=np.random.default_rng(0))
    return DLR(model, lr=0.01, window=window, alpha=ALPHA).deferred_layers == [0]


def _layer_times(layer: dict, window: int, calls: int, repeats: int, rng: np.random.Generator) -> dict:
    """CPU microseconds per call of each kernel of :data:`KINDS` on one layer (best of ``repeats``)."""
    n_out, n_in = layer["out"], layer["in"]
    W = (rng.standard_normal((n_out, n_in)) * 0.05).astype(F32)
    X = rng.random((1, n_in)).astype(F32)
    D = (rng.standard_normal((1, n_out)) * 0.01).astype(F32)
    U = (rng.standard_normal((window, n_out)) * 0.01).astype(F32)
    if layer["relu"]:  # units a ReLU switched off: zero delta rows
        D[rng.random((1, n_out)) < 0.5] = 0.0
        U[rng.random((window, n_out)) < 0.5] = 0.0
    V = rng.random((window, n_in)).astype(F32)
    A = (rng.random(window) * 1e-3).astype(F32)
    S = (rng.standard_normal((n_out, n_in)) * 1e-3).astype(F32)
    times = {}
    for kind, name in enumerate(KINDS):
        if name in ("input_grad", "deferred_input_grad") and not layer["input_grad"]:
            times[name] = 0.0
            continue
        args = (W.copy(), np.zeros(n_out, F32), np.empty((1, n_out), F32), D, np.empty((1, n_out), F32),
                np.empty((1, n_in), F32), S.copy(), np.zeros(n_out, F32), U.copy(), V.copy(), A.copy())
        _time_kernel(kind, 4, X, *args, ALPHA, ALPHA**window, 1e-5)  # compile, warm
        best = float("inf")
        for _ in range(repeats):
            tic = time.thread_time()
            _time_kernel(kind, calls, X, *args, ALPHA, ALPHA**window, 1e-5)
            best = min(best, time.thread_time() - tic)
        times[name] = 1e6 * best / calls
    return times


def ogd_round_cpu_us(config: dict, stream=None, rounds: int = CHUNK, blocks: int = 3) -> float:
    """CPU microseconds of a fused OGD round of ``config``'s run (best of ``blocks`` blocks)."""
    run = OnlineVFL(dict(config) | {"optimizer.name": "ogd", "rounds": 2**62}, stream=stream)
    run.run(rounds)
    best = float("inf")
    for _ in range(blocks):
        tic = time.thread_time()
        run.run(run.t + rounds)
        best = min(best, time.thread_time() - tic)
    return 1e6 * best / rounds


def form_costs(config: dict, windows: tuple[int, ...] = (10, 100, 150), *, stream=None, calls: int = 1000,
               repeats: int = 5, ogd_rounds: int = CHUNK, seed: int = 0) -> dict:
    """Per layer of ``config``'s model and per window: each kernel's time, what each form adds to
    OGD's passes, the form DLR picks and the cheaper one measured; per window the sums over the
    model's layers and the bound on DLR/OGD (see the module docstring)."""
    rng = np.random.default_rng(seed)
    layers = model_layers(OnlineVFL(dict(config), stream=stream))
    ogd_round = ogd_round_cpu_us(config, stream, ogd_rounds)
    out = {"load_average": os.getloadavg(), "ogd_round_us": ogd_round, "windows": []}
    for window in windows:
        rows, sums = [], dict.fromkeys(FORMS, 0.0)
        for layer in layers:
            t = _layer_times(layer, window, calls, repeats, rng)
            ogd = t["forward"] + t["input_grad"] + t["ogd_step"]
            extra = {
                "running_sum": t["running_sum_step"] - t["ogd_step"],
                "deferred": t["deferred_step"] - t["ogd_step"] + t["deferred_forward"] - t["forward"]
                + t["deferred_input_grad"],
                "dense_floor": t["second_matrix_pass"] - t["ogd_step"],
                "factored_floor": t["deferred_forward"] - t["forward"] + t["deferred_input_grad"],
            }
            rows.append({**layer, "us": t, "ogd": ogd, "extra": extra,
                         "picked": "deferred" if dlr_defers(layer, window) else "running_sum",
                         "cheaper": min(("running_sum", "deferred"), key=extra.__getitem__)})
            sums["ogd"] += layer["count"] * ogd
            for k, v in extra.items():
                sums[k] += layer["count"] * v
        floor = min(sums["dense_floor"], sums["factored_floor"])
        out["windows"].append({"window": window, "layers": rows, "per_round_us": sums,
                               "dlr_over_ogd_at_most": ogd_round / (ogd_round + floor),
                               "dlr_over_ogd_running_sum": ogd_round / (ogd_round + sums["running_sum"])})
    out["load_average_after"] = os.getloadavg()
    return out


def format_form_costs(results: dict) -> list[str]:
    """The table of :func:`form_costs` (80 columns): per window and layer, each kernel's CPU
    microseconds, what the running sum (+run) and the deferred form (+def) add to OGD's passes, and
    the form DLR picks / the cheaper one measured (R running sum, D deferred); then the sums."""
    short = {"running_sum": "R", "deferred": "D"}
    lines = [f"DLR layer forms, CPU us per call (load {results['load_average'][0]:.2f}); "
             f"a fused OGD round {results['ogd_round_us']:.1f} us",
             f"{'l':>4s} {'layer':7s}{'n':>2s}{'fwd':>6s}{'grad':>6s}{'ogd':>6s}{'run':>6s}{'dstep':>6s}"
             f"{'dfwd':>6s}{'dgrad':>6s}{'W-=cS':>6s}{'+run':>6s}{'+def':>6s} p/m"]
    for w in results["windows"]:
        for r in w["layers"]:
            t = r["us"]
            lines.append(f"{w['window']:4d} {r['out']:>3d}x{r['in']:<3d}{r['count']:2d}"
                         + "".join(f"{t[k]:6.2f}" for k in KINDS)
                         + f"{r['extra']['running_sum']:6.2f}{r['extra']['deferred']:6.2f}"
                         f" {short[r['picked']]}/{short[r['cheaper']]}")
        s = w["per_round_us"]
        lines.append(f"{w['window']:4d} per round: OGD's layers {s['ogd']:.2f} us; running sum "
                     f"+{s['running_sum']:.2f}, deferred +{s['deferred']:.2f}")
        lines.append(f"     floors: dense +{s['dense_floor']:.2f}, factored "
                     f"+{s['factored_floor']:.2f}; DLR/OGD {w['dlr_over_ogd_running_sum']:.2f} now, "
                     f"{w['dlr_over_ogd_at_most']:.2f} at best")
    lines.append(f"load after {results['load_average_after'][0]:.2f}")
    return lines
