"""Command line, environment defaults, exit codes and one-line errors."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.trainer.conftest import RUN_LIMIT, launch, trainer_env
from trainer.cli import parse_args, parse_fault
from trainer.config import Fault
from trainer.errors import ConfigError


def run_module(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "trainer", *args],
        capture_output=True,
        text=True,
        env=env or trainer_env(),
        timeout=RUN_LIMIT,
        check=False,
    )


def test_environment_sets_the_template_defaults_and_flags_win():
    env = {
        "TRAINER_CHECKPOINT_DIR": "/checkpoints/job",
        "TRAINER_METRICS_PORT": "9400",
        "TRAINER_EXPECT_TRANSPORT": "ib",
        "TRAINER_EXPECT_GDR": "1",
    }
    config = parse_args(["--max-steps", "5"], env)
    assert str(config.checkpoint.directory) == "/checkpoints/job"
    assert config.metrics.port == 9400
    assert config.transport.expect == "ib" and config.transport.expect_gdr
    config = parse_args(
        ["--max-steps", "5", "--metrics-port", "0", "--expect-transport", "socket"],
        {"TRAINER_METRICS_PORT": "9400"},
    )
    assert config.metrics.port == 0 and config.transport.expect == "socket"


def test_bad_environment_values_are_named():
    with pytest.raises(ConfigError, match="TRAINER_EXPECT_TRANSPORT='roce'"):
        parse_args(["--max-steps", "5"], {"TRAINER_EXPECT_TRANSPORT": "roce"})
    with pytest.raises(ConfigError, match="TRAINER_METRICS_PORT='x'"):
        parse_args(["--max-steps", "5"], {"TRAINER_METRICS_PORT": "x"})


def test_fault_specs():
    assert parse_fault("sigkill@12:rank=1") == Fault("sigkill", 12, 1)
    assert parse_fault("nan@3") == Fault("nan", 3, None)
    assert parse_fault("watchdog@4:rank=0") == Fault("watchdog", 4, 0)
    for bad in ("oom@3", "nan", "nan@0", "hang@2:node=1"):
        with pytest.raises(Exception, match=r"fault|integer"):
            parse_fault(bad)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--max-steps", "0"], "argument --max-steps: expected an integer >= 1, got '0'"),
        (["--max-steps", "5", "--dataset", "npz"], "--dataset npz needs --data-path"),
        (
            ["--max-steps", "5", "--model", "gpt", "--dataset", "npz", "--data-path", "x"],
            "--model gpt reads token data",
        ),
        (
            ["--max-steps", "5", "--dataset", "npz", "--data-path", "/nonexistent.npz"],
            "/nonexistent.npz: no such file",
        ),
        (["--max-steps", "5", "--inject-fault", "oom@3"], "bad fault 'oom@3'"),
    ],
)
def test_bad_input_is_one_line_exit_2_without_traceback(args, message):
    done = run_module(*args)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [done.stderr.strip()]
    assert message in done.stderr and "Traceback" not in done.stderr
    assert done.stdout == ""


def test_help_lists_exit_codes():
    done = run_module("--help")
    assert done.returncode == 0
    assert "143  stopped by SIGTERM (the trainer saves a checkpoint first): retried" in done.stdout
    assert "  1  unexpected error (a bug): not retried" in done.stdout


def test_a_single_process_without_a_launcher_trains():
    done = run_module("--max-steps", "3", "--log-interval", "3")
    assert done.returncode == 0, done.stderr
    assert '"world_size": 1' in done.stdout


def test_launcher_passes_a_configuration_error_on_as_permanent():
    config_error = launch(
        "--max-steps",
        "3",
        "--dataset",
        "tokens",
        "--model",
        "gpt",
        "--data-path",
        "/nonexistent.bin",
    )
    assert config_error.code == 2  # permanent: the ExitCode policy does not retry
    # Every rank finds it and says so; the launcher passes it on once, whichever rank
    # exits first and has torchrun stop the other.
    assert config_error.stderr.count("/nonexistent.bin: no such file") == 1
