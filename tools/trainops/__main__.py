"""Allows `python -m trainops`."""

from trainops.cli import main

main()
