"""The figures of a run's summary.json that tables and plots show: names, labels, values."""

from __future__ import annotations

MB = 2**20  # the paper's MB: its Full figure, 1953.13 MB, is 2e6 rounds x 512 values x 2 bytes / 2^20
CUMULATIVE_COLUMNS = (
    "client_compute_seconds",
    "server_compute_seconds",
    "wall_seconds",
    "total_mb",
    "up_mb",
    "down_mb",
)
"""The figures that add up over the rounds (the report scales them from our rounds to the paper's)."""
CUMULATIVE = set(CUMULATIVE_COLUMNS)
LABELS = {
    "final_accuracy": "final accuracy",
    "best_accuracy": "best accuracy",
    "test_acc": "test accuracy",
    "prequential_acc": "prequential accuracy",
    "bytes_per_client_mb": "MB per client",
    "accumulated_error": "acc. error",
    "client_compute_seconds": "client compute, wall (s)",
    "server_compute_seconds": "server compute, wall (s)",
    "wall_seconds": "wall (s)",
    "total_mb": "total MB",
    "up_mb": "up MB",
    "down_mb": "down MB",
    "rounds_per_second": "rounds/s",
    "mean_activation_rate": "mean activation rate",
    "test_acc_chfl": "CHFL (mu chosen)",
    "test_acc_mu0": "CHFL mu=0",
    "test_acc_mupos": "CHFL mu>0",
    "test_acc_common": "Common",
    "test_acc_concat": "Concat",
    "test_acc_local": "Local",
    "test_acc_fedprox": "FedProx",
}


def column_value(summary: dict, column: str) -> float | None:
    """A report column from a summary.json (see the definition's column names)."""
    if column.startswith("activation_rate."):
        rates = summary.get("activation_rate", [])
        m = int(column.split(".", 1)[1])
        return rates[m] if m < len(rates) else None
    if column in ("total_mb", "up_mb", "down_mb"):
        if "bytes" not in summary:
            return None
        return summary["bytes"][{"total_mb": "total", "up_mb": "up", "down_mb": "down"}[column]] / MB
    if column == "bytes_per_client_mb":
        return summary["bytes_per_client"] / MB if "bytes_per_client" in summary else None
    if column == "mean_activation_rate":
        rates = summary.get("activation_rate", [])
        return sum(rates) / len(rates) if rates else None
    value = summary.get(column)
    return float(value) if isinstance(value, (int, float)) else None


def label(grid: dict) -> str:
    """A run's label in tables and legends: its grid values, e.g. "dlr / random"."""
    return " / ".join(str(v) for v in grid.values()) or "base"
