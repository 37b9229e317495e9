"""Benchmarks: speed measured as ratios against a plain reference run in the same process."""
