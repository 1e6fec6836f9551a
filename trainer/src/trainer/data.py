"""Datasets and the job-wide sample order that makes resumption exactly-once.

The order of samples is a pure function of (seed, epoch): epoch e is a permutation of
the dataset, and the job walks the concatenation of epochs 0, 1, 2, ... as one stream.
A step at world size W takes the next `batch_size * W` positions of the stream and
rank r keeps every W-th of them starting at r. The checkpoint stores only how many
positions the whole job consumed, so a resume, at any world size, continues with the
next position: no sample is repeated or skipped.
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from trainer.config import DataConfig
from trainer.errors import ConfigError

SYNTHETIC_SHAPES = {"mlp": (32,), "cnn": (1, 16, 16)}
SYNTHETIC_CLASSES = 10
SYNTHETIC_VOCAB = 256


@dataclass(frozen=True)
class DataSpec:
    """What a model needs to know about its data."""

    task: str  # "classify" or "lm"
    input_shape: tuple[int, ...] = ()
    num_classes: int = 0
    vocab_size: int = 0
    seq_len: int = 0

    @property
    def tokens_per_sample(self) -> int:
        return self.seq_len if self.task == "lm" else 0


class ClassificationData:
    """Inputs `x[i]` with integer labels `y[i]`, held in memory."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, num_classes: int):
        self.x, self.y = x, y
        self.spec = DataSpec("classify", tuple(x.shape[1:]), num_classes)

    def __len__(self) -> int:
        return len(self.y)

    def batch(self, ids: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        index = torch.from_numpy(ids)
        return self.x[index], self.y[index]


class TokenData:
    """Consecutive windows of `seq_len + 1` tokens; sample i starts at token i * seq_len."""

    def __init__(self, tokens: np.ndarray, seq_len: int, vocab_size: int):
        self.tokens, self.seq_len = tokens, seq_len
        self.spec = DataSpec("lm", (seq_len,), vocab_size=vocab_size, seq_len=seq_len)

    def __len__(self) -> int:
        return (len(self.tokens) - 1) // self.seq_len

    def batch(self, ids: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        span = self.seq_len + 1
        rows = np.stack([self.tokens[i * self.seq_len : i * self.seq_len + span] for i in ids])
        window = torch.from_numpy(rows.astype(np.int64))
        return window[:, :-1], window[:, 1:]


def synthetic_classification(shape: tuple[int, ...], count: int, seed: int) -> ClassificationData:
    """Gaussian inputs labelled by a fixed random linear teacher: learnable, reproducible."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn((count, *shape), generator=generator)
    features = int(np.prod(shape))
    teacher = torch.randn((features, SYNTHETIC_CLASSES), generator=generator)
    y = (x.reshape(count, features) @ teacher).argmax(dim=1)
    return ClassificationData(x, y, SYNTHETIC_CLASSES)


def synthetic_tokens(count: int, seq_len: int, vocab: int, seed: int) -> TokenData:
    """Arithmetic progressions modulo the vocabulary, one per sample, laid end to end."""
    rng = np.random.Generator(np.random.PCG64(seed))
    starts = rng.integers(0, vocab, size=count)
    strides = rng.integers(1, 8, size=count)
    positions = np.arange(seq_len)
    rows = (starts[:, None] + strides[:, None] * positions[None, :]) % vocab
    tokens = np.append(rows.reshape(-1), rows[0, 0]).astype(np.uint16)
    return TokenData(tokens, seq_len, vocab)


def load_npz(path: Path) -> ClassificationData:
    try:
        archive = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except (OSError, ValueError, zipfile.BadZipFile) as error:
        raise ConfigError(f"{path}: not a readable .npz archive ({error})") from None
    with archive:
        missing = [key for key in ("x", "y") if key not in archive.files]
        if missing:
            raise ConfigError(
                f"{path}: missing array(s) {', '.join(missing)}; expected x (inputs) and "
                f"y (integer labels), found {', '.join(archive.files) or 'nothing'}"
            )
        x, y = archive["x"], archive["y"]
    if x.ndim < 2 or y.ndim != 1 or len(x) != len(y):
        raise ConfigError(
            f"{path}: x must be (N, ...) and y (N,), got x{list(x.shape)} and y{list(y.shape)}"
        )
    if len(y) == 0:
        raise ConfigError(f"{path}: the arrays are empty")
    if not np.issubdtype(y.dtype, np.integer) or y.min() < 0:
        raise ConfigError(f"{path}: y must hold non-negative integer class labels")
    if not np.issubdtype(x.dtype, np.number):
        raise ConfigError(f"{path}: x must be numeric, got {x.dtype}")
    inputs = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
    labels = torch.from_numpy(y.astype(np.int64))
    return ClassificationData(inputs, labels, int(y.max()) + 1)


def load_tokens(path: Path, seq_len: int, vocab_size: int | None) -> TokenData:
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    if size % 2:
        raise ConfigError(f"{path}: {size} bytes is not a whole number of uint16 tokens")
    count = size // 2
    if count < seq_len + 1:
        raise ConfigError(
            f"{path}: {count} tokens, but one sample needs seq-len + 1 = {seq_len + 1}"
        )
    tokens = np.memmap(path, dtype=np.uint16, mode="r")
    largest = int(tokens.max())
    if vocab_size is None:
        vocab_size = largest + 1
    elif largest >= vocab_size:
        raise ConfigError(f"{path}: token {largest} is outside --vocab-size {vocab_size}")
    return TokenData(tokens, seq_len, vocab_size)


def load_dataset(config: DataConfig, model: str):
    if config.dataset == "npz":
        return load_npz(config.path)
    if config.dataset == "tokens":
        return load_tokens(config.path, config.seq_len, config.vocab_size)
    if model == "gpt":
        return synthetic_tokens(
            config.num_samples, config.seq_len, config.vocab_size or SYNTHETIC_VOCAB, config.seed
        )
    return synthetic_classification(SYNTHETIC_SHAPES[model], config.num_samples, config.seed)


class SampleOrder:
    """The stream of dataset indices the job walks through, epoch after epoch."""

    def __init__(self, size: int, seed: int):
        self.size, self.seed = size, seed
        self._cache: dict[int, np.ndarray] = {}

    def permutation(self, epoch: int) -> np.ndarray:
        if epoch not in self._cache:
            if len(self._cache) >= 2:
                self._cache.pop(min(self._cache))
            generator = np.random.Generator(np.random.PCG64([self.seed, epoch]))
            self._cache[epoch] = generator.permutation(self.size)
        return self._cache[epoch]

    def epoch_of(self, position: int) -> int:
        return position // self.size

    def take(self, start: int, count: int) -> np.ndarray:
        """Dataset indices at stream positions [start, start + count)."""
        parts, position, end = [], start, start + count
        while position < end:
            epoch, offset = divmod(position, self.size)
            chunk = self.permutation(epoch)[offset : offset + end - position]
            parts.append(chunk)
            position += len(chunk)
        return np.concatenate(parts)


def rank_share(block: np.ndarray, rank: int, world_size: int) -> np.ndarray:
    """The part of a global batch this rank trains on."""
    return block[rank::world_size]
