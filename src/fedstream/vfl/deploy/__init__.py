"""Batch VFL deployed: :mod:`.driver` (the server party, the simulator's trainer over remote clients),
:mod:`.proxy` (the remote cohort), :mod:`.host` (a client node's party), :mod:`.data` (each party's
data), :mod:`.vfps` (VF-PS distances over the network) and :mod:`.adapter` (what
:mod:`fedstream.deploy` drives). Start at :mod:`.adapter`."""
