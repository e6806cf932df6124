# Quick start:  make demo   (install; train the bundled model's configuration, evaluate it, write the report)
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

# The configuration of the bundled model (docs/RESULTS.md); `dupq train` alone is the seed recipe.
# One thread: the bundled weights come from this exact command, bit for bit (more threads sum in another order).
BEST := --recipe labelled --lowercase --oov-buckets 4096 --min-count 2 --dropout 0.2 --lr 0.005 --reduction mean \
	--symmetric --mask-false-negatives --hard-negatives --head mlp --epochs 6 --lr-schedule cosine --threads 1

demo: install
	$(BIN)/dupq train $(BEST) --out runs/model --overwrite --no-progress
	$(BIN)/dupq evaluate runs/model
	$(BIN)/dupq report runs/model --out runs/report
	$(BIN)/dupq predict "When will I see you?" "When can I see you again?" --model runs/model
	@echo "report: runs/report/index.html"

test: install
	$(BIN)/python -m pytest -q

bench: install
	$(BIN)/python bench/train_speed.py

clean:
	rm -rf $(VENV) runs build *.egg-info src/*.egg-info
