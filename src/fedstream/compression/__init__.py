"""Codecs for compressed VFL messages (the bidirectional compression paper, sections 3.1-3.2).

Uplink (client -> server embeddings): :class:`TopK` (C-VFL), :class:`GradientRankedTopK` (the
paper's improved top-k) and the server's :class:`EmbeddingCache`. Downlink (server -> client
gradients): :class:`ThreeSigmaQuantizer` with Huffman coding (:class:`HuffmanCode`), and the
baselines :class:`SignCodec` (signSGD) and :class:`Float32Codec` (no compression).
Each codec maps an array to the bytes of a message payload and back (``decode(data, shape)``);
malformed bytes raise :class:`fedstream.errors.ProtocolError`.
"""

from fedstream.compression.cache import EmbeddingCache
from fedstream.compression.huffman import HuffmanCode
from fedstream.compression.quantize import (
    Float32Codec,
    QuantizerState,
    SignCodec,
    ThreeSigmaQuantizer,
)
from fedstream.compression.topk import (
    GradientRankedTopK,
    SparseEmbedding,
    TopK,
)

__all__ = [
    "EmbeddingCache",
    "Float32Codec",
    "GradientRankedTopK",
    "HuffmanCode",
    "QuantizerState",
    "SignCodec",
    "SparseEmbedding",
    "ThreeSigmaQuantizer",
    "TopK",
]
