"""The Llama-style decoder, its pretrained weights (safetensors) and tokenizer, read
from real files, and a two-rank run of it on uint32 token shards."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace

from tests.trainer.conftest import launch
from trainer.config import DataConfig, ModelConfig
from trainer.data import DataSpec, load_dataset
from trainer.errors import ConfigError
from trainer.models import Llama, apply_rope, build_model, rope_tables, training_flops_per_sample
from trainer.pretrained import (
    INDEX,
    MAX_TOKENIZER_BYTES,
    MAX_TOKENIZER_PATTERNS,
    load_tokenizer,
    load_weights,
)

SPEC = DataSpec("lm", (16,), vocab_size=50, seq_len=16)


def llama(seed: int = 0, **sizes) -> Llama:
    torch.manual_seed(seed)
    config = ModelConfig("llama", **{"width": 32, "depth": 2, "heads": 4, **sizes})
    return build_model(config, SPEC)


def tokens(seed: int = 1) -> torch.Tensor:
    return torch.randint(0, 50, (2, 16), generator=torch.Generator().manual_seed(seed))


def test_grouped_query_attention_shares_each_kv_head_among_consecutive_query_heads():
    grouped = llama(kv_heads=2)
    full = llama(seed=5, kv_heads=4)
    state = grouped.state_dict()
    head_dim = 32 // 4
    for name, value in list(state.items()):
        if name.endswith(("k_proj.weight", "v_proj.weight")):
            # Query heads 0, 1 read kv head 0; 2, 3 read kv head 1.
            heads = value.view(2, head_dim, 32)
            state[name] = heads.repeat_interleave(2, dim=0).reshape(4 * head_dim, 32)
    full.load_state_dict(state)
    x = tokens()
    assert torch.allclose(grouped(x), full(x), atol=1e-5)
    assert grouped.model.layers[0].self_attn.k_proj.weight.shape == (2 * head_dim, 32)


def test_rotary_positions_make_scores_depend_on_the_distance_only():
    cos, sin = rope_tables(12, 8, 10000.0, torch.device("cpu"))
    generator = torch.Generator().manual_seed(0)
    q, k = torch.randn(8, generator=generator), torch.randn(8, generator=generator)
    rows = torch.stack([q] * 12).view(1, 1, 12, 8)
    keys = torch.stack([k] * 12).view(1, 1, 12, 8)
    rq, rk = apply_rope(rows, cos, sin)[0, 0], apply_rope(keys, cos, sin)[0, 0]
    assert torch.allclose(rq[5] @ rk[3], rq[9] @ rk[7], atol=1e-5)
    assert not torch.allclose(rq[5] @ rk[3], rq[5] @ rk[4], atol=1e-3)
    assert torch.allclose(rq[0], q)  # position 0 is not rotated


def test_the_decoder_is_causal_and_normalises_with_rms():
    model = llama()
    x = tokens()
    changed = x.clone()
    changed[:, 10] = (changed[:, 10] + 1) % 50
    before, after = model(x), model(changed)
    assert torch.equal(before[:, :10], after[:, :10])
    assert not torch.allclose(before[:, 10:], after[:, 10:])
    norm = model.model.norm
    with torch.no_grad():
        norm.weight.fill_(2.0)
    v = torch.arange(32.0).view(1, 32)
    expected = 2 * v / torch.sqrt((v**2).mean() + norm.eps)
    assert torch.allclose(norm(v), expected)


def test_llama_flops_count_the_swiglu_and_attention():
    model = llama(kv_heads=2, ffn_dim=64)
    dense_macs = 2 * (32 * 32 + 2 * 32 * 16 + 32 * 32 + 3 * 32 * 64) + 32 * 50
    attention = 12 * 2 * 32 * 16 * 16
    assert training_flops_per_sample(model, tokens()) == 6 * dense_macs * 16 + attention


def test_size_errors_name_the_flags():
    with pytest.raises(ConfigError, match="--heads 4 is not divisible by --kv-heads 3"):
        llama(kv_heads=3)
    with pytest.raises(ConfigError, match="RoPE needs an even head size"):
        llama(width=12, heads=4)
    with pytest.raises(ConfigError, match="--model llama needs token data"):
        build_model(ModelConfig("llama"), DataSpec("classify", (4,), num_classes=2))


def test_safetensors_weights_load_in_the_model_dtype(tmp_path):
    source = llama(kv_heads=2)
    path = tmp_path / "model.safetensors"
    save_file({k: v.to(torch.bfloat16) for k, v in source.state_dict().items()}, path)
    target = llama(seed=9, kv_heads=2)
    load_weights(target, path)
    for name, value in target.state_dict().items():
        assert value.dtype == torch.float32
        assert torch.equal(value, source.state_dict()[name].to(torch.bfloat16).float()), name


def test_sharded_weights_follow_their_index_and_a_tied_head_copies_the_embedding(tmp_path):
    source = llama()
    state = {k: v for k, v in source.state_dict().items() if k != "lm_head.weight"}
    names = sorted(state)
    halves = {"a.safetensors": names[: len(names) // 2], "b.safetensors": names[len(names) // 2 :]}
    weight_map = {}
    for file, part in halves.items():
        save_file({k: state[k] for k in part}, tmp_path / file)
        weight_map.update(dict.fromkeys(part, file))
    (tmp_path / "ignored.safetensors").write_bytes(b"not listed in the index")
    (tmp_path / INDEX).write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    target = llama(seed=9)
    load_weights(target, tmp_path)
    loaded = target.state_dict()
    assert all(torch.equal(loaded[k], state[k]) for k in names)
    assert torch.equal(loaded["lm_head.weight"], state["model.embed_tokens.weight"])


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d, s: save_file({"x.weight": torch.zeros(2)}, d / "m.safetensors"), "lacks"),
        (
            lambda d, s: save_file({**s, "model.norm.weight": torch.ones(7)}, d / "m.safetensors"),
            "model.norm.weight is [7], the model's is [32]",
        ),
        (
            lambda d, s: save_file(
                {k: v for k, v in s.items() if "layers.1." not in k}, d / "m.safetensors"
            ),
            "parameter(s) missing",
        ),
        (lambda d, s: torch.save(s, d / "m.safetensors"), "not a readable safetensors file"),
        (
            lambda d, s: (d / INDEX).write_text(json.dumps({"weight_map": {"a": "../m.bin"}})),
            "names '../m.bin'",
        ),
        (lambda d, s: (d / INDEX).write_text("[1, 2]"), "not an index with a weight_map"),
        (lambda d, s: None, "no .safetensors file"),
    ],
)
def test_bad_weights_are_one_line_errors(tmp_path, make, message):
    make(tmp_path, dict(llama().state_dict()))
    with pytest.raises(ConfigError) as error:
        load_weights(llama(), tmp_path)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_an_index_cannot_lead_outside_its_directory_through_a_link(tmp_path):
    weights, outside = tmp_path / "weights", tmp_path / "elsewhere.safetensors"
    weights.mkdir()
    save_file(dict(llama().state_dict()), outside)
    (weights / "m.safetensors").symlink_to(outside)
    (weights / INDEX).write_text(json.dumps({"weight_map": {"x": "m.safetensors"}}))
    with pytest.raises(ConfigError, match="leads outside"):
        load_weights(llama(), weights)


def write_tokenizer(path, words: list[str]) -> None:
    vocab = {word: i for i, word in enumerate(["[UNK]", *words])}
    tokenizer = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = Whitespace()
    tokenizer.save(str(path))


def test_the_tokenizer_sets_the_vocabulary_and_checks_the_data(tmp_path, caplog):
    write_tokenizer(tmp_path / "tokenizer.json", [f"w{i}" for i in range(59)])
    assert load_tokenizer(tmp_path).get_vocab_size() == 60
    shard = tmp_path / "tokens.npy"
    np.save(shard, (np.arange(200) % 60).astype(np.uint32))
    config = DataConfig(dataset="tokens", path=shard, seq_len=8, tokenizer=tmp_path)
    with caplog.at_level(logging.INFO, logger="trainer"):
        assert load_dataset(config, "llama").spec.vocab_size == 60
    assert "sample 0 starts '[UNK] w0 w1 w2 w3 w4 w5 w6'" in caplog.text
    np.save(shard, (np.arange(200) % 61).astype(np.uint32))
    with pytest.raises(ConfigError, match="token 60 is outside the vocabulary of 60"):
        load_dataset(config, "llama")
    (tmp_path / "tokenizer.json").write_text('{"model": "not one"}')
    with pytest.raises(ConfigError, match=r"not a tokenizer\.json"):
        load_tokenizer(tmp_path)


def hostile_tokenizer(path, model: dict, normalizer: dict | None = None) -> None:
    document = {"version": "1.0", "added_tokens": [], "normalizer": normalizer, "model": model}
    # The key "pattern" spelled with a JSON escape, as a file may.
    path.write_text(json.dumps(document).replace('"escaped-pattern"', r'"patt\u0065rn"'))


def test_a_hostile_tokenizer_is_one_config_error_within_bounds(tmp_path):
    file = tmp_path / "tokenizer.json"
    # A merge of tokens the vocabulary lacks: the Rust library panics (pyo3's
    # PanicException, a BaseException), which once escaped as a traceback.
    merges = ["aaaaaaaaaaa bbbbbbbbbbb"]
    hostile_tokenizer(file, {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": merges})
    with pytest.raises(ConfigError, match=r"not a tokenizer\.json"):
        load_tokenizer(file)
    # Every pattern is compiled: thousands of them exhaust memory long before the size
    # cap (the key may be spelled with JSON escapes).
    replace = {"type": "Replace", "pattern": {"String": "x"}, "content": ""}
    escaped = {"type": "Replace", "escaped-pattern": {"String": "y"}, "content": ""}
    normalizers = [replace] * MAX_TOKENIZER_PATTERNS + [escaped]
    vocab = {"type": "WordLevel", "vocab": {"a": 0}, "unk_token": "a"}
    hostile_tokenizer(file, vocab, {"type": "Sequence", "normalizers": normalizers})
    with pytest.raises(ConfigError, match=f"{MAX_TOKENIZER_PATTERNS + 1} normalizer and pre-"):
        load_tokenizer(file)
    hostile_tokenizer(file, vocab, {"type": "Sequence", "normalizers": [replace] * 8})
    assert load_tokenizer(file).get_vocab_size() == 1
    with file.open("r+b") as handle:  # sparse: no disk used
        handle.truncate(MAX_TOKENIZER_BYTES + 1)
    with pytest.raises(ConfigError, match=f"larger than {MAX_TOKENIZER_BYTES} bytes"):
        load_tokenizer(file)


def test_llama_trains_on_two_ranks_from_pretrained_weights_on_uint32_shards(tmp_path):
    vocab = 70_000  # past uint16
    shards = tmp_path / "shards"
    shards.mkdir()
    rng = np.random.default_rng(0)
    for i in range(3):
        np.save(shards / f"{i:05d}.npy", rng.integers(0, vocab, 300, dtype=np.uint32))
    torch.manual_seed(3)
    config = ModelConfig("llama", width=16, depth=1, heads=4, kv_heads=2)
    source = build_model(config, DataSpec("lm", (16,), vocab_size=vocab, seq_len=16))
    save_file(dict(source.state_dict()), tmp_path / "model.safetensors")
    run = launch(
        *("--model", "llama", "--width", "16", "--depth", "1", "--heads", "4"),
        *("--kv-heads", "2", "--weights", str(tmp_path / "model.safetensors")),
        *("--dataset", "tokens", "--data-path", str(shards), "--vocab-size", str(vocab)),
        *("--seq-len", "16", "--batch-size", "2", "--max-steps", "4", "--log-interval", "2"),
    )
    assert run.code == 0, run.stderr
    assert f"loaded {len(source.state_dict())} tensors from --weights" in run.stderr
    start = run.events("start")[0]
    params = sum(p.numel() for p in source.parameters())
    assert start["params"] == params
    assert start["dataset_size"] == (900 - 1) // 16
    # Parameters, gradients and AdamW's two moments, fp32, a full replica under DDP.
    assert start["memory_estimate_bytes"] == 16 * params
    assert "training state: ddp at world size 2" in run.stderr
    assert run.end["step"] == 4
