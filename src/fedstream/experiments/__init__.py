"""Experiments: grids of runs executed side by side on every core."""
