"""The server's side of a CHFL run: the FedAvg round loop of every federation, checkpointed.

:class:`BatchRun` runs one federation per learning rate (Algorithm 2 for ``chfl``, Algorithm 1
for ``common``/``concat``, FedProx for ``fedprox``, no federation for ``local``) over a
:class:`~fedstream.chfl.cohort.Cohort`, writes a metrics row per evaluation and a checkpoint after
every FedAvg round (:func:`checkpointed_after`), and resumes from it; :func:`boundary` numbers
those points for a deployed run.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from fedstream.chfl.checkpoint import (
    RunFolder,
    ledger_state,
    load_ledger,
    load_server,
    server_state,
)
from fedstream.chfl.cohort import Cohort
from fedstream.chfl.fedavg import FedAvgServer, try_carry_over
from fedstream.chfl.models import state_arrays
from fedstream.chfl.plan import Plan, Progress, initial_column
from fedstream.chfl.selection import summarize
from fedstream.errors import ProtocolError
from fedstream.transport.ledger import ByteLedger


def checkpointed_after(t: int, rounds: int) -> bool:
    """Whether :class:`BatchRun` checkpoints once round ``t`` of a federation of ``rounds`` rounds is
    done: after every FedAvg round but the last one (``t + 1 < rounds``; round T follows at once and
    the federation's end checkpoints) and at the federation's end (``t == rounds``). A remote cohort
    asks its nodes to keep their state at exactly these points."""
    return t + 1 < rounds or t == rounds


def boundary(lr_index: int, rnd: int, rounds: int) -> int:
    """The run's position (federation ``lr_index``, next round ``rnd``) as one increasing number:
    round requests done over all federations. A deployed run's checkpoints and the nodes' kept
    states are named by it (``fedstream.deploy.session.kept_boundary``)."""
    return lr_index * (rounds + 1) + rnd


class BatchRun:
    """The federations of one run (one per learning rate), checkpointed after every FedAvg round.

    The server's side: the FedAvg server and the round loop; the clients are a :class:`Cohort`
    (in this process, or remote nodes behind a link: the same loop either way). State between
    rounds: the position (learning rate index, rounds done), the server's model, every client's
    :meth:`~fedstream.chfl.client.Client.state`, the validation records with their head snapshots,
    the global common column of every round a record points to, and the byte ledger. With
    ``folder`` (a :class:`~fedstream.chfl.checkpoint.RunFolder`) the run resumes from its
    checkpoint, writes one metrics row per evaluation and a checkpoint after every round
    (:func:`checkpointed_after`). What the clients' side adds to a checkpoint is the cohort's
    (:meth:`Cohort.checkpoint_state`): an in-process cohort saves its clients; a remote one only
    what the server knows of its nodes, each node keeping its own state at the same points.
    """

    def __init__(self, plan: Plan, cohort: Cohort, folder: RunFolder | None = None,
                 progress: Progress | None = None):
        self.plan, self.cohort, self.folder, self.progress = plan, cohort, folder, progress
        self.server: FedAvgServer | None = None  # the FedAvg server of the current (or last) federation
        self.lr_index, self.round = 0, 0
        self.resumed: dict | None = None  # the mid-federation part of a checkpoint, until used
        self.elapsed = 0.0  # wall seconds of earlier sessions of this run
        self.carried: list[list[int]] = []  # (federation, round) of rounds without any update (deployed)
        state = folder.resume() if folder is not None else None
        if state is not None:
            self._load(state)
        self.started = time.perf_counter()

    @property
    def ledger(self) -> ByteLedger:
        return self.cohort.ledger

    def run(self) -> None:
        """Every remaining federation."""
        s = self.plan.settings
        while self.lr_index < len(s.lrs):
            self._federation(s.lrs[self.lr_index])
            self.lr_index, self.round = self.lr_index + 1, 0
            self._checkpoint(mid_federation=False)

    def _federation(self, lr: float) -> None:
        """Rounds ``self.round`` .. T of the federation with learning rate ``lr``."""
        s, plan = self.plan.settings, self.plan
        self.cohort.start(lr)
        initial = initial_column(plan)
        self.server = server = FedAvgServer(state_arrays(initial)) if initial is not None else None
        if self.resumed is not None:
            self._load_federation(self.resumed)
            self.resumed = None
        for t in range(self.round, s.rounds + 1):
            evaluate = t > 0 and (s.select_round or t == s.rounds)
            # θ^t down to every client (t = T: the final model), scored, trained on, sent back up
            models = server.broadcast(range(s.clients)) if server is not None else None
            result = self.cohort.round(
                lr, t, models, validate=evaluate, epochs=0 if t == s.rounds else s.local_epochs
            )
            if evaluate:  # NaN: no client answered (a deployed round whose replies were all lost)
                val = float(np.mean(list(result.val.values()))) if result.val else float("nan")
                row = {"lr": lr, "round": t, "val_acc": val, "bytes_total": self.ledger.total}
                if self.folder is not None:
                    self.folder.append(row)
                if self.progress is not None:
                    self.progress(
                        {"method": plan.method, "lr": lr, "round": t, "rounds": s.rounds, "val_acc": val}
                    )
            if t == s.rounds:
                break
            if server is not None and result.updates:
                server.aggregate(result.updates)
            elif server is not None:  # every update of the round was lost (deployed): θ carries over
                self._carry_over(t)
            self.round = t + 1
            if checkpointed_after(t, s.rounds):  # (t < T here: the federation's end checkpoints in run())
                self._checkpoint(mid_federation=True)

    def _carry_over(self, t: int) -> None:
        """Round ``t`` brought no client's update: θ^{t+1} = θ^t, recorded in :attr:`carried`; a
        second round in a row, or the only round of a federation: ProtocolError
        (:func:`~fedstream.chfl.fedavg.try_carry_over`)."""
        if not try_carry_over(self.server, self.carried, [self.lr_index, t], [self.lr_index, t - 1],
                              only=self.plan.settings.rounds == 1):
            before = f", nor in round {t - 1}" if t else ""
            raise ProtocolError(f"federation {self.lr_index}, round {t}: no client sent a valid model "
                                f"update{before}: the run cannot go on (the clients' faults say why)")

    def test_choices(self, variants: dict[str, Callable[[str], bool]]) -> dict[str, dict]:
        """Each variant's per-client choice, scored on the test rows from its snapshot."""
        return {name: summarize(picks) for name, picks in self.cohort.test_choices(variants).items()}

    # -- checkpoints ---------------------------------------------------------------------------

    def _checkpoint(self, *, mid_federation: bool) -> None:
        if self.folder is None:
            return
        state = {
            "lr_index": self.lr_index, "round": self.round, "ledger": ledger_state(self.ledger),
            **self.cohort.checkpoint_state(mid_federation=mid_federation), "carried": list(self.carried),
            "elapsed": self.elapsed + time.perf_counter() - self.started,
        }
        if mid_federation:
            state["server"] = server_state(self.server)
        self.folder.save(state)

    def _load(self, state: dict) -> None:
        self.lr_index, self.round = int(state["lr_index"]), int(state["round"])
        load_ledger(self.ledger, state["ledger"])
        self.cohort.load_checkpoint(state)
        self.elapsed = float(state["elapsed"])
        self.carried = [[int(i), int(t)] for i, t in state.get("carried", [])]
        if "server" in state:  # stopped between two rounds of a federation (None: Local has no server)
            self.resumed = state

    def _load_federation(self, state: dict) -> None:
        load_server(self.server, state["server"])
        self.cohort.load_federation(state)
