"""The plug-in contract: a team's own model, dataset, loss or optimizer by import path.

Each of `--model`, `--dataset`, `--loss` and `--optimizer` takes either a built-in name
or `package.module:attr`, the path of a callable the trainer imports and calls in every
rank. The module must be importable in the image (installed, or on `PYTHONPATH`); the
trainer is not forked and nothing inside it is patched. The callables:

- model: `build(config: ModelConfig, spec: DataSpec) -> torch.nn.Module`. `spec` says
  what the data looks like (task, input shape, classes, vocabulary, sequence length).
  The module returns what the loss takes as its first argument.
- dataset: `build(config: DataConfig) -> Dataset`, where a `Dataset` has `__len__`,
  `spec: DataSpec` and `batch(ids: numpy.ndarray) -> (inputs, targets)`, the samples
  `ids` stacked. The trainer alone decides which ids each rank sees (`data.SampleOrder`),
  so a plug-in dataset keeps exactly-once order across restarts and resizes as long as
  `batch` is a pure function of the ids.
- loss: `loss(outputs, targets) -> torch.Tensor`, a scalar averaged over the batch.
- optimizer: `build(param_groups: list[dict], config: OptimConfig) -> Optimizer`. Each
  group carries `params`, `lr` (the peak learning rate) and `weight_decay`; keep the
  groups as given. The trainer sets every group's `lr` from its schedule at each step.

Models and datasets are built after the process group exists and before the model is
wrapped for data parallelism; all ranks must build the same thing. A model must be
deterministic for resumes to be exact (no dropout, no batch statistics).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Protocol

import numpy as np
import torch

from trainer.errors import ConfigError


class Dataset(Protocol):
    """What a dataset, built-in or plug-in, offers the training loop."""

    spec: object  # trainer.data.DataSpec

    def __len__(self) -> int: ...

    def batch(self, ids: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]: ...


def is_import_path(name: str) -> bool:
    return ":" in name


def parse_choice(kind: str, builtins: tuple[str, ...]) -> Callable[[str], str]:
    """An argparse type: a built-in name, or an import path whose callable exists."""

    def parse(text: str) -> str:
        if is_import_path(text):
            resolve(kind, text)
            return text
        if text not in builtins:
            raise ConfigError(
                f"--{kind} {text!r}: expected one of {', '.join(builtins)} "
                "or an import path module:attr"
            )
        return text

    return parse


def choose(kind: str, name: str, builtin: Callable) -> Callable:
    """The plug-in `name` names, or the trainer's own `builtin` for a built-in name."""
    return resolve(kind, name) if is_import_path(name) else builtin


def resolve(kind: str, path: str) -> Callable:
    """The callable at `module:attr` (dots in attr reach into classes or submodules)."""
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"--{kind} {path!r}: expected an import path module:attr")
    try:
        target = importlib.import_module(module_name)
    except Exception as error:  # the user's module may raise anything while importing
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ConfigError(f"--{kind} {path!r}: cannot import {module_name!r}: {reason}") from None
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ConfigError(f"--{kind} {path!r}: {module_name!r} has no {attr!r}") from None
    if not callable(target):
        raise ConfigError(f"--{kind} {path!r}: {attr!r} is not callable")
    return target
