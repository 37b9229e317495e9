"""The code passes ruff with the configuration in pyproject.toml (imports, unused names, line length)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def ruff_command() -> list[str]:
    """``ruff`` on PATH, else ``python -m ruff``; skips when neither is installed."""
    if shutil.which("ruff"):
        return ["ruff"]
    try:
        import ruff  # noqa: F401 (only to see whether it is installed)
    except ImportError:
        pytest.skip("ruff is not installed: pip install -e '.[test]' (or pip install 'ruff>=0.6')")
    return [sys.executable, "-m", "ruff"]


def test_ruff_check_src_and_tests_passes():
    command = [*ruff_command(), "check", "--no-cache", "--output-format", "concise", "src", "tests"]
    proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, f"ruff check src tests found problems:\n{proc.stdout}{proc.stderr}"
