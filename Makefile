# The README's two commands are the contract: `make validate` and `make test`.
# Both build .venv on first use (a no-op afterwards) and need only Python 3.11
# and kubectl (or kustomize) on PATH.

SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
CRDS ?= ../shared/crds
MIRROR_CRDS := base/operators/mirror/kubeflow-training-operator-v1.9.0/manifests/base/crds

.PHONY: install validate test test-repeat lint format bench schemas train-local clean

$(STAMP): pyproject.toml trainer/pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]' -e ./trainer
	@touch $@

install: $(STAMP)

validate: $(STAMP)
	$(BIN)/trainops validate overlays argocd

lint: $(STAMP)
	$(BIN)/ruff check tools trainer/src tests policies
	$(BIN)/ruff format --check tools trainer/src tests policies

format: $(STAMP)
	$(BIN)/ruff format tools trainer/src tests policies
	$(BIN)/ruff check --fix tools trainer/src tests policies

test: validate lint
	$(BIN)/pytest

# A race shows up as a rare failure: run the tests that start processes many times
# (pytest-repeat). scripts/test-under-load.sh runs tests while every core is busy.
COUNT ?= 30
TESTS ?= tests/trainer/test_failures.py
test-repeat: $(STAMP)
	$(BIN)/pytest --count=$(COUNT) -x -q $(TESTS)

bench: $(STAMP)
	$(BIN)/python -m tests.bench

# Two CPU ranks with gloo: train, get preempted (SIGTERM at step 35, emergency
# checkpoint, exit 143), resume to step 60, then describe the checkpoints.
TRAIN_LOCAL := .train-local
TRAIN_ARGS := --standalone --nproc-per-node=2 --module trainer --model mlp --max-steps 60 \
	--checkpoint-dir $(TRAIN_LOCAL)/checkpoints --checkpoint-interval 20 --log-interval 10 \
	--metrics-file $(TRAIN_LOCAL)/metrics.jsonl
train-local: $(STAMP)
	rm -rf $(TRAIN_LOCAL)
	OMP_NUM_THREADS=1 $(BIN)/trainer-launch $(TRAIN_ARGS) --inject-fault sigterm@35 || test $$? -eq 143
	OMP_NUM_THREADS=1 $(BIN)/trainer-launch $(TRAIN_ARGS)
	$(BIN)/python -m trainer.inspect $(TRAIN_LOCAL)/checkpoints
	@echo "metrics: $(TRAIN_LOCAL)/metrics.jsonl, checkpoints: $(TRAIN_LOCAL)/checkpoints"

schemas: $(STAMP)
	$(BIN)/trainops schemas import $(CRDS)/*.yaml $(MIRROR_CRDS)/*.yaml

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache $(TRAIN_LOCAL)
