"""``LinkTransport.wire_bytes`` (online VFL's ``wire_part_bytes``) counts every part the server's link
writes or hands back, used or not: a request sent ahead counts once when it goes, whether the next
batch takes it or a new setup drops it (then the next batch's request is written again)."""

from __future__ import annotations

import numpy as np

from fedstream.deploy.records import ROUND, SETUP, Envelope
from fedstream.ovfl.deploy.proxy import LinkTransport
from fedstream.transport.codec import encode
from fedstream.transport.messages import Embedding, Query

WIDTH = 4


class AheadLink:
    """One node that every event leaves passive, reached as gRPC reaches it: a request ``ahead`` gives
    is written at once, and the next exchange that sends that very request takes its reply instead.
    ``written``: the bytes of every part written or handed back (the link's own count)."""

    n_clients, sends_ahead = 1, True

    def __init__(self):
        self.written, self.early = 0, None

    def available(self) -> set[int]:
        return {0}

    def rejoined(self) -> set[int]:
        return set()

    def exchange(self, requests, ahead=None):
        replies = {}
        for m, env in requests.items():
            if env is not self.early:  # not written ahead: written now
                self.written += sum(map(len, env.parts))
            replies[m] = self._reply(m, env)
        self.early = None
        for m, reply in replies.items() if ahead is not None else ():
            env = ahead(m, reply)
            if env is not None:
                self.early = env
                self.written += sum(map(len, env.parts))
        return replies

    def _reply(self, m: int, env: Envelope) -> Envelope:
        if env.kind == SETUP:
            return Envelope(SETUP, env.round)
        n = env.info["events"]
        parts = [encode(Embedding(env.round + i, m, np.full((1, WIDTH), 0.5, np.float32))) for i in range(n)]
        self.written += sum(map(len, parts))
        return Envelope(ROUND, env.round, parts, {"active": [0] * n})


def transport(link: AheadLink) -> LinkTransport:
    tr = LinkTransport(link, lambda t, m: Query(t, m), embedding=WIDTH)
    tr.set_up([0], 0, {}, lambda m, reply: reply)
    return tr


def test_a_request_sent_ahead_and_taken_counts_once():
    link = AheadLink()
    tr = transport(link)
    assert tr.begin_batch(0, 2, after=(2, False, None)) == {0} and link.early is not None
    assert tr.begin_batch(2, 2) == {0}
    assert tr.wire_bytes == link.written > 0


def test_a_request_sent_ahead_and_dropped_by_a_new_setup_counts_too():
    link = AheadLink()
    tr = transport(link)
    tr.begin_batch(0, 2, after=(2, False, None))
    ahead = link.early
    tr.set_up([0], 2, {}, lambda m, reply: reply)  # the node is set up again: the request ahead is dropped
    tr.begin_batch(2, 2)
    assert ahead is not None and link.early is None
    assert tr.wire_bytes == link.written
