"""The per-GPU memory estimate of the training state, for each parallelism."""

from __future__ import annotations

import math

import pytest
from torch import nn

from trainer.memory import estimate_memory


def test_ddp_holds_a_full_replica_and_fsdp_a_share_per_rank():
    model = nn.Sequential(nn.Linear(10, 20), nn.Linear(20, 3, bias=False))
    params = 10 * 20 + 20 + 20 * 3
    ddp = estimate_memory(model, "adamw", "ddp", world_size=8)
    assert (ddp.params, ddp.grads, ddp.optimizer) == (4 * params, 4 * params, 8 * params)
    assert ddp.total == 16 * params
    fsdp = estimate_memory(model, "adamw", "fsdp", world_size=8)
    assert fsdp.total == 2 * math.ceil(4 * params / 8) + math.ceil(8 * params / 8)
    assert "fsdp at world size 8" in fsdp.describe()


def test_frozen_parameters_have_no_gradient_or_optimizer_state():
    model = nn.Linear(4, 4, bias=False)
    model.weight.requires_grad_(False)
    estimate = estimate_memory(model.half(), "adamw", "ddp", 1)
    assert (estimate.params, estimate.grads, estimate.optimizer) == (32, 0, 0)


def test_a_plugin_optimizer_state_is_unknown_not_guessed():
    estimate = estimate_memory(nn.Linear(2, 2), "team.opt:Lion", "ddp", 2)
    assert estimate.optimizer is None
    assert "unknown optimizer state" in estimate.describe()
    with pytest.raises(ValueError, match="unknown parallelism"):
        estimate_memory(nn.Linear(2, 2), "adamw", "zero3", 2)
