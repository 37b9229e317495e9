"""Batch VFL deployed: a client node's party (:mod:`.host`), the server's (:mod:`.driver` over the
remote cohort of :mod:`.proxy`) and what :mod:`fedstream.deploy` drives (:mod:`.adapter`)."""
