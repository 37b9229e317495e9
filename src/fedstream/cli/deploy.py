"""``fedstream deploy app|local ...``: the command group lives in :mod:`fedstream.deploy.command`
(it imports no Flower until a deploy subcommand runs)."""

from __future__ import annotations

from fedstream.deploy.command import add_deploy_parser, cmd_deploy


def add_parsers(sub) -> None:
    add_deploy_parser(sub)


COMMANDS = {"deploy": cmd_deploy}
