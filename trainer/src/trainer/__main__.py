"""`python -m trainer`: run the training loop (see `trainer.cli`)."""

from trainer.cli import main

raise SystemExit(main())
