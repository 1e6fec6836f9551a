"""Pretrained artifacts read from local paths: safetensors weights and a tokenizer.

Both come from the image, the checkpoint volume or the dataset claim (`/data`), never
from a hub at run time. They are untrusted input: nothing is unpickled (safetensors
holds raw tensors behind a JSON header; a tokenizer is JSON), files named by an index
must stay inside its directory, and every read is bounded.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import torch
from torch import nn

from trainer.errors import ConfigError

log = logging.getLogger("trainer")

INDEX = "model.safetensors.index.json"
MAX_INDEX_BYTES = 16 << 20
# Published tokenizer.json files reach about 35 MB (Gemma 3's, 262k tokens).
MAX_TOKENIZER_BYTES = 64 << 20
# Every normalizer and pre-tokenizer pattern is compiled to a regular expression of
# some kilobytes: a file of nothing but patterns takes ~40 times its size in memory.
# Published tokenizers have a few dozen at most.
MAX_TOKENIZER_PATTERNS = 1024
MAX_WEIGHT_FILES = 4096
# Tensors some checkpoints carry that are recomputed, not learned.
RECOMPUTED = ("rotary_emb.inv_freq",)
TIED = ("lm_head.weight", "model.embed_tokens.weight")


def _inside(root: Path, name: str, source: Path) -> Path:
    """`root/name` when it is a regular file inside root (links resolved)."""
    if not name or "/" in name or "\\" in name or "\0" in name or name in (".", ".."):
        raise ConfigError(f"{source}: names {name[:80]!r}, not a file of {root}")
    path = root / name
    resolved = path.resolve()
    if not resolved.is_relative_to(root.resolve()):
        raise ConfigError(f"{source}: {name!r} leads outside {root}")
    if not resolved.is_file():
        raise ConfigError(f"{source}: {name!r} is not a file in {root}")
    return path


def weight_files(path: Path) -> list[Path]:
    """The safetensors files of `path`: the file itself, the files a directory's index
    names, or else every `*.safetensors` in the directory."""
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise ConfigError(f"--weights {path}: no such file or directory")
    index = path / INDEX
    if index.is_file():
        with index.open("rb") as handle:
            data = handle.read(MAX_INDEX_BYTES + 1)
        if len(data) > MAX_INDEX_BYTES:
            raise ConfigError(f"{index}: larger than {MAX_INDEX_BYTES} bytes")
        try:
            weight_map = json.loads(data)["weight_map"]
            names = sorted({str(name) for name in weight_map.values()})
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
            raise ConfigError(f"{index}: not an index with a weight_map object") from None
    else:
        names = sorted(p.name for p in path.iterdir() if p.name.endswith(".safetensors"))
    if not names:
        raise ConfigError(f"--weights {path}: no .safetensors file")
    if len(names) > MAX_WEIGHT_FILES:
        raise ConfigError(f"--weights {path}: more than {MAX_WEIGHT_FILES} weight files")
    return [_inside(path, name, index if index.is_file() else path) for name in names]


def load_weights(model: nn.Module, path: Path) -> None:
    """Copy every parameter of `model` from the safetensors at `path`, converting the
    dtype; names and shapes must match (a tied output head may be absent)."""
    from safetensors import SafetensorError, safe_open

    targets = model.state_dict()
    loaded: set[str] = set()
    extra: list[str] = []
    for file in weight_files(path):
        try:
            with safe_open(file, framework="pt") as handle:
                for name in handle.keys():  # noqa: SIM118 (safe_open is no mapping)
                    if name.endswith(RECOMPUTED):
                        continue
                    target = targets.get(name)
                    if target is None:
                        extra.append(name)
                        continue
                    shape = list(handle.get_slice(name).get_shape())
                    if shape != list(target.shape):
                        raise ConfigError(
                            f"{file}: {name} is {shape}, the model's is {list(target.shape)}: "
                            "size the model (--width, --heads, --kv-heads, --ffn-dim, "
                            "--vocab-size) as the weights were"
                        )
                    tensor = handle.get_tensor(name)
                    if not tensor.is_floating_point():
                        raise ConfigError(f"{file}: {name} is {tensor.dtype}, not floating point")
                    with torch.no_grad():
                        target.copy_(tensor)
                    loaded.add(name)
        except (SafetensorError, OSError) as error:
            raise ConfigError(f"{file}: not a readable safetensors file ({error})") from None
    if extra:
        raise ConfigError(
            f"--weights {path}: {len(extra)} tensor(s) the model lacks, such as "
            f"{sorted(extra)[0]}: set --depth and the sizes as the weights were"
        )
    missing = sorted(set(targets) - loaded)
    head, embedding = TIED
    if missing == [head] and embedding in loaded:
        # Checkpoints of tied models store the embedding alone; here the head starts as
        # its copy and trains on its own.
        with torch.no_grad():
            targets[head].copy_(targets[embedding])
        log.info("--weights %s has no %s: it starts as a copy of %s", path, head, embedding)
    elif missing:
        raise ConfigError(
            f"--weights {path}: {len(missing)} parameter(s) missing, such as {missing[0]}"
        )
    log.info("loaded %d tensors from --weights %s", len(loaded), path)


def load_tokenizer(path: Path):
    """A `tokenizers.Tokenizer` from tokenizer.json (or a directory holding one)."""
    from tokenizers import Tokenizer

    file = path / "tokenizer.json" if path.is_dir() else path
    try:
        with file.open("rb") as handle:
            data = handle.read(MAX_TOKENIZER_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(f"--tokenizer {file}: no such file") from None
    except OSError as error:
        raise ConfigError(f"--tokenizer {file}: cannot read ({error.strerror})") from None
    if len(data) > MAX_TOKENIZER_BYTES:
        raise ConfigError(f"--tokenizer {file}: larger than {MAX_TOKENIZER_BYTES} bytes")
    try:
        text = data.decode("utf-8")
        patterns = _count_patterns(text)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        reason = str(error) if not isinstance(error, RecursionError) else "nested too deeply"
        raise ConfigError(f"--tokenizer {file}: not a tokenizer.json ({reason})") from None
    if patterns > MAX_TOKENIZER_PATTERNS:
        raise ConfigError(
            f"--tokenizer {file}: {patterns} normalizer and pre-tokenizer patterns, more than "
            f"{MAX_TOKENIZER_PATTERNS}: each is compiled to a regular expression"
        )
    try:
        return Tokenizer.from_str(text)
    except BaseException as error:
        # The Rust library raises plain Exception, and a panic (a merge naming a token
        # the vocabulary lacks) as pyo3's PanicException, a BaseException.
        if isinstance(error, KeyboardInterrupt | SystemExit):
            raise
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ConfigError(f"--tokenizer {file}: not a tokenizer.json ({reason})") from None


def _count_patterns(text: str) -> int:
    """How many objects of the JSON document hold a "pattern" key (escapes decoded)."""
    count = 0

    def note(pairs: list[tuple[str, object]]) -> dict:
        nonlocal count
        count += any(key == "pattern" for key, _ in pairs)
        return dict(pairs)

    json.loads(text, object_pairs_hook=note)
    return count
