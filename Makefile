# The README's two commands are the contract: `make validate` and `make test`.
# Both build .venv on first use (a no-op afterwards) and need only Python 3.11
# and kubectl (or kustomize) on PATH.

SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip install --quiet --disable-pip-version-check
# Two stamps: `make validate` needs only the toolkit (seconds on a fresh clone);
# everything else also needs the development tools, the cluster client and the
# trainer with torch.
TOOLKIT := $(VENV)/.toolkit-stamp
DEV := $(VENV)/.dev-stamp
CRDS ?= ../shared/crds
MIRROR_CRDS := base/operators/mirror/kubeflow-training-operator-v1.9.0/manifests/base/crds
# CRDs vendored here, pinned by commit (crds/<project>-<version>/SOURCE.md).
VENDORED_CRDS := crds
PROMETHEUS_RULE_CRD := base/operators/mirror/prometheus-operator-v0.93.0/example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml

.PHONY: install validate test test-repeat lint format bench schemas doctor-catalog train-local clean

# The pip a venv starts with (23.2 with Python 3.11) takes about 20 CPU-s to resolve
# the development tools, checking every file of every release listed for torch,
# numpy, ruff and the rest; pip 26 resolves them in half that. Installed first.
$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) pip==26.3

$(TOOLKIT): pyproject.toml setup.py | $(BIN)/python
	$(PIP) -e .
	@touch $@

# pip compiles what it installs one file at a time; torch alone is thousands of
# files, most never imported. Installed without compiling; what the trainer, the
# toolkit and the test runner import is compiled by importing it, two processes at
# once (about 7 s, where compiling the whole environment took 17 s); the rest by the
# first process that imports it. Where PYTHONDONTWRITEBYTECODE is set, as in many CI
# sandboxes, nothing would be written and each of the suite's hundreds of processes
# would compile torch from source: the targets below that start Python processes
# write bytecode whatever the environment says.
WRITE_BYTECODE := env -u PYTHONDONTWRITEBYTECODE
IMPORTED_BY_THE_TRAINER := import torch.distributed.run, torch.distributed.checkpoint, \
	torch.distributed.fsdp, trainer.cli, trainer.train, trainer.launch, trainer.inspect
IMPORTED_BY_THE_TOOLS := import trainops.cli, pytest, xdist, hypothesis, ruamel.yaml
$(DEV): $(TOOLKIT) trainer/pyproject.toml
	$(PIP) --no-compile -e '.[dev]' -e ./trainer
	$(WRITE_BYTECODE) $(BIN)/python -c '$(IMPORTED_BY_THE_TOOLS)' & tools=$$!; \
	$(WRITE_BYTECODE) $(BIN)/python -c '$(IMPORTED_BY_THE_TRAINER)' && wait $$tools
	@touch $@

install: $(DEV)

validate: $(TOOLKIT)
	$(BIN)/trainops validate overlays argocd

lint: $(DEV)
	$(BIN)/ruff check tools trainer/src tests policies
	$(BIN)/ruff format --check tools trainer/src tests policies

format: $(DEV)
	$(BIN)/ruff format tools trainer/src tests policies
	$(BIN)/ruff check --fix tools trainer/src tests policies

# Three workers (pytest-xdist), a test file each at a time, on a 2-core CI machine:
# the trainer's tests wait on process start-up, rendezvous and teardown, and a third
# worker fills those gaps. Files go out in collection order, the trainer's first
# (tests/conftest.py). Tests that start servers draw ports from disjoint sets.
WORKERS ?= 3
test: validate lint
	$(WRITE_BYTECODE) $(BIN)/pytest -n $(WORKERS) --dist loadfile --no-loadscope-reorder --durations=25

# A race shows up as a rare failure: run the tests that start processes many times
# (pytest-repeat). scripts/test-under-load.sh runs tests while every core is busy.
COUNT ?= 30
TESTS ?= tests/trainer/test_failures.py
test-repeat: $(DEV)
	$(WRITE_BYTECODE) $(BIN)/pytest --count=$(COUNT) -x -q $(TESTS)

bench: $(DEV)
	$(WRITE_BYTECODE) $(BIN)/python -m tests.bench

# Two CPU ranks with gloo: train, get preempted (SIGTERM at step 35, emergency
# checkpoint, exit 143), resume to step 60, then describe the checkpoints.
TRAIN_LOCAL := .train-local
TRAIN_ARGS := --standalone --nproc-per-node=2 --module trainer --model mlp --max-steps 60 \
	--checkpoint-dir $(TRAIN_LOCAL)/checkpoints --checkpoint-interval 20 --log-interval 10 \
	--metrics-file $(TRAIN_LOCAL)/metrics.jsonl
train-local: $(DEV)
	rm -rf $(TRAIN_LOCAL)
	OMP_NUM_THREADS=1 $(BIN)/trainer-launch $(TRAIN_ARGS) --inject-fault sigterm@35 || test $$? -eq 143
	OMP_NUM_THREADS=1 $(BIN)/trainer-launch $(TRAIN_ARGS)
	$(BIN)/python -m trainer.inspect $(TRAIN_LOCAL)/checkpoints
	@echo "metrics: $(TRAIN_LOCAL)/metrics.jsonl, checkpoints: $(TRAIN_LOCAL)/checkpoints"

schemas: $(DEV)
	$(BIN)/trainops schemas import $(CRDS)/*.yaml $(MIRROR_CRDS)/*.yaml $(VENDORED_CRDS)/*/*.yaml $(PROMETHEUS_RULE_CRD)

# The doctor's message catalog from the sources: NCCL=<clone of NVIDIA/nccl with tags>,
# OFI=<clone of aws/aws-ofi-nccl>; new formats come out `unclassified` for a person to read.
doctor-catalog: $(DEV)
	@test -n "$(NCCL)" -a -n "$(OFI)" || { echo "usage: make doctor-catalog NCCL=path OFI=path"; exit 2; }
	$(BIN)/python scripts/extract-doctor-messages.py $(NCCL) --component nccl
	$(BIN)/python scripts/extract-doctor-messages.py $(OFI) --component aws-ofi-nccl
	$(BIN)/python -m trainops.docs

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache $(TRAIN_LOCAL)
