"""Online VFL (task ``ovfl``): event-driven vertical FL over a stream (the paper's Algorithm 1).

Start here: ``engine.OnlineVFL(load_config("ovfl-imnist")).run()``, the in-process simulator.
Each round is ``protocol.play_round`` between the parties (``client``, ``server``) exchanging
``messages`` over a transport; ``activation`` picks who takes part, ``window`` is SLR's sample ring.
``stack`` (with ``stacked_parties``) plays K runs in batched kernels; ``reference`` is the torch oracle.
Method, options and speed: ``docs/online-vfl.md``; runs across processes: ``fedstream.deploy``.
"""
