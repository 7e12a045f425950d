"""Benchmarks for `make bench`: each module returns rows; `python -m benchmarks` prints them."""
