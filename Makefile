# Quick start:  make demo   (install, then train with the defaults)
#               make test   (install, then run the test suite)
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: install demo test bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# Pinned: on this machine torch==2.13.0 is a CPU wheel on disk; a plain `torch` pulls a CUDA build.
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

demo: install
	$(BIN)/dupq train --out runs/model --overwrite

test: install
	$(BIN)/python -m pytest -q

bench: install
	$(BIN)/python bench/train_speed.py

clean:
	rm -rf $(VENV) runs build *.egg-info src/*.egg-info
