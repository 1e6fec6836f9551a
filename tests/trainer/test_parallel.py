"""The pure parts of `trainer.parallel`: mesh shape, accumulation, blocks, AdamW groups."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from trainer.config import ModelConfig, OptimConfig, ParallelConfig
from trainer.data import DataSpec
from trainer.errors import ConfigError
from trainer.models import build_model
from trainer.parallel import (
    accumulation_steps,
    adamw,
    blocks_of,
    clip_gradients,
    mesh_shape,
    param_groups,
)

GPT_SPEC = DataSpec("lm", (8,), vocab_size=50, seq_len=8)


def test_one_node_shards_flat_and_several_nodes_get_hsdp():
    assert mesh_shape(8, 8) == (8,)
    assert mesh_shape(1, 1) == (1,)
    assert mesh_shape(16, 8) == (2, 8)  # replicate across 2 nodes, shard over 8 GPUs
    with pytest.raises(ConfigError, match="WORLD_SIZE 12 is not a multiple of LOCAL_WORLD"):
        mesh_shape(12, 8)


def test_accumulation_keeps_the_global_batch_at_any_world_size():
    config = ParallelConfig(global_batch=64)
    assert [accumulation_steps(config, 4, world) for world in (1, 2, 4, 16)] == [16, 8, 4, 1]
    assert accumulation_steps(ParallelConfig(), 4, 3) == 1  # no global batch: no accumulation
    with pytest.raises(ConfigError, match="--global-batch 64 is not a multiple of"):
        accumulation_steps(config, 4, 3)


def test_blocks_are_the_transformer_blocks_or_the_top_level_children():
    gpt = build_model(ModelConfig("gpt", 16, depth=3, heads=2), GPT_SPEC)
    assert blocks_of(gpt) == list(gpt.blocks)
    mlp = build_model(ModelConfig("mlp"), DataSpec("classify", (32,), num_classes=10))
    assert blocks_of(mlp) == [mlp.layers]


def test_adamw_exempts_norms_biases_and_embeddings_from_weight_decay():
    gpt = build_model(ModelConfig("gpt", 16, depth=1, heads=2), GPT_SPEC)
    groups = param_groups(gpt, OptimConfig(weight_decay=0.1), 1e-3)
    optimizer = adamw(groups)
    names = {id(p): name for name, p in gpt.named_parameters()}
    decayed, exempt = (
        sorted(names[id(p)] for p in group["params"]) for group in optimizer.param_groups
    )
    assert [group["weight_decay"] for group in optimizer.param_groups] == [0.1, 0.0]
    assert decayed == [
        "blocks.0.mlp.0.weight",
        "blocks.0.mlp.2.weight",
        "blocks.0.proj.weight",
        "blocks.0.qkv.weight",
        "head.weight",
    ]
    assert "tokens.weight" in exempt and "positions.weight" in exempt
    assert "norm.weight" in exempt and "blocks.0.qkv.bias" in exempt
    assert len(decayed) + len(exempt) == len(names)
    assert optimizer.param_groups[0]["lr"] == 1e-3  # no scaling by the world size here


def test_clipping_measures_the_total_norm_and_scales_to_the_limit():
    layer = nn.Linear(4, 3)
    for param in layer.parameters():
        param.grad = torch.full_like(param, 2.0)
    norm = clip_gradients(layer.parameters(), math.inf)
    assert norm == pytest.approx(2.0 * math.sqrt(15))
    assert float(layer.weight.grad[0, 0]) == 2.0  # inf: measured only
    clip_gradients(layer.parameters(), 1.0)
    total = torch.linalg.vector_norm(torch.cat([p.grad.flatten() for p in layer.parameters()]))
    assert float(total) == pytest.approx(1.0, rel=1e-5)
