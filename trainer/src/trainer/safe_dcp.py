"""Reading DCP checkpoints without running code from them.

DCP's `FileSystemReader` reads `.metadata` with `pickle.load`, and its default load
planner reads every non-tensor value (optimizer hyper-parameters, progress counters)
with `torch.load(weights_only=False)`: a planted file would run any code on every
rank that resumes, and in `trainer.inspect`. Here:

- `.metadata` goes through an unpickler that builds only DCP's own metadata classes
  (torch 2.13: `torch/distributed/checkpoint/metadata.py` and `_StorageInfo` from
  `filesystem.py`), dtypes, layouts, `torch.Size` and a pure path; any other global
  is refused before it is looked up. The result is then checked field by field:
  every storage entry names a file the manifest lists, inside that file, with no
  stream transform; tensors add up to no more bytes than the shards hold.
- non-tensor values go through torch's weights-only unpickler; tensors already do.
- rank-local metadata (`__R.metadata`, which the trainer never writes) is never read.
"""

from __future__ import annotations

import io
import math
import pickle
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

import torch
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint import load as dcp_load
from torch.distributed.checkpoint._traverse import set_element
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.metadata import (
    _MEM_FORMAT_ENCODING,
    BytesStorageMetadata,
    ChunkStorageMetadata,
    Metadata,
    MetadataIndex,
    StorageMeta,
    TensorProperties,
    TensorStorageMetadata,
)

DCP_METADATA = ".metadata"
MAX_METADATA_BYTES = 256 << 20

_METADATA_CLASSES = {
    ("torch.distributed.checkpoint.metadata", cls.__name__): cls
    for cls in (
        BytesStorageMetadata,
        ChunkStorageMetadata,
        Metadata,
        MetadataIndex,
        StorageMeta,
        TensorProperties,
        TensorStorageMetadata,
        _MEM_FORMAT_ENCODING,
    )
}
_METADATA_CLASSES[("torch.distributed.checkpoint.filesystem", "_StorageInfo")] = _StorageInfo
_METADATA_CLASSES[("torch", "Size")] = torch.Size
# StorageMeta.checkpoint_id: the path the writer was given. A pure path touches nothing.
_METADATA_CLASSES[("pathlib", "PosixPath")] = PurePosixPath
_METADATA_CLASSES[("pathlib", "PurePosixPath")] = PurePosixPath

_DTYPES = {name: value for name, value in vars(torch).items() if isinstance(value, torch.dtype)}
_LAYOUTS = {str(value): value for value in vars(torch).values() if isinstance(value, torch.layout)}


class UnsafeCheckpoint(ValueError):
    """A checkpoint file that is not what DCP writes: never loaded."""


def _layout(name: object) -> torch.layout:
    # Stands in for torch.serialization._get_layout, which pickles torch.layout.
    if not isinstance(name, str) or name not in _LAYOUTS:
        raise UnsafeCheckpoint(f"unknown tensor layout {name!r}")
    return _LAYOUTS[name]


class _MetadataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) in _METADATA_CLASSES:
            return _METADATA_CLASSES[(module, name)]
        if module == "torch" and name in _DTYPES:
            return _DTYPES[name]
        if (module, name) == ("torch.serialization", "_get_layout"):
            return _layout
        raise UnsafeCheckpoint(f"{DCP_METADATA} refers to {module}.{name}, which DCP never writes")

    def persistent_load(self, pid):
        raise UnsafeCheckpoint(f"{DCP_METADATA} holds a persistent reference")


def read_metadata(directory: Path, files: Mapping[str, int]) -> Metadata:
    """The checked DCP metadata of a checkpoint whose manifest lists `files` (name: size)."""
    path = directory / DCP_METADATA
    size = files.get(DCP_METADATA)
    if size is None or size > MAX_METADATA_BYTES:
        raise UnsafeCheckpoint(f"{DCP_METADATA} is missing or larger than {MAX_METADATA_BYTES}")
    with open(path, "rb") as handle:
        data = handle.read(size + 1)
    if len(data) != size:
        raise UnsafeCheckpoint(f"{DCP_METADATA} is not the size the manifest lists")
    try:
        metadata = _MetadataUnpickler(io.BytesIO(data)).load()
        _check_metadata(metadata, files)
    except UnsafeCheckpoint:
        raise
    except Exception as error:  # a malformed pickle, or objects missing their fields
        raise UnsafeCheckpoint(f"unreadable {DCP_METADATA}: {type(error).__name__}") from None
    return metadata


def _check_metadata(metadata: object, files: Mapping[str, int]) -> None:
    def fail(what: str):
        raise UnsafeCheckpoint(f"{DCP_METADATA}: {what}")

    if not isinstance(metadata, Metadata):
        fail(f"holds a {type(metadata).__name__}, not DCP metadata")
    entries = metadata.state_dict_metadata
    if not isinstance(entries, dict):
        fail("state_dict_metadata is not a mapping")
    tensor_bytes = 0
    for key, entry in entries.items():
        if not isinstance(key, str):
            fail("a state key is not a string")
        if isinstance(entry, TensorStorageMetadata):
            tensor_bytes += _tensor_bytes(key, entry, fail)
        elif not isinstance(entry, BytesStorageMetadata):
            fail(f"{key}: unknown storage type {type(entry).__name__}")
    storage = metadata.storage_data
    if not isinstance(storage, dict):
        fail("storage_data is not a mapping")
    for index, info in storage.items():
        if not isinstance(index, MetadataIndex) or not isinstance(index.fqn, str):
            fail("a storage index is malformed")
        if index.fqn not in entries:
            fail(f"storage for {index.fqn!r}, which the state does not have")
        if not isinstance(info, _StorageInfo):
            fail(f"{index.fqn}: storage info is a {type(info).__name__}")
        if info.transform_descriptors:
            fail(f"{index.fqn}: stream transforms {info.transform_descriptors!r}")
        name = info.relative_path
        if not isinstance(name, str) or name == DCP_METADATA or name not in files:
            fail(f"{index.fqn}: data in {name!r}, a file the manifest does not list")
        offset, length = info.offset, info.length
        if not (_is_count(offset) and _is_count(length)):
            fail(f"{index.fqn}: offset and length must be integers >= 0")
        if offset + length > files[name]:
            fail(f"{index.fqn}: bytes {offset}-{offset + length} lie past the end of its file")
    shard_bytes = sum(size for name, size in files.items() if name != DCP_METADATA)
    if tensor_bytes > shard_bytes:
        fail(f"tensors of {tensor_bytes} bytes cannot fit in shards of {shard_bytes}")
    mappings = metadata.planner_data
    if mappings is not None and not (
        isinstance(mappings, dict)
        and all(
            isinstance(path, tuple) and path and all(isinstance(part, str | int) for part in path)
            for path in mappings.values()
        )
    ):
        fail("planner_data is not a mapping of key paths")


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _tensor_bytes(key: str, entry: TensorStorageMetadata, fail) -> int:
    properties = entry.properties
    if not isinstance(properties, TensorProperties) or not isinstance(
        properties.dtype, torch.dtype
    ):
        fail(f"{key}: malformed tensor properties")
    if not isinstance(entry.chunks, list):
        fail(f"{key}: chunks is not a list")
    shapes = [entry.size]
    for chunk in entry.chunks:
        if not isinstance(chunk, ChunkStorageMetadata):
            fail(f"{key}: a chunk is a {type(chunk).__name__}")
        shapes += [chunk.offsets, chunk.sizes]
    for shape in shapes:
        if not isinstance(shape, torch.Size) or not all(_is_count(n) for n in shape):
            fail(f"{key}: a shape is not a torch.Size of counts")
    return math.prod(entry.size) * properties.dtype.itemsize


class SafeReader(FileSystemReader):
    """FileSystemReader that reads `.metadata` as `read_metadata` above, and nothing else."""

    def __init__(self, directory: Path, files: Mapping[str, int]):
        super().__init__(directory)
        self._directory = directory
        self._files = dict(files)

    # No **kwargs: DCP then never falls back to rank-local `__R.metadata` files.
    def read_metadata(self) -> Metadata:
        metadata = read_metadata(self._directory, self._files)
        metadata.storage_meta = StorageMeta(load_id=self.load_id)
        return metadata


class WeightsOnlyLoadPlanner(DefaultLoadPlanner):
    """DefaultLoadPlanner whose non-tensor values go through the weights-only unpickler."""

    def load_bytes(self, read_item, value: io.BytesIO) -> None:
        loaded = torch.load(value, weights_only=True)
        fqn = read_item.dest_index.fqn
        if self.flatten_state_dict:
            set_element(self.original_state_dict, self.mappings[fqn], loaded)
        else:
            self.state_dict[fqn] = loaded


def load(state: dict, directory: Path, files: Mapping[str, int], process_group) -> None:
    """`dcp.load` of `state` in place, collectively over `process_group`."""
    dcp_load(
        state,
        storage_reader=SafeReader(directory, files),
        planner=WeightsOnlyLoadPlanner(),
        process_group=process_group,
    )


def load_offline(directory: Path, files: Mapping[str, int]) -> dict:
    """The whole checkpoint as nested dicts, in this process alone (no process group)."""
    metadata = read_metadata(directory, files)
    flat: dict = {}
    for key, entry in metadata.state_dict_metadata.items():
        if isinstance(entry, TensorStorageMetadata):
            flat[key] = torch.empty(entry.size, dtype=entry.properties.dtype)
        else:
            flat[key] = None
    dcp_load(
        flat,
        storage_reader=SafeReader(directory, files),
        planner=WeightsOnlyLoadPlanner(),
        no_dist=True,
    )
    mappings = metadata.planner_data or {}
    nested: dict = {}
    for key, value in flat.items():
        *parents, leaf = mappings.get(key, (key,))
        node = nested
        for part in parents:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise UnsafeCheckpoint(f"{DCP_METADATA}: key paths overlap at {key!r}")
            node = child
        node[leaf] = value
    return nested
