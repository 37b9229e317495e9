"""The compression paper's comparisons (figures 2-5, table 2) as named batch VFL configurations.

``python -m fedstream.vfl.paper --dataset mnist --epochs 3 --out runs/compression`` runs
each configuration (one after the other, one thread) and prints a markdown table: final test
accuracy, MB up and down, traffic per client (the paper's Table 2 measure: embeddings up plus
gradients down between the server and one client) and its reduction against ``none``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from fedstream.data import resolve_data_root
from fedstream.transport import CompressionSpec
from fedstream.vfl.settings import BatchVFLSettings
from fedstream.vfl.trainer import run_batch_vfl

RATIO, LEVELS = 0.125, 24  # section 4.1: keep 12.5 % of the embedding, P = 24 intervals
CONFIGS: dict[str, CompressionSpec] = {
    "none": CompressionSpec(),
    "topk": CompressionSpec(up="topk", ratio=RATIO),  # figs. 2-3 baseline (C-VFL)
    "topk-grad+cache": CompressionSpec(up="topk-grad", cache=True, ratio=RATIO),  # figs. 2-3, the paper's
    "sign": CompressionSpec(down="sign"),  # figs. 4-5 baseline (signSGD, +-1)
    "sign-scaled": CompressionSpec(down="sign-scaled"),  # signSGD with the scale mean |g|
    "quant-huffman": CompressionSpec(down="quant-huffman", levels=LEVELS),  # figs. 4-5, the paper's
    "combination": CompressionSpec(
        up="topk-grad", cache=True, ratio=RATIO, down="quant-huffman", levels=LEVELS
    ),
    "topk+quant-huffman": CompressionSpec(up="topk", ratio=RATIO, down="quant-huffman", levels=LEVELS),
    "topk+cache": CompressionSpec(up="topk", cache=True, ratio=RATIO),
    "topk-grad": CompressionSpec(up="topk-grad", ratio=RATIO),
}
PAPER = ("none", "topk", "topk-grad+cache", "sign", "quant-huffman", "combination")


def run_all(
    names: list[str], dataset: str, epochs: int, root: Path, seed: int, out: Path | None
) -> list[dict]:
    """Run the named configurations; one summary each (also written under ``out/<name>``)."""
    summaries = []
    for name in names:
        settings = BatchVFLSettings(dataset=dataset, epochs=epochs, compression=CONFIGS[name])
        summary = run_batch_vfl(settings, root, seed=seed, out=None if out is None else out / name)
        summaries.append(summary | {"name": name})
        print(f"{name}: " + " ".join(f"{r['test_accuracy']:.4f}" for r in summary["per_epoch"]), flush=True)
    return summaries


def table(summaries: list[dict]) -> str:
    """Markdown table of accuracy and traffic; reduction against the ``none`` run when present."""
    base = next((s["bytes_per_client"] for s in summaries if s["name"] == "none"), None)
    lines = ["| config | accuracy per epoch | final | MB up | MB down | MB per client | traffic saved |",
             "|---|---|---|---|---|---|---|"]
    for s in summaries:
        accs = " / ".join(f"{r['test_accuracy'] * 100:.2f}" for r in s["per_epoch"])
        saved = "" if base is None else f"{100 * (1 - s['bytes_per_client'] / base):.1f} %"
        lines.append(
            f"| {s['name']} | {accs} | {s['final_accuracy'] * 100:.2f} | {s['bytes']['up'] / 1e6:.1f} | "
            f"{s['bytes']['down'] / 1e6:.1f} | {s['bytes_per_client'] / 1e6:.2f} | {saved} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="mnist", choices=("mnist", "fashion-mnist", "cifar10"))
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-root", default=None)
    parser.add_argument(
        "--configs", default=",".join(PAPER), help=f"comma-separated, of: {', '.join(CONFIGS)}"
    )
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    names = [n for n in args.configs.split(",") if n]
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        parser.error(f"unknown configs {unknown}; choose from {', '.join(CONFIGS)}")
    summaries = run_all(names, args.dataset, args.epochs, resolve_data_root(args.data_root), args.seed,
                        None if args.out is None else Path(args.out))
    print(table(summaries))


if __name__ == "__main__":
    main()
