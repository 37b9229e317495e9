"""Deployment: the parties of a run in separate processes and machines (docs/deploy.md).

Task-agnostic layers, written once: :mod:`~fedstream.deploy.records` (what travels: envelopes of
encoded fedstream messages and typed control records), :mod:`~fedstream.deploy.session` (a node's
side of a session: setup, rejoin, resume, kept boundaries; and the server's: fault log, rejoins
reconciled over a generic position, end-of-run byte cross-check, the session part of its
checkpoint), :mod:`~fedstream.deploy.serve` (the server's run: the ``--out`` / ``--resume`` rules
and the run's outputs), :mod:`~fedstream.deploy.host` (a node's party: dispatch, byte counters,
the finish reply), :mod:`~fedstream.deploy.cache` (a node's data cache),
:mod:`~fedstream.deploy.adapters` (task name -> the task's adapter, the only place that looks at
the task), :mod:`~fedstream.deploy.runtimes`
(byte movers: in-process loopback, Flower), :mod:`~fedstream.deploy.local` and
:mod:`~fedstream.deploy.credentials` (a deployment on this machine), :mod:`~fedstream.deploy.command`
(``fedstream deploy``).

Each task's own part lives in its package: ``fedstream.ovfl.deploy`` (online VFL: the simulator's
``play_round`` over remote clients), ``fedstream.vfl.deploy`` (batch VFL) and ``fedstream.chfl.deploy``
(CHFL's batch mode). Start at :mod:`fedstream.deploy.session`.
"""
