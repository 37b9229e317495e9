"""Online VFL (task ``ovfl``): event-driven vertical FL over a stream (the paper's Algorithm 1).

Start here: ``engine.OnlineVFL(load_config("ovfl-imnist")).run()``, the in-process simulator.
Each round is ``protocol.play_round`` between the parties (``client``, ``server``) exchanging typed
messages (``fedstream.transport.messages``); ``activation`` picks who takes part; ``task`` and ``config``
are what the command line sees. ``stack`` plays K runs in batched kernels; ``reference`` is the torch
oracle; ``deploy/`` the same parties across processes. Method and speed: ``docs/online-vfl.md``.
"""
