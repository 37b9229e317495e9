#!/usr/bin/env bash
# The device benchmark of the README (issue 21), one prepared run on a machine with a GPU:
# a vfl-mnist epoch, a ResNet-18 vfl-cifar10 epoch on synthetic CIFAR-shaped arrays and a CHFL
# covertype run, each on the CPU and on CUDA, printed as a markdown table (bench-device.md) with
# the figures in bench-device.json.
#
# Run from the repository root, with the data next to the code (MNIST's IDX files in data/mnist/,
# covertype in data/covertype_kaggle/; copy them from ../shared/data):
#   scripts/gpu_bench.sh            # full sizes (minutes on an H100)
#   scripts/gpu_bench.sh --tiny     # seconds: checks that everything runs
# Needs Python 3.11+, torch (with CUDA for the GPU column), numpy, numba, rich, pyyaml, threadpoolctl.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA="${FEDSTREAM_DATA:-}"
if [ -z "$DATA" ]; then
  for d in data shared/data ../shared/data ../../shared/data; do
    if [ -d "$d/mnist" ]; then DATA="$d"; break; fi
  done
fi
DATA="${DATA:-data}"
PY="${PYTHON:-python3}"
DEVICES=cpu
if "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  DEVICES=cpu,cuda
  "$PY" -c 'import torch; print("GPU:", torch.cuda.get_device_name(0), "| torch", torch.__version__)'
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
else
  echo "no CUDA device: timing the CPU only" >&2
fi
echo "CPU cores: $(nproc); data: $DATA"
PYTHONPATH=src "$PY" -m fedstream bench device --devices "$DEVICES" --data-root "$DATA" \
  --json bench-device.json "$@" | tee bench-device.md
