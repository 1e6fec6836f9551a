"""Datasets on small real files, the models they feed, and their FLOP counts."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.trainer.conftest import launch
from trainer.config import DataConfig, ModelConfig
from trainer.data import load_dataset, load_npz, load_tokens
from trainer.errors import ConfigError
from trainer.models import build_model, training_flops_per_sample


@pytest.fixture
def images(tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "images.npz"
    np.savez(
        path, x=rng.normal(size=(40, 1, 8, 8)).astype(np.float32), y=rng.integers(0, 3, size=40)
    )
    return path


@pytest.fixture
def token_file(tmp_path):
    path = tmp_path / "tokens.bin"
    (np.arange(1000) % 50).astype(np.uint16).tofile(path)
    return path


def test_npz_loader_reads_inputs_and_labels(images):
    data = load_npz(images)
    assert len(data) == 40
    assert data.spec.input_shape == (1, 8, 8)
    inputs, labels = data.batch(np.array([3, 1]))
    assert inputs.shape == (2, 1, 8, 8) and inputs.dtype == torch.float32
    assert labels.dtype == torch.int64
    assert torch.equal(inputs[1], data.x[1])


def test_token_file_is_windowed_with_shifted_targets(token_file):
    data = load_tokens(token_file, seq_len=10, vocab_size=None)
    assert len(data) == (1000 - 1) // 10
    assert data.spec.vocab_size == 50
    inputs, targets = data.batch(np.array([2]))
    assert inputs[0].tolist() == [(20 + i) % 50 for i in range(10)]
    assert targets[0].tolist() == [(21 + i) % 50 for i in range(10)]


def _npz_declaring(path, shape: tuple[int, ...]) -> None:
    """An .npz whose x.npy header declares `shape` (float64) over a few bytes of data."""
    import io
    import zipfile

    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f8", "fortran_order": False, "shape": shape}
    )
    labels = io.BytesIO()
    np.save(labels, np.zeros(shape[0] if shape[0] < 10 else 2, dtype=np.int64))
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("x.npy", header.getvalue() + bytes(64))
        archive.writestr("y.npy", labels.getvalue())


@pytest.mark.parametrize(
    ("write", "message"),
    [
        (lambda p: p.write_bytes(b"not a zip"), "not a readable .npz archive"),
        (lambda p: np.savez(p, inputs=np.zeros((2, 3))), "missing array(s) x, y"),
        (lambda p: np.savez(p, x=np.zeros((4, 3)), y=np.zeros(3, dtype=int)), "x must be (N, ...)"),
        (lambda p: np.savez(p, x=np.zeros((4, 3)), y=np.full(4, 0.5)), "integer class labels"),
        # 8 TB declared in under a kilobyte: refused before anything is allocated.
        (lambda p: _npz_declaring(p, (10**6, 10**6)), "GiB per rank once loaded"),
        # The header is honest but the data is short.
        (lambda p: _npz_declaring(p, (4, 3)), "not a readable .npz archive"),
        (
            lambda p: np.savez(p, x=np.array([{"a": 1}, None], dtype=object), y=np.zeros(2, int)),
            "holds Python objects",
        ),
    ],
)
def test_bad_npz_files_name_the_file_and_the_problem(tmp_path, write, message):
    path = tmp_path / "data.npz"
    write(path)
    with pytest.raises(ConfigError) as error:
        load_npz(path)
    assert str(path) in str(error.value) and message in str(error.value)


def test_bad_token_files_are_rejected(tmp_path):
    odd = tmp_path / "odd.bin"
    odd.write_bytes(b"\x01\x00\x02")
    with pytest.raises(ConfigError, match="not a whole number of uint16 tokens"):
        load_tokens(odd, 4, None)
    short = tmp_path / "short.bin"
    np.arange(4, dtype=np.uint16).tofile(short)
    with pytest.raises(ConfigError, match="4 tokens, but one sample needs"):
        load_tokens(short, 4, None)
    with pytest.raises(ConfigError, match="token 3 is outside the vocabulary of 2"):
        load_tokens(short, 2, 2)


def test_mlp_flops_are_six_per_multiply_accumulate():
    data = load_dataset(DataConfig(num_samples=8), "mlp")
    model = build_model(ModelConfig("mlp", width=16), data.spec)
    macs = 32 * 16 + 16 * 16 + 16 * 10
    assert training_flops_per_sample(model, data.batch(np.arange(2))[0]) == 6 * macs


def test_gpt_flops_include_attention_without_a_causal_discount():
    data = load_dataset(DataConfig(num_samples=8, seq_len=16), "gpt")
    model = build_model(ModelConfig("gpt", width=32, depth=2, heads=4), data.spec)
    sample = data.batch(np.arange(1))[0]
    dense = sum(
        6 * m.in_features * m.out_features * 16
        for m in model.modules()
        if isinstance(m, torch.nn.Linear)
    )
    # 12 x layers x (heads x head_dim) x seq_len per token, seq_len tokens per sample
    assert training_flops_per_sample(model, sample) == dense + 12 * 2 * 32 * 16 * 16


def test_cnn_trains_on_an_npz_file(images, tmp_path):
    run = launch(
        "--model",
        "cnn",
        "--dataset",
        "npz",
        "--data-path",
        str(images),
        "--batch-size",
        "4",
        "--max-steps",
        "6",
        "--log-interval",
        "3",
        "--checkpoint-dir",
        str(tmp_path / "ckpt"),
        "--checkpoint-interval",
        "3",
    )
    assert run.code == 0, run.stderr
    assert run.events("start")[0]["dataset_size"] == 40
    assert run.end["step"] == 6


def test_gpt_trains_on_a_memory_mapped_token_file(token_file):
    run = launch(
        "--model",
        "gpt",
        "--dataset",
        "tokens",
        "--data-path",
        str(token_file),
        "--seq-len",
        "16",
        "--batch-size",
        "4",
        "--max-steps",
        "6",
        "--log-interval",
        "3",
        "--peak-flops",
        "1e12",
    )
    assert run.code == 0, run.stderr
    step = run.events("step")[-1]
    assert step["tokens_per_second"] == pytest.approx(step["samples_per_second"] * 16)
    flops = run.events("start")[0]["flops_per_sample"]
    assert step["mfu"] == pytest.approx(flops * step["samples_per_second"] / (2 * 1e12))


def test_npy_shards_declare_uint16_or_uint32_and_windows_span_shards(tmp_path):
    shards = tmp_path / "shards"
    shards.mkdir()
    stream = np.arange(100_000, 100_050, dtype=np.uint32)
    np.save(shards / "00.npy", stream[:7])
    np.save(shards / "01.npy", stream[7:30])
    np.save(shards / "02.npy", stream[30:])
    (shards / ".ignored").write_bytes(b"hidden files are not shards")
    data = load_tokens(shards, seq_len=5, vocab_size=None)
    assert len(data) == (50 - 1) // 5
    assert data.spec.vocab_size == 100_050
    for i in range(len(data)):
        inputs, targets = data.batch(np.array([i]))
        assert inputs[0].tolist() == stream[i * 5 : i * 5 + 5].tolist()
        assert targets[0].tolist() == stream[i * 5 + 1 : i * 5 + 6].tolist()
    small = tmp_path / "small.npy"
    np.save(small, np.arange(20, dtype=np.uint16))
    assert load_tokens(small, 4, None).batch(np.array([1]))[0][0].tolist() == [4, 5, 6, 7]


@pytest.mark.parametrize(
    ("array", "message"),
    [
        (np.arange(10, dtype=np.float32), "1-D array of uint16 or uint32, got float32"),
        (np.zeros((3, 4), dtype=np.uint32), "got uint32 [3, 4]"),
        (np.array([{"a": 1}], dtype=object), "not a readable .npy file"),
    ],
)
def test_npy_shards_of_other_dtypes_or_objects_are_refused(tmp_path, array, message):
    path = tmp_path / "bad.npy"
    np.save(path, array, allow_pickle=True)
    with pytest.raises(ConfigError) as error:
        load_tokens(path, 2, None)
    assert message in str(error.value)


def test_a_shard_directory_keeps_to_itself(tmp_path):
    outside = tmp_path / "outside.bin"
    np.arange(20, dtype=np.uint16).tofile(outside)
    shards = tmp_path / "shards"
    shards.mkdir()
    (shards / "0.bin").symlink_to(outside)
    with pytest.raises(ConfigError, match="not a token shard inside"):
        load_tokens(shards, 2, None)
    (shards / "0.bin").unlink()
    with pytest.raises(ConfigError, match="no token shards"):
        load_tokens(shards, 2, None)
