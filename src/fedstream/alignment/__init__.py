"""Private entity alignment: which ids the parties share, found by private set intersection (PSI).

Each party of a vertical federation has its own file keyed by its own ids. Before training, the
server runs PSI with each client (:mod:`fedstream.alignment.psi`, on OpenMined's ``openmined-psi``:
ECDH over P-256 with a Golomb-compressed set), exchanging the typed messages of
:mod:`fedstream.alignment.messages`; :func:`fedstream.alignment.session.align` plays that exchange in
one process and counts the bytes of every encoded message. What each party learns is in
docs/alignment.md.
"""

from fedstream.alignment.messages import Intersection, Placement, PsiReply, PsiRequest, decode
from fedstream.alignment.psi import AlignmentClient, AlignmentServer
from fedstream.alignment.session import Alignment, align

__all__ = ["Alignment", "AlignmentClient", "AlignmentServer", "Intersection", "Placement", "PsiReply",
           "PsiRequest", "align", "decode"]
