"""CHFL (batch mode) deployed: :mod:`.driver` (the server party, the simulator's ``BatchRun`` over
remote clients), :mod:`.proxy` (the remote cohort), :mod:`.host` (a client node's party), :mod:`.data`
(a node's rows and columns) and :mod:`.adapter` (what :mod:`fedstream.deploy` drives). Start at
:mod:`.adapter`."""
