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

.PHONY: install validate test lint format bench schemas clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@touch $@

install: $(STAMP)

validate: $(STAMP)
	$(BIN)/trainops validate overlays argocd

lint: $(STAMP)
	$(BIN)/ruff check tools tests policies
	$(BIN)/ruff format --check tools tests policies

format: $(STAMP)
	$(BIN)/ruff format tools tests policies
	$(BIN)/ruff check --fix tools tests policies

test: validate lint
	$(BIN)/pytest

bench: $(STAMP)
	$(BIN)/python -m tests.bench

schemas: $(STAMP)
	$(BIN)/trainops schemas import $(CRDS)/*.yaml $(MIRROR_CRDS)/*.yaml

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
