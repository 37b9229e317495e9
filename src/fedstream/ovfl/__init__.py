"""Online VFL (task ``ovfl``): event-driven vertical FL over a stream (the paper's Algorithm 1).

From Python: ``fedstream.ovfl.OnlineVFL(partition=..., ...)`` is a River classifier
(:mod:`fedstream.ovfl.river`, needs River), one sample at a time with ``learn_one`` / ``predict_one``.
The command line's simulator is another class, ``engine.OnlineVFL(load_config("ovfl-imnist")).run()``:
a config in, the whole stream played in chunks. Both play ``protocol.play_round`` between the same
parties (``client``, ``server``) exchanging typed messages (``fedstream.transport.messages``);
``activation`` picks who takes part; ``inference`` is prediction by the trained parties; ``task``
and ``config`` are what the command line sees. ``stack`` plays K runs in batched kernels;
``reference`` is the torch oracle; ``deploy/`` the same parties across processes. Method and speed:
``docs/online-vfl.md``.
"""

__all__ = ["OnlineVFL"]


def __getattr__(name: str):
    """``OnlineVFL`` is imported on first use: River is an optional dependency."""
    if name == "OnlineVFL":
        from fedstream.ovfl.river import OnlineVFL  # optional dependency: river

        return OnlineVFL
    raise AttributeError(f"module 'fedstream.ovfl' has no attribute {name!r}")
