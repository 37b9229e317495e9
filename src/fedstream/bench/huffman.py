"""``fedstream bench huffman``: our canonical Huffman codec against the pure-Python ``dahuffman``.

Both code the same message: 1,000,000 symbols from the paper's 3-sigma quantiser (P = 24, so
26 symbols) applied to a standard-normal gradient, i.e. a discretised Gaussian over 26 levels.
Each side builds its table from the symbol counts, encodes and decodes; decoded symbols are
checked against the input. Ours is the message-level coder the quantiser uses
(:func:`~fedstream.compression.huffman_block.encode_block`: it builds the single-symbol and, when
it can win, the symbol-pair code and keeps the smaller). Ours is timed best-of-``repeats`` after a
warm-up (numba compiles on first use); dahuffman once (it takes seconds). We report our whole
block (mode byte, table, bit string) against the empirical entropy bound
``-sum_s c_s log2(c_s / n)`` bits, and the single-symbol code's size beside it.
"""

from __future__ import annotations

import time
from importlib.metadata import version

import numpy as np

from fedstream.compression.huffman import HuffmanCode
from fedstream.compression.huffman_block import (
    PAIRS,
    SINGLE,
    decode_block,
    encode_block,
)
from fedstream.compression.quantize import ThreeSigmaQuantizer, gradient_stats

SPEED_TARGET = 50.0  # x faster than dahuffman
SIZE_TARGET = 0.01  # coded bits + table within 1% of the entropy bound


def gaussian_symbols(n: int, seed: int, levels: int = 24) -> np.ndarray:
    """The quantiser's symbols for an N(0, 1) float32 gradient of n entries (first-round statistics)."""
    g = np.random.default_rng(seed).standard_normal(n).astype(np.float32)
    return ThreeSigmaQuantizer(levels).symbols(g, *gradient_stats(g))


def _ours(sym: np.ndarray, alphabet: int) -> tuple[dict, bytes]:
    """Encode (tables built inside) and decode one block; timings and the block."""
    t0 = time.perf_counter()
    data = encode_block(sym, alphabet)
    t1 = time.perf_counter()
    back = decode_block(data, 0, sym.size, alphabet)
    t2 = time.perf_counter()
    if not np.array_equal(back, sym):
        raise AssertionError("fedstream Huffman round trip failed")
    return {"encode_s": t1 - t0, "decode_s": t2 - t1, "total_s": t2 - t0}, data


def _dahuffman(sym: np.ndarray) -> dict:
    try:
        import dahuffman
    except ImportError:
        return {
            "available": False,
            "note": "dahuffman is not installed (pip install dahuffman); its timing was skipped",
        }
    counts = np.bincount(sym)
    symbols = sym.tolist()  # its input format; not timed
    t0 = time.perf_counter()
    codec = dahuffman.HuffmanCodec.from_frequencies({s: int(c) for s, c in enumerate(counts) if c})
    t1 = time.perf_counter()
    data = codec.encode(symbols)
    t2 = time.perf_counter()
    back = codec.decode(data)
    t3 = time.perf_counter()
    if back != symbols:
        raise AssertionError("dahuffman round trip failed")
    return {"available": True, "version": version("dahuffman"), "build_s": t1 - t0, "encode_s": t2 - t1,
            "decode_s": t3 - t2, "total_s": t3 - t0, "coded_bytes": len(data)}


def bench_huffman(n: int = 1_000_000, seed: int = 0, repeats: int = 5) -> dict:
    """Time and size both codecs on one n-symbol message; return a JSON-ready dict."""
    levels = 24
    alphabet = levels + 2
    sym = gaussian_symbols(n, seed, levels)
    _ours(sym[: min(n, 1000)], alphabet)  # warm-up: numba kernels load or compile
    runs = [_ours(sym, alphabet) for _ in range(max(1, repeats))]
    ours = min((r[0] for r in runs), key=lambda t: t["total_s"])
    data = runs[0][1]
    counts = np.bincount(sym, minlength=alphabet)
    p = counts[counts > 0] / n
    entropy_bits = float(-(counts[counts > 0] * np.log2(p)).sum())
    total_bits = 8 * len(data)
    single = HuffmanCode.from_counts(counts)
    single_bits = 8 * len(encode_block(sym, alphabet, SINGLE))
    ours.update({"mode": "pairs" if data[0] >> 3 == PAIRS else "single", "block_bytes": len(data),
                 "bits_per_symbol": total_bits / n, "single_block_bytes": single_bits // 8,
                 "single_overhead": single_bits / entropy_bits - 1 if entropy_bits else 0.0,
                 "single_max_code_length": single.max_length})
    ref = _dahuffman(sym)
    result = {
        "n": n, "seed": seed, "alphabet": alphabet, "repeats": repeats,
        "entropy_bits": entropy_bits, "entropy_bits_per_symbol": entropy_bits / n,
        "ours": ours, "dahuffman": ref,
        "size_overhead": total_bits / entropy_bits - 1 if entropy_bits else 0.0,
        "speed_ratio": ref["total_s"] / ours["total_s"] if ref.get("available") else None,
    }
    result["size_target_met"] = result["size_overhead"] <= SIZE_TARGET
    result["speed_target_met"] = (
        None if result["speed_ratio"] is None else result["speed_ratio"] >= SPEED_TARGET
    )
    return result


def format_huffman_bench(d: dict) -> str:
    """A few human-readable lines for :func:`bench_huffman`'s dict."""
    o = d["ours"]
    ms = lambda s: f"{1e3 * s:8.1f} ms"
    lines = [
        f"Huffman bench: {d['n']:,} symbols over {d['alphabet']} levels "
        f"(3-sigma quantiser on N(0,1), seed {d['seed']})",
        f"  fedstream  build+encode {ms(o['encode_s'])}  decode {ms(o['decode_s'])}  "
        f"total {ms(o['total_s'])}  (best of {d['repeats']}; {o['mode']} code chosen)",
    ]
    r = d["dahuffman"]
    if r.get("available"):
        lines.append(
            f"  dahuffman  build {ms(r['build_s'])}  encode {ms(r['encode_s'])}  "
            f"decode {ms(r['decode_s'])}  "
            f"total {ms(r['total_s'])}  (v{r['version']}, {8 * r['coded_bytes']:,} bits)"
        )
        ok = "met" if d["speed_target_met"] else "NOT met"
        lines.append(f"  speed ratio {d['speed_ratio']:.0f}x (target >= {SPEED_TARGET:.0f}x: {ok})")
    else:
        lines.append(f"  dahuffman  skipped: {r['note']}")
    ok = "met" if d["size_target_met"] else "NOT met"
    lines.append(
        f"  size {8 * o['block_bytes']:,} bits (mode byte + table + bit string) vs entropy bound "
        f"{d['entropy_bits']:,.0f} bits "
        f"({o['bits_per_symbol']:.4f} vs {d['entropy_bits_per_symbol']:.4f} bits/symbol): "
        f"+{100 * d['size_overhead']:.3f}% (target <= {100 * SIZE_TARGET:.0f}%: {ok}); "
        f"single-symbol code alone: +{100 * o['single_overhead']:.3f}%"
    )
    return "\n".join(lines)
