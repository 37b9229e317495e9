"""Deployment: the parties of online VFL in separate processes and machines (issue 10, docs/deploy.md).

The server's machine runs :class:`~fedstream.deploy.driver.NetworkVFL`, which plays the very same
:func:`fedstream.ovfl.protocol.play_round` as the simulator, with stand-ins for the remote clients
(:mod:`fedstream.deploy.proxy`: event batches, validation of every reply, faults). Each client node
hosts a real :class:`fedstream.ovfl.client.Client` (:mod:`fedstream.deploy.host`, :mod:`fedstream.deploy.node`)
fed by its own feature block (:mod:`fedstream.deploy.rows`). Messages cross as the exact bytes of
:func:`fedstream.transport.codec.encode`, over a link: in-process (:class:`LoopbackLink`) or Flower
(:mod:`fedstream.deploy.gridlink`, :mod:`fedstream.deploy.flower_app`; needs ``pip install 'fedstream[flower]'``).

CHFL's batch federation runs the same way: :class:`fedstream.deploy.chfl_driver.NetworkCHFL` plays the
simulator's :class:`fedstream.chfl.trainer.BatchRun` over :class:`fedstream.deploy.chfl_proxy.RemoteCohort`,
each node hosts a :class:`fedstream.deploy.chfl_host.CHFLHost` fed only its own rows and columns
(:mod:`fedstream.deploy.chfl_data`). They are not imported here: they need torch, an online VFL node does not.
"""

from fedstream.deploy.driver import NetworkVFL
from fedstream.deploy.host import ClientHost
from fedstream.deploy.link import Envelope, Failure, LoopbackLink
from fedstream.deploy.proxy import LinkTransport, RemoteClient

__all__ = ["ClientHost", "Envelope", "Failure", "LinkTransport", "LoopbackLink", "NetworkVFL", "RemoteClient"]
