"""Benchmarks for `make bench`: every figure is a ratio against a peer measured in the same run."""

import os


def user_env() -> dict[str, str]:
    """This environment as a user's shell has it: Python writes bytecode.

    The sandbox this project is developed in sets PYTHONDONTWRITEBYTECODE, which no
    install does; left set, every timed run would compile the toolkit and the policy
    pack from source again. Benchmarks warm up once (or keep the best of several runs)
    so that they time what a user's second run costs.
    """
    return {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
