"""Online VFL deployed: :mod:`.driver` (the server party, the simulator's own loop over remote
clients), :mod:`.proxy` (the remote clients' stand-ins and the transport over a link), :mod:`.host`
(a client node's party), :mod:`.parties` (each party built from the shared config), :mod:`.rows`
(a node's feature block) and :mod:`.adapter` (what :mod:`fedstream.deploy` drives). Start at
:mod:`.adapter`."""
