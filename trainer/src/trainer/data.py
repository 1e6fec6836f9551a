"""Datasets and the job-wide sample order that makes resumption exactly-once.

The order of samples is a pure function of (seed, epoch): epoch e is a permutation of
the dataset, and the job walks the concatenation of epochs 0, 1, 2, ... as one stream.
A step at world size W takes the next `batch_size * W` positions of the stream and
rank r keeps every W-th of them starting at r. The checkpoint stores only how many
positions the whole job consumed, so a resume, at any world size, continues with the
next position: no sample is repeated or skipped.

Token data is one or more shards laid end to end: a `.npy` file declares its dtype
(uint16, or uint32 for vocabularies past 65,536) in its header; a file without that
header is raw uint16, the format of earlier releases.
"""

from __future__ import annotations

import logging
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from trainer.config import LANGUAGE_MODELS, DataConfig
from trainer.errors import ConfigError

log = logging.getLogger("trainer")

SYNTHETIC_SHAPES = {"mlp": (32,), "cnn": (1, 16, 16)}
SYNTHETIC_CLASSES = 10
SYNTHETIC_VOCAB = 256
NPY_MAGIC = b"\x93NUMPY"
TOKEN_DTYPES = (np.dtype(np.uint16), np.dtype(np.uint32))
MAX_SHARDS = 100_000
MAX_NPY_HEADER = 10_000  # numpy's own default bound on a header's bytes


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
    """Consecutive windows of `seq_len + 1` tokens of the shards laid end to end;
    sample i starts at token i * seq_len (a window may span two shards)."""

    def __init__(self, shards: list[np.ndarray], seq_len: int, vocab_size: int):
        self.shards, self.seq_len = shards, seq_len
        self.starts = np.cumsum([0] + [len(shard) for shard in shards])
        self.spec = DataSpec("lm", (seq_len,), vocab_size=vocab_size, seq_len=seq_len)

    def __len__(self) -> int:
        return (int(self.starts[-1]) - 1) // self.seq_len

    def tokens(self, start: int, count: int) -> np.ndarray:
        """Tokens [start, start + count) of the concatenated shards."""
        parts = []
        shard = int(np.searchsorted(self.starts, start, side="right")) - 1
        while count > 0:
            offset = start - int(self.starts[shard])
            part = self.shards[shard][offset : offset + count]
            parts.append(part)
            start, count, shard = start + len(part), count - len(part), shard + 1
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def batch(self, ids: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        span = self.seq_len + 1
        rows = np.stack([self.tokens(int(i) * self.seq_len, span) for i in ids])
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
    dtype = np.uint16 if vocab <= 1 << 16 else np.uint32
    tokens = np.append(rows.reshape(-1), rows[0, 0]).astype(dtype)
    return TokenData([tokens], seq_len, vocab)


def load_npz(path: Path) -> ClassificationData:
    """Arrays x and y of an .npz archive, after their headers show what loading them costs."""
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
        headers = {key: _npy_header(archive.zip, f"{key}.npy", path) for key in ("x", "y")}
        _check_npz_cost(path, headers)
        try:
            x, y = archive["x"], archive["y"]
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as error:
            raise ConfigError(f"{path}: not a readable .npz archive ({error})") from None
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


def _npy_header(archive: zipfile.ZipFile, member: str, path: Path) -> tuple[tuple, np.dtype]:
    """(shape, dtype) from a member's .npy header, read without its data."""
    try:
        with archive.open(member) as handle:
            version = np.lib.format.read_magic(handle)
            read = (
                np.lib.format.read_array_header_1_0
                if version == (1, 0)
                else np.lib.format.read_array_header_2_0
            )
            shape, _fortran, dtype = read(handle, max_header_size=MAX_NPY_HEADER)
    except KeyError:
        raise ConfigError(f"{path}: {member} is missing or not an .npy array") from None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as error:
        raise ConfigError(f"{path}: {member} is not a readable .npy array ({error})") from None
    if dtype.hasobject:
        raise ConfigError(
            f"{path}: {member} holds Python objects ({dtype}), which load only by unpickling; "
            "save numeric arrays"
        )
    return tuple(shape), dtype


def _check_npz_cost(path: Path, headers: dict[str, tuple[tuple, np.dtype]]) -> None:
    """Refuse arrays that cannot fit in memory before decompressing them: an .npz of
    zeros compresses ~1000:1, so a few MB can declare GBs. Each local rank loads its own
    copy, and x is copied once more as float32."""
    (x_shape, x_dtype), (y_shape, y_dtype) = headers["x"], headers["y"]
    x_items, y_items = int(np.prod(x_shape, dtype=object)), int(np.prod(y_shape, dtype=object))
    needed = x_items * (x_dtype.itemsize + 4) + y_items * (y_dtype.itemsize + 8)
    ranks = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1))
    available = memory_available()
    if available is not None and needed * ranks > available:
        raise ConfigError(
            f"{path}: x{list(x_shape)} {x_dtype} and y{list(y_shape)} {y_dtype} need "
            f"{needed / 2**30:.1f} GiB per rank once loaded ({ranks} rank(s) here), more than "
            f"the {available / 2**30:.1f} GiB of memory available"
        )


def memory_available() -> int | None:
    """Bytes this process can still allocate: the lower of the node's MemAvailable and
    what the cgroup's limit leaves (v2 memory.max, v1 memory.limit_in_bytes)."""
    found = []
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    for limit, usage in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        (
            "/sys/fs/cgroup/memory/memory.limit_in_bytes",
            "/sys/fs/cgroup/memory/memory.usage_in_bytes",
        ),
    ):
        try:
            found.append(int(Path(limit).read_text()) - int(Path(usage).read_text()))
        except (OSError, ValueError):  # absent, or "max": no limit
            continue
    return min(found) if found else None


def open_token_shard(path: Path) -> np.ndarray:
    """One shard, memory-mapped: a .npy file of uint16 or uint32 (by its header), else
    raw uint16."""
    try:
        with path.open("rb") as handle:
            magic = handle.read(len(NPY_MAGIC))
        size = path.stat().st_size
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except OSError as error:
        raise ConfigError(f"{path}: cannot read ({error.strerror})") from None
    if magic != NPY_MAGIC:
        if size % 2:
            raise ConfigError(f"{path}: {size} bytes is not a whole number of uint16 tokens")
        return np.memmap(path, dtype=np.uint16, mode="r") if size else np.zeros(0, np.uint16)
    try:
        tokens = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as error:
        raise ConfigError(f"{path}: not a readable .npy file ({error})") from None
    if tokens.ndim != 1 or tokens.dtype.newbyteorder("=") not in TOKEN_DTYPES:
        raise ConfigError(
            f"{path}: tokens must be a 1-D array of uint16 or uint32, got "
            f"{tokens.dtype} {list(tokens.shape)}"
        )
    return tokens


def token_shards(path: Path) -> list[Path]:
    """`path` itself, or the regular files of the directory `path` in name order."""
    if not path.is_dir():
        return [path]
    root = path.resolve()
    shards = []
    for entry in sorted(path.iterdir()):
        if entry.name.startswith("."):
            continue
        if not entry.resolve().is_relative_to(root) or not entry.is_file():
            raise ConfigError(f"{entry}: not a token shard inside {path}")
        shards.append(entry)
        if len(shards) > MAX_SHARDS:
            raise ConfigError(f"{path}: more than {MAX_SHARDS} shards")
    if not shards:
        raise ConfigError(f"{path}: no token shards")
    return shards


def load_tokens(path: Path, seq_len: int, vocab_size: int | None) -> TokenData:
    """Token shards at `path`; every token must lie inside the vocabulary (by default
    the largest token + 1)."""
    shards = [open_token_shard(shard) for shard in token_shards(path)]
    count = sum(len(shard) for shard in shards)
    if count < seq_len + 1:
        raise ConfigError(
            f"{path}: {count} tokens, but one sample needs seq-len + 1 = {seq_len + 1}"
        )
    largest = max(int(shard.max()) for shard in shards if len(shard))
    if vocab_size is None:
        vocab_size = largest + 1
    elif largest >= vocab_size:
        raise ConfigError(f"{path}: token {largest} is outside the vocabulary of {vocab_size}")
    return TokenData(shards, seq_len, vocab_size)


def load_dataset(config: DataConfig, model: str):
    """The built-in dataset `config` names; synthetic data suits the model."""
    if config.dataset == "npz":
        return load_npz(config.path)
    tokenizer, vocab_size = None, config.vocab_size
    if config.tokenizer is not None:
        from trainer.pretrained import load_tokenizer

        tokenizer = load_tokenizer(config.tokenizer)
        vocab_size = vocab_size or tokenizer.get_vocab_size(with_added_tokens=True)
    if config.dataset == "tokens":
        data = load_tokens(config.path, config.seq_len, vocab_size)
    elif model in LANGUAGE_MODELS:
        data = synthetic_tokens(
            config.num_samples, config.seq_len, vocab_size or SYNTHETIC_VOCAB, config.seed
        )
    else:
        # A plug-in model on synthetic data gets the MLP's.
        shape = SYNTHETIC_SHAPES.get(model, SYNTHETIC_SHAPES["mlp"])
        return synthetic_classification(shape, config.num_samples, config.seed)
    if tokenizer is not None:
        first = data.batch(np.array([0]))[0][0][:32].tolist()
        log.info("sample 0 starts %r (--tokenizer %s)", tokenizer.decode(first), config.tokenizer)
    return data


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
