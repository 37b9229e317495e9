"""Compressed links between the server and each client (issue 7; the paper's sections 3.1-3.2).

:class:`CompressionSpec` is the configuration (``compression.*``): one payload codec per direction.
A link has two ends. :class:`ClientEndpoint` sits with client m: it encodes m's embeddings with
the uplink codec and decodes the gradients m receives. :class:`ServerEndpoint` sits with the
server, one per client: it decodes m's embeddings (and keeps m's embedding cache) and encodes m's
gradients (and keeps m's gradient distribution table). :class:`CompressedTransport` joins the two
ends of every link in one process: like :class:`InProcessTransport`, every message is really
encoded, counted by the ledger and decoded, and the receiver gets the decoded, lossy values, so
training sees the compression. A network backend would put the ends in different processes.

A direction configured ``none`` sends the plain format of :mod:`fedstream.transport.codec`, byte
for byte; :func:`make_transport` returns the plain :class:`InProcessTransport` (untouched, as fast
as before) when neither direction compresses.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace

import numpy as np

from fedstream.errors import ConfigError, ProtocolError
from fedstream.transport.codec import decode, encode
from fedstream.transport.inprocess import InProcessTransport
from fedstream.transport.ledger import ByteLedger
from fedstream.transport.links import (
    QuantReceiver,
    QuantSender,
    RankedTopKSender,
    Receiver,
    Sender,
    SignReceiver,
    SignSender,
    SparseReceiver,
    TopKSender,
)
from fedstream.transport.messages import Embedding, Gradient, Message
from fedstream.transport.wire import CODEC_NAMES, frame, is_compressed, unframe

UP_CODECS = ("none", "topk", "topk-grad")
DOWN_CODECS = ("none", "sign", "sign-scaled", "quant-huffman")
OUTLIERS = ("zero", "clip")
ROUNDINGS = ("nearest", "stochastic")
VALUE_DTYPES = ("float32", "float16", "int8")


@dataclass(frozen=True)
class CompressionSpec:
    """Which codec each direction uses (paper settings: ratio 0.125, P = 24 levels).

    ``up``: ``none``, ``topk`` (C-VFL, eq. 1) or ``topk-grad`` (ranked by the last received
    gradient); ``cache``: the server fills unsent entries from its per-sample cache (eqs. 2-3;
    top-k only); ``ratio``: fraction of each embedding row sent; ``down``: ``none``, ``sign``
    (signSGD, +-1), ``sign-scaled`` (signSGD with the scale mean |g|) or ``quant-huffman``
    (3-sigma quantiser + Huffman); ``levels``: P.

    Options beyond the paper, off by default: ``outliers``: the quantiser sends entries outside
    [mu - width sigma, mu + width sigma] as 0 (``zero``, the paper) or as the nearer end point
    (``clip``); ``value_dtype``: the sent top-k values as ``float32`` (the paper), ``float16`` or
    ``int8`` (on a per-row scale); ``feedback``:
    the client adds to each sample's embedding the residual of what it did not send for that
    sample the last time (error feedback); ``rounding``: the quantiser rounds to the nearest level
    (``nearest``, the paper) or up with probability the fractional part (``stochastic``, unbiased);
    ``width``: the quantiser's interval is mu +- width sigma (the paper: 3).
    """

    up: str = "none"
    down: str = "none"
    ratio: float = 0.125
    levels: int = 24
    cache: bool = False
    outliers: str = "zero"
    value_dtype: str = "float32"
    feedback: bool = False
    rounding: str = "nearest"
    width: float = 3.0
    seed: int = 0  # the run's seed (``seed``), a part of the stochastic rounding's key

    def __post_init__(self) -> None:
        _check_choice("compression.up", self.up, UP_CODECS)
        _check_choice("compression.down", self.down, DOWN_CODECS)
        if (
            isinstance(self.ratio, bool)
            or not isinstance(self.ratio, (int, float))
            or not 0 < self.ratio <= 1
        ):
            raise ConfigError(
                f"compression.ratio = {self.ratio!r}: expected a number in (0, 1] (paper: 0.125)"
            )
        if isinstance(self.levels, bool) or not isinstance(self.levels, int) or not 1 <= self.levels <= 254:
            raise ConfigError(
                f"compression.levels = {self.levels!r}: expected an integer in 1..254 (paper: 24)"
            )
        if not isinstance(self.cache, bool):
            raise ConfigError(f"compression.cache = {self.cache!r}: expected true or false")
        _check_choice("compression.outliers", self.outliers, OUTLIERS)
        _check_choice("compression.value_dtype", self.value_dtype, VALUE_DTYPES)
        if not isinstance(self.feedback, bool):
            raise ConfigError(f"compression.feedback = {self.feedback!r}: expected true or false")
        changed = self.options()
        if self.up == "none":
            for key, what in (("cache", "the cache fills the entries top-k did not send"),
                              ("feedback", "it keeps the entries top-k did not send"),
                              ("value_dtype", "it is the type of the sent entries")):
                if key in changed:
                    raise ConfigError(f"compression.{key} = {str(changed[key]).lower()} needs "
                                      f"compression.up = topk or topk-grad ({what})")
        _check_choice("compression.rounding", self.rounding, ROUNDINGS)
        w = self.width
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not 0 < w <= 64:
            raise ConfigError(f"compression.width = {self.width!r}: expected a number in (0, 64] (paper: 3)")
        for key in ("outliers", "rounding", "width"):
            if key in changed and self.down != "quant-huffman":
                raise ConfigError(f"compression.{key} = {changed[key]!r} needs compression.down = "
                                  "quant-huffman (it is the 3-sigma quantiser's rule)")

    def options(self) -> dict:
        """The settings that differ from their defaults (the paper's), besides the directions'
        codecs ``up`` and ``down`` and the run's ``seed``: what a run's header names."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.name not in ("up", "down", "seed") and getattr(self, f.name) != f.default}

    @property
    def is_none(self) -> bool:
        """True when neither direction compresses (the plain transport applies)."""
        return self.up == "none" and self.down == "none"

    @classmethod
    def from_config(cls, config: Mapping) -> CompressionSpec:
        """The spec of a flat config (``compression.up`` ...); absent keys take the defaults."""
        keys = {f.name: _config_key(f.name) for f in fields(cls)}
        return cls(**{f: config[k] for f, k in keys.items() if config.get(k) is not None})

    def to_config(self) -> dict:
        """The ``compression.*`` keys of this spec (the run's ``seed`` is the run's, not written)."""
        return {_config_key(f.name): getattr(self, f.name) for f in fields(self) if f.name != "seed"}


def _config_key(field: str) -> str:
    """The config key of a spec field: ``compression.<field>``, and the run's ``seed``."""
    return "seed" if field == "seed" else f"compression.{field}"


def _check_choice(key: str, value, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ConfigError(f"{key} = {value!r}: expected one of {', '.join(choices)}")


def up_codec(spec: CompressionSpec) -> tuple[Sender, Receiver] | None:
    """(client-side sender, server-side receiver) of the uplink, or None for ``none``."""
    if spec.up == "none":
        return None
    kind = TopKSender if spec.up == "topk" else RankedTopKSender
    return kind(spec.ratio, value_dtype=spec.value_dtype, feedback=spec.feedback), SparseReceiver(spec.cache)


def down_codec(spec: CompressionSpec, client: int = 0) -> tuple[Sender, Receiver] | None:
    """(server-side sender, client-side receiver) of the downlink, or None for ``none``.

    ``client``: the link's client index (with ``spec.seed``, it keys the stochastic rounding's draws)."""
    if spec.down == "none":
        return None
    if spec.down in ("sign", "sign-scaled"):
        scaled = spec.down == "sign-scaled"
        return SignSender(scaled), SignReceiver(scaled)
    return (QuantSender(spec.levels, spec.outliers, spec.rounding, (spec.seed, client), spec.width),
            QuantReceiver(spec.levels))


class _Endpoint:
    """One end of client ``client``'s link: a sender for one direction, a receiver for the other."""

    sends: type  # the message type this end encodes with ``sender``
    receives: type

    def __init__(self, client: int, sender: Sender | None, receiver: Receiver | None):
        self.client = client
        self.sender = sender
        self.receiver = receiver

    def send(self, msg: Message, samples: np.ndarray | None = None) -> bytes:
        """Bytes of ``msg``: compressed when it is this end's message type and the direction compresses.

        ``samples``: the sample id of each row, when this end knows them (error feedback's key)."""
        if self.sender is None or type(msg) is not self.sends:
            return encode(msg)
        return frame(msg, self.sender.wire, self.sender.payload(msg.values, round=msg.round, samples=samples))

    def receive(self, data: bytes, samples: np.ndarray | None = None) -> Message:
        """The message that ``data`` decodes to; compressed payloads are decoded by this end's receiver.

        ``samples``: the sample id of each row, when this end knows them (see
        :meth:`CompressedTransport.up`)."""
        if not is_compressed(data):
            msg = decode(data)
        else:
            msg = self._decompress(data, samples)
        if msg.client != self.client:
            raise ProtocolError(
                f"a {type(msg).__name__} for client {msg.client} arrived on client {self.client}'s link"
            )
        return msg

    def _decompress(self, data: bytes, samples: np.ndarray | None) -> Message:
        f = unframe(data)
        if f.type is not self.receives or self.receiver is None:
            raise ProtocolError(
                f"compressed {f.type.__name__} for round {f.round} arrived at the {self.side} end "
                f"of client {self.client}'s link, which expects {self._expects()}"
            )
        if f.codec != self.receiver.wire:
            raise ProtocolError(
                f"{f.type.__name__} for round {f.round}, client {f.client}: payload coded with "
                f"{CODEC_NAMES[f.codec]}, this link is configured for {CODEC_NAMES[self.receiver.wire]}"
            )
        return f.type(
            f.round, f.client, self.receiver.values(f.payload, f.shape, round=f.round, samples=samples)
        )

    def _expects(self) -> str:
        return (
            "uncompressed messages only" if self.receiver is None else f"compressed {self.receives.__name__}s"
        )

    def state_dict(self) -> dict[str, np.ndarray]:
        state = {}
        for name, part in (("sender", self.sender), ("receiver", self.receiver)):
            if part is not None:
                state |= {f"{name}.{k}": v for k, v in part.state_dict().items()}
        return state

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        for name, part in (("sender", self.sender), ("receiver", self.receiver)):
            if part is not None:
                prefix = f"{name}."
                part.load_state_dict({k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)})


class ClientEndpoint(_Endpoint):
    """Client m's end: compresses its embeddings, decodes its gradients (and shows them to the ranking)."""

    sends, receives, side = Embedding, Gradient, "client"

    def __init__(self, client: int, spec: CompressionSpec):
        up, down = up_codec(spec), down_codec(spec)
        super().__init__(client, up and up[0], down and down[1])

    def receive(self, data: bytes, samples: np.ndarray | None = None) -> Message:
        msg = super().receive(data, samples)
        if self.sender is not None and isinstance(msg, Gradient):
            self.sender.observe_gradient(msg.values)
        return msg


class ServerEndpoint(_Endpoint):
    """The server's end of client m's link: decodes m's embeddings, compresses m's gradients."""

    sends, receives, side = Gradient, Embedding, "server"

    def __init__(self, client: int, spec: CompressionSpec):
        up, down = up_codec(spec), down_codec(spec, client)
        super().__init__(client, down and down[0], up and up[1])


class ServerEnds:
    """The server's end of every client's compressed link (a deployment's server: its ends live with its
    cohort, not in a transport), a stateless ``probe`` that checks a received embedding before any
    end sees it (None: the uplink does not compress) and the ``setting`` it stands for, for errors."""

    def __init__(self, n_clients: int, spec: CompressionSpec):
        self.spec = spec
        self.ends = [ServerEndpoint(m, spec) for m in range(n_clients)]
        up = up_codec(replace(spec, cache=False))
        self.probe = None if up is None else up[1]  # stateless: checks an embedding before ``ends`` sees it
        self.setting = f"compression.up = {spec.up!r}"

    def __getitem__(self, m: int) -> ServerEndpoint:
        return self.ends[m]

    def state_dict(self) -> dict[str, np.ndarray]:
        """Each end's embedding cache and quantiser table, under ``"<client>."``."""
        return {f"{end.client}.{k}": v for end in self.ends for k, v in end.state_dict().items()}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        for end in self.ends:
            prefix = f"{end.client}."
            end.load_state_dict({k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)})


class CompressedTransport:
    """Moves messages between parties in one process through compressed links; counts the bytes."""

    def __init__(self, n_clients: int, spec: CompressionSpec):
        if not isinstance(spec, CompressionSpec):
            raise ConfigError(f"expected a CompressionSpec, got {type(spec).__name__}")
        self.spec = spec
        self.ledger = ByteLedger(n_clients)
        self.client_ends = [ClientEndpoint(m, spec) for m in range(n_clients)]
        self.server_ends = [ServerEndpoint(m, spec) for m in range(n_clients)]

    def up(self, msg: Message, samples: np.ndarray | None = None) -> Message:
        """Client ``msg.client`` -> server.

        ``samples`` (optional): the id of the sample in each row of ``msg``, as the server knows it
        because it chose the batch (batch VFL: dataset indices). It does not travel and costs no
        bytes; it keys the server's embedding cache and the client's error-feedback residuals (the
        client computed the rows, so it knows them too). Without it, rows are the online engine's
        window of the samples of rounds ``round - rows + 1 .. round``."""
        m = self._client(msg)
        data = self.client_ends[m].send(msg, samples)
        self.ledger.add(m, "up", len(data))
        return self.server_ends[m].receive(data, samples)

    def down(self, msg: Message) -> Message:
        """Server -> client ``msg.client``."""
        m = self._client(msg)
        data = self.server_ends[m].send(msg)
        self.ledger.add(m, "down", len(data))
        return self.client_ends[m].receive(data)

    def _client(self, msg: Message) -> int:
        if not 0 <= msg.client < len(self.client_ends):
            raise ProtocolError(f"{type(msg).__name__} names client {msg.client}; "
                                f"this transport links clients 0..{len(self.client_ends) - 1}")
        return msg.client

    def fork(self) -> CompressedTransport:
        """An independent copy of every end's state with a fresh ledger (e.g. to evaluate without side
        effects)."""
        twin = copy.deepcopy(self)
        twin.ledger = ByteLedger(len(self.client_ends))
        return twin

    def state_dict(self) -> dict[str, np.ndarray]:
        """The links' state (ranking gradients, caches, mu/sigma tables) for a checkpoint; not the ledger."""
        state = {}
        for side, ends in (("client", self.client_ends), ("server", self.server_ends)):
            for end in ends:
                state |= {f"{side}{end.client}.{k}": v for k, v in end.state_dict().items()}
        return state

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        for side, ends in (("client", self.client_ends), ("server", self.server_ends)):
            for end in ends:
                prefix = f"{side}{end.client}."
                end.load_state_dict({k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)})


def make_transport(
    n_clients: int, spec: CompressionSpec | None = None
) -> InProcessTransport | CompressedTransport:
    """The plain in-process transport when nothing is compressed, else a :class:`CompressedTransport`."""
    if spec is None or spec.is_none:
        return InProcessTransport(n_clients)
    return CompressedTransport(n_clients, spec)
