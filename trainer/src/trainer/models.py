"""The models the trainer offers, their loss, and their training FLOPs per sample.

A small MLP, CNN and GPT for drills, and a Llama-style decoder sized by config for real
runs. Each model is built from the data it will see (`DataSpec`), so the same flags work
for synthetic data and files on disk; `build_model` has the signature of a plug-in model
(`trainer.plugins`). None uses dropout or batch statistics: a step's result depends
only on parameters, optimizer state and the batch, which makes runs reproducible across
restarts.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from trainer.config import LANGUAGE_MODELS, ModelConfig
from trainer.data import DataSpec
from trainer.errors import ConfigError

DEFAULT_WIDTH = {"mlp": 256, "cnn": 64, "gpt": 64, "llama": 64}


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


class RMSNorm(nn.Module):
    """x / rms(x) * weight, computed in float32 whatever the input's precision."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * normed.to(x.dtype)


def rope_tables(
    length: int, head_dim: int, theta: float, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the rotary angles, (length, head_dim), halves repeated."""
    inv_freq = 1.0 / theta ** (
        torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim
    )
    angles = torch.outer(torch.arange(length, device=device, dtype=torch.float32), inv_freq)
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate (batch, heads, length, head_dim) by the angles, pairing dim i with i + d/2
    (the Hugging Face layout of Llama's query and key weights)."""
    first, second = x.float().chunk(2, dim=-1)
    rotated = torch.cat((-second, first), dim=-1)
    return (x.float() * cos + rotated * sin).to(x.dtype)


class LlamaAttention(nn.Module):
    def __init__(self, dim: int, heads: int, kv_heads: int):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.q_proj = nn.Linear(dim, heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(heads * self.head_dim, dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape

        def split(t: torch.Tensor, heads: int) -> torch.Tensor:
            return t.view(batch, length, heads, self.head_dim).transpose(1, 2)

        q = apply_rope(split(self.q_proj(x), self.heads), cos, sin)
        k = apply_rope(split(self.k_proj(x), self.kv_heads), cos, sin)
        v = split(self.v_proj(x), self.kv_heads)
        # Query head h reads key/value head h // (heads / kv_heads).
        out = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, enable_gqa=self.kv_heads != self.heads
        )
        return self.o_proj(out.transpose(1, 2).reshape(batch, length, -1))


class SwiGLU(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden, bias=False)
        self.up_proj = nn.Linear(dim, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaBlock(nn.Module):
    def __init__(self, dim: int, heads: int, kv_heads: int, hidden: int, eps: float):
        super().__init__()
        self.input_layernorm = RMSNorm(dim, eps)
        self.self_attn = LlamaAttention(dim, heads, kv_heads)
        self.post_attention_layernorm = RMSNorm(dim, eps)
        self.mlp = SwiGLU(dim, hidden)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaBody(nn.Module):
    def __init__(
        self, vocab: int, dim: int, depth: int, heads: int, kv_heads: int, hidden: int, eps: float
    ):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(
            LlamaBlock(dim, heads, kv_heads, hidden, eps) for _ in range(depth)
        )
        self.norm = RMSNorm(dim, eps)


class Llama(nn.Module):
    """A Llama-style decoder: pre-norm RMSNorm blocks of grouped-query attention with
    rotary positions and a SwiGLU feed-forward, no biases. Parameter names follow the
    Hugging Face checkpoints (`model.layers.0.self_attn.q_proj.weight`, `lm_head.weight`)
    so their safetensors load as they are (`trainer.pretrained`)."""

    def __init__(
        self,
        vocab: int,
        dim: int,
        depth: int,
        heads: int,
        kv_heads: int,
        hidden: int,
        rope_theta: float,
        eps: float,
    ):
        super().__init__()
        self.depth, self.heads, self.dim, self.rope_theta = depth, heads, dim, rope_theta
        self.model = LlamaBody(vocab, dim, depth, heads, kv_heads, hidden, eps)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Normal(0, 0.02) weights, the output projections scaled by depth (GPT-2's
        init, as torchtitan's); norms at one."""
        for name, param in self.named_parameters():
            if name.endswith(("o_proj.weight", "down_proj.weight")):
                nn.init.normal_(param, std=0.02 / math.sqrt(2 * self.depth))
            elif param.dim() > 1:
                nn.init.normal_(param, std=0.02)
            else:
                nn.init.ones_(param)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.model.embed_tokens(idx)
        cos, sin = rope_tables(idx.shape[1], self.dim // self.heads, self.rope_theta, idx.device)
        for block in self.model.layers:
            x = block(x, cos, sin)
        return self.lm_head(self.model.norm(x))


def llama_ffn_dim(width: int) -> int:
    """8/3 of the width (SwiGLU's three matrices cost what a 4x MLP's two do), rounded
    up to a multiple of 64."""
    return math.ceil(8 * width / 3 / 64) * 64


def build_llama(config: ModelConfig, spec: DataSpec, width: int) -> Llama:
    kv_heads = config.kv_heads or config.heads
    if width % config.heads:
        raise ConfigError(f"--width {width} is not divisible by --heads {config.heads}")
    if (width // config.heads) % 2:
        raise ConfigError(
            f"--width / --heads = {width // config.heads}: RoPE needs an even head size"
        )
    if config.heads % kv_heads:
        raise ConfigError(f"--heads {config.heads} is not divisible by --kv-heads {kv_heads}")
    hidden = config.ffn_dim or llama_ffn_dim(width)
    return Llama(
        spec.vocab_size,
        width,
        config.depth,
        config.heads,
        kv_heads,
        hidden,
        config.rope_theta,
        config.norm_eps,
    )


def build_model(config: ModelConfig, spec: DataSpec) -> nn.Module:
    width = config.width or DEFAULT_WIDTH[config.name]
    if config.name in LANGUAGE_MODELS and spec.task != "lm":
        raise ConfigError(f"--model {config.name} needs token data")
    if config.name == "llama":
        return build_llama(config, spec, width)
    if config.name == "gpt":
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
    GPT and the Llama: 12 * layers * heads * head_dim * seq_len per token (PaLM, appendix
    B), counted in full although the mask is causal, as MFU figures conventionally are
    (torchtitan)."""
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
    if isinstance(model, GPT | Llama):
        tokens = sample.shape[1]
        flops += 12.0 * model.depth * model.dim * tokens * tokens
    return flops
