"""Benchmarks for `make bench`: every figure is a ratio against a peer measured in the same run."""
