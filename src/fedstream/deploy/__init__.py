"""Deployment: the parties of a run in separate processes and machines (docs/deploy.md; where each
layer lives: docs/deploy-protocol.md, "Where the code is"). Start at :mod:`fedstream.deploy.session`."""
