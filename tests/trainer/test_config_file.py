"""The config file: keys are the long flags; flags and the environment win over it;
--print-config prints what a run resolved as a file the trainer reads back."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from tests.trainer.test_cli import run_module
from trainer.cli import parse_args
from trainer.config import Fault
from trainer.errors import ConfigError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "run.toml"
    path.write_text(text)
    return path


def test_the_file_sets_values_and_flags_and_environment_win(tmp_path):
    path = write(
        tmp_path,
        'max-steps = 40\nmodel = "llama"\nkv-heads = 2\nlr = 3e-4\nrope-theta = 500000\n'
        'checkpoint-dir = "/from/file"\nno-resume = true\ninject-fault = ["nan@3"]\n'
        "metrics-port = 9000\n",
    )
    config = parse_args(["--config", str(path), "--lr", "1e-3"], {})
    assert config.max_steps == 40 and config.model.name == "llama"
    assert config.model.kv_heads == 2 and config.model.rope_theta == 500000.0
    assert config.optim.lr == 1e-3  # the flag
    assert config.checkpoint.directory == Path("/from/file")
    assert not config.checkpoint.resume
    assert config.faults == (Fault("nan", 3),)
    env = {"TRAINER_CHECKPOINT_DIR": "/checkpoints/job", "TRAINER_METRICS_PORT": "9400"}
    config = parse_args(["--config", str(path)], env)
    assert config.checkpoint.directory == Path("/checkpoints/job")  # the template's volume
    assert config.metrics.port == 9400


def test_print_config_reads_back_to_the_same_config(tmp_path):
    args = ["--max-steps", "7", "--model", "gpt", "--inject-fault", "sigkill@3:rank=1"]
    printed = run_module(*args, "--print-config")
    assert printed.returncode == 0, printed.stderr
    table = tomllib.loads(printed.stdout)
    assert table["max-steps"] == 7 and table["inject-fault"] == ["sigkill@3:rank=1"]
    assert "print-config" not in table and "config" not in table
    path = write(tmp_path, printed.stdout)
    assert parse_args(["--config", str(path)], {}) == parse_args(args, {})
    again = run_module("--config", str(path), "--print-config")
    assert again.stdout == printed.stdout


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("max-steps = 5\nlearning-rate = 0.1\n", "unknown key 'learning-rate'"),
        ("max-steps = 5\n[model]\nname = 'gpt'\n", "[model] is a table; the file is flat"),
        ('max-steps = "5"\n', "key 'max-steps': expected an integer, got a string"),
        ("max-steps = 5\nlr = true\n", "key 'lr': expected a number, got a boolean"),
        ("max-steps = 0\n", "key 'max-steps': expected an integer >= 1, got '0'"),
        ("max-steps = 5\nno-resume = 1\n", "key 'no-resume': expected true or false"),
        ('max-steps = 5\ndevice = "tpu"\n', "key 'device': expected one of auto, cpu, cuda"),
        ('max-steps = 5\ninject-fault = "nan@3"\n', "expected a list of strings"),
        ("max-steps = 5\nlr = 0.1\nlr = 0.2\n", "not valid TOML: Cannot overwrite a value"),
        ("max-steps = 5\nlr =\n", "(at line 2"),
        ("lr = 0.1\n", "--max-steps is required"),
    ],
)
def test_bad_files_name_the_file_and_key(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as error:
        parse_args(["--config", str(path)], {})
    assert message in str(error.value)
    if "required" not in message:
        assert str(error.value).startswith(f"{path}: ")


def test_a_bad_file_is_one_line_and_exit_2(tmp_path):
    path = write(tmp_path, "max-steps = 5\nbatch = 3\n")
    done = run_module("--config", str(path))
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"trainer: error: {path}: unknown key 'batch'; keys are the long flags"
    )
    missing = run_module("--config", str(tmp_path / "absent.toml"))
    assert missing.returncode == 2
    assert missing.stderr.strip() == f"trainer: error: {tmp_path / 'absent.toml'}: no such file"
