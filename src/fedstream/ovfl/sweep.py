"""Online VFL runs side by side in one process (a sweep's worker): shared stream chunks, stacks.

Runs that read the same stream advance together chunk by chunk: each chunk of the stream is
generated once and played by every run that needs it. With ``stack``, runs that can share batched
kernels play as stacks (:mod:`fedstream.ovfl.stack`): the same results, one kernel call per layer
for all of them. Every run writes its own folder as it goes (metrics rows, checkpoints, summary).
"""

from __future__ import annotations

import time

from fedstream.errors import DivergedError, FedstreamError
from fedstream.ovfl.engine import CHUNK, STREAM_KEYS, Hooks, OnlineVFL, make_stream
from fedstream.ovfl.stack import MAX_STACK, RunStack, StackDiverged, stack_key
from fedstream.runs.folder import RunFolder, diverged_fields
from fedstream.runs.task import Report, RunSpec


class _Member:
    """A run inside a worker: engine, folder and hooks."""

    def __init__(self, spec: RunSpec, stream, report: Report):
        self.spec, self.dir = spec, RunFolder(spec.out)
        self.run = OnlineVFL(spec.config, stream=stream)
        if self.dir.checkpoint.exists():
            self.run.load(self.dir.checkpoint)
        self.dir.prepare(spec.config, self.run.interval_rows)
        self.hooks = Hooks(on_interval=self.dir.append_row, checkpoint_path=self.dir.checkpoint,
                           checkpoint_every=spec.config["checkpoint.every"], progress_every=2048,
                           on_progress=lambda r: report(spec.name, r.t))
        self.end = spec.config["rounds"]

    @property
    def done(self) -> bool:
        return self.run.t >= self.end


def warm(specs: list[RunSpec]) -> None:
    """What every worker of a sweep would otherwise pay at its start, done once in the parent
    before the workers fork from it (:func:`fedstream.experiments.sweep.sweep`): each distinct
    stream's data (cached by :func:`fedstream.data.load_source`), and the compiled kernels of
    each distinct kind of run, loaded from numba's cache by a few rounds of a throw-away run."""
    streams: dict[tuple, object] = {}
    kinds = set()
    for spec in specs:
        c = spec.config
        key = tuple(c[k] for k in STREAM_KEYS)
        kind = key + (c["optimizer.name"], c["activation.name"], c["compression.up"], c["compression.down"],
                      c["vfl.clients"], c["model.embedding"])
        if kind in kinds:
            continue
        kinds.add(kind)
        rounds = c["optimizer.window"] + 2 if c["optimizer.name"] == "slr" else 2  # SLR: past its warm-up
        try:
            if key not in streams:
                streams[key] = make_stream(dict(c))
            OnlineVFL(dict(c) | {"rounds": rounds}, stream=streams[key]).run()
        except FedstreamError:  # best effort: the run's own worker meets the error and reports it
            continue


def run_online(specs: list[RunSpec], report: Report, stack: bool = False) -> dict[str, dict]:
    """Run the online VFL ``specs`` side by side in this process (each resumes from its folder's
    checkpoint); their summaries by name."""
    summaries: dict[str, dict] = {}
    by_stream: dict[tuple, list[RunSpec]] = {}
    for spec in specs:
        by_stream.setdefault(tuple(spec.config[k] for k in STREAM_KEYS), []).append(spec)
    for group in by_stream.values():
        stream = make_stream(group[0].config)
        members = [_Member(spec, stream, report) for spec in group]
        for m in members:  # checkpointed at its last round, but stopped before its summary
            if m.done:
                _close(m, summaries, report)
        units = _units([m for m in members if not m.done], stack)
        while units:
            chunk = min(u.t // CHUNK for u in units)
            players = [u for u in units if u.t // CHUNK == chunk]
            tic = time.perf_counter()
            X, y, _ = stream.batch(chunk * CHUNK, CHUNK)
            # the shared chunk's cost, split
            share = (time.perf_counter() - tic) / sum(len(u.members) for u in players)
            for u in players:
                for m in u.members:
                    m.run.wall_seconds += share
                units.remove(u)
                units += u.play(chunk, X, y, summaries, report)
    return summaries


class _Unit:
    """What plays a chunk: one run alone, or a stack of runs sharing batched kernels."""

    def __init__(self, members: list[_Member]):
        self.members = members
        self.stack = RunStack([m.run for m in members]) if len(members) > 1 else None

    @property
    def t(self) -> int:
        return self.members[0].run.t

    def play(self, chunk: int, X, y, summaries: dict, report) -> list[_Unit]:
        """Play this chunk; return the units that go on (none when finished; the survivors
        regrouped when runs of a stack diverged)."""
        end = self.members[0].end
        if self.stack is None:
            m = self.members[0]
            try:
                m.run.play_chunk(chunk, X, y, end, m.hooks)
            except DivergedError as exc:  # one run blowing up must not stop the others
                _close_diverged(m, exc, summaries, report)
                return []
        else:
            try:
                self.stack.play_chunk(chunk, X, y, end, [m.hooks for m in self.members])
            except StackDiverged as exc:
                for k in exc.runs:
                    _close_diverged(
                        self.members[k], self.stack.diverged_error(k, exc.round), summaries, report
                    )
                alive = [m for k, m in enumerate(self.members) if k not in exc.runs]
                return _units(alive, True)
            # NaN parameters with finite messages (a NaN output layer): checked once per chunk
            self.stack.write_back()
            bad = [k for k, m in enumerate(self.members) if m.run.nonfinite_parties()]
            if bad:
                for k in bad:
                    try:
                        self.members[k].run.check_finite()
                    except DivergedError as exc:
                        _close_diverged(self.members[k], exc, summaries, report)
                return _units([m for k, m in enumerate(self.members) if k not in bad], True)
        if self.t >= end:
            if self.stack is not None:
                self.stack.write_back()
            for m in self.members:
                _close(m, summaries, report)
            return []
        return [self]


def _units(members: list[_Member], stack: bool) -> list[_Unit]:
    """Members grouped into stacks of equal :func:`~fedstream.ovfl.stack.stack_key` (or alone)."""
    groups: dict[object, list[_Member]] = {}
    for i, m in enumerate(members):
        key = stack_key(m.run) if stack else None
        groups.setdefault(("alone", i) if key is None else key, []).append(m)
    return [_Unit(g[i:i + MAX_STACK]) for g in groups.values() for i in range(0, len(g), MAX_STACK)]


def _close(m: _Member, summaries: dict, report: Report) -> None:
    """Final checkpoint and summary of a finished run."""
    try:
        m.run.close(m.hooks)
    except DivergedError as exc:
        _close_diverged(m, exc, summaries, report)
        return
    summaries[m.spec.name] = summary = m.run.summary()
    m.dir.write_summary(summary)
    report(m.spec.name, m.run.t)


def _close_diverged(m: _Member, exc: DivergedError, summaries: dict, report: Report) -> None:
    """A run whose model went NaN/inf: its summary says where, and it counts as finished."""
    summary = m.run.summary() | diverged_fields(exc)
    summaries[m.spec.name] = summary
    m.dir.write_summary(summary)
    m.end = m.run.t  # done
    report(m.spec.name, m.spec.config["rounds"])
