#!/usr/bin/env bash
# PSI alignment speed (issue 30): 100,000 x 100,000 ids (target <= 20 s on 2 cores), then 1,000,000 x
# 1,000,000 for docs/alignment.md. Pin to two cores with taskset where it exists.
set -euo pipefail
cd "$(dirname "$0")/.."
pin=(); command -v taskset >/dev/null && pin=(taskset -c 0,1)
# other sizes: pass them to the bench psi subcommand as --ids N [N ...]
PYTHONPATH=src "${pin[@]}" python -m fedstream bench psi --ids 100000 1000000 --json bench-psi.json
