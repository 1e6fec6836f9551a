"""The three small models the trainer offers, and their training FLOPs per sample.

Each model is built from the data it will see (`DataSpec`), so the same flags work
for synthetic data and files on disk. None uses dropout or batch statistics: a step's
result depends only on parameters, optimizer state and the batch, which makes runs
reproducible across restarts.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from trainer.config import ModelConfig
from trainer.data import DataSpec
from trainer.errors import ConfigError

DEFAULT_WIDTH = {"mlp": 256, "cnn": 64, "gpt": 64}


class MLP(nn.Module):
    def __init__(self, features: int, width: int, classes: int):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(features, width),
            nn.ReLU(),
            nn.Linear(width, width),
            nn.ReLU(),
            nn.Linear(width, classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x.flatten(1))


class CNN(nn.Module):
    def __init__(self, shape: tuple[int, int, int], width: int, classes: int):
        super().__init__()
        channels, height, width_px = shape
        self.features = nn.Sequential(
            nn.Conv2d(channels, 16, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        flat = 32 * (height // 4) * (width_px // 4)
        self.head = nn.Sequential(nn.Linear(flat, width), nn.ReLU(), nn.Linear(width, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, dim = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(dim, dim=2)
        q, k, v = (t.view(batch, length, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(batch, length, dim))
        return x + self.mlp(self.norm2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int, seq_len: int, dim: int, depth: int, heads: int):
        super().__init__()
        self.depth, self.heads, self.dim, self.seq_len = depth, heads, dim, seq_len
        self.tokens = nn.Embedding(vocab, dim)
        self.positions = nn.Embedding(seq_len, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(idx.shape[1], device=idx.device)
        x = self.tokens(idx) + self.positions(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def build_model(config: ModelConfig, spec: DataSpec) -> nn.Module:
    width = config.width or DEFAULT_WIDTH[config.name]
    if config.name == "gpt":
        if spec.task != "lm":
            raise ConfigError("--model gpt needs token data")
        if width % config.heads:
            raise ConfigError(f"--width {width} is not divisible by --heads {config.heads}")
        return GPT(spec.vocab_size, spec.seq_len, width, config.depth, config.heads)
    if spec.task != "classify":
        raise ConfigError(f"--model {config.name} needs classification data (x, y)")
    if config.name == "cnn":
        shape = spec.input_shape
        if len(shape) == 2:
            raise ConfigError("--model cnn needs images shaped (N, C, H, W); got (N, H, W)")
        if len(shape) != 3 or shape[1] < 4 or shape[2] < 4:
            raise ConfigError(f"--model cnn needs inputs (C, H, W) of at least 4x4, got {shape}")
        return CNN(shape, width, spec.num_classes)
    return MLP(math.prod(spec.input_shape), width, spec.num_classes)


def loss_fn(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, -2), targets.flatten())


def training_flops_per_sample(model: nn.Module, sample: torch.Tensor) -> float:
    """Forward plus backward FLOPs of one sample: 6 per multiply-accumulate of the
    matmuls and convolutions, plus the attention scores and their weighted sum for the
    GPT: 12 * layers * heads * head_dim * seq_len per token (PaLM, appendix B), counted
    in full although the mask is causal, as MFU figures conventionally are (torchtitan)."""
    macs = 0

    def count(module: nn.Module, inputs, output) -> None:
        nonlocal macs
        if isinstance(module, nn.Linear):
            macs += (
                inputs[0].numel() // inputs[0].shape[-1] * module.in_features * module.out_features
            )
        elif isinstance(module, nn.Conv2d):
            kernel = module.kernel_size[0] * module.kernel_size[1]
            macs += output.numel() * kernel * module.in_channels // module.groups

    hooks = [
        m.register_forward_hook(count)
        for m in model.modules()
        if isinstance(m, nn.Linear | nn.Conv2d)
    ]
    try:
        with torch.no_grad():
            model(sample[:1])
    finally:
        for hook in hooks:
            hook.remove()
    flops = 6.0 * macs
    if isinstance(model, GPT):
        tokens = sample.shape[1]
        flops += 12.0 * model.depth * model.dim * tokens * tokens
    return flops
