# Quick start:  make demo   (install; a small help desk built and searched with the bundled model, its verdict refitted
#                            on a moderator's decisions and searched again, pairs judged; the seed recipe trained
#                            briefly and asked the seeds' two questions: about a minute and a half on a quiet VM, the install included)
#               make test   (install, then run the test suite)
# make labelled: the labelled recipe without its teacher, evaluated, with its report (six epochs: 10-15 minutes)
# make bundled: the bundled model itself (needs the .[distil] extra: teacher vectors first, then the same training with them,
# then its static branch: the teacher's vector of each word)
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: install demo labelled bundled test bench figures measurements clean

install: $(STAMP)

$(STAMP): pyproject.toml lab/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# Pinned: on this machine torch==2.13.0 is a CPU wheel on disk; a plain `torch` pulls a CUDA build.
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	# The lab (lab/): the benchmarks and experiments behind the docs, and the figures they render; it imports dupq.
	$(BIN)/python -m pip install --quiet --no-deps -e ./lab
	touch $(STAMP)

# The recipes are presets shipped in the package (src/dupq/training/presets/*.toml; `dupq train --preset NAME --show`
# prints one): `labelled` is make labelled's, `bundled` the bundled model's (labelled + the teacher), `seed` is `dupq train`.
demo: install
	@echo "== a help desk of 60 old questions (examples/desk), stored with the bundled model"
	rm -rf runs/desk
	$(BIN)/dupq index build examples/desk/questions.tsv --key-column key --out runs/desk
	@echo "== six new questions, each with its three likeliest old ones"
	$(BIN)/dupq search runs/desk --queries examples/desk/new.txt -k 3
	@echo "== 75 tickets wait for review; a moderator decides each one's top three hits (examples/desk/moderate.py)"
	$(BIN)/python examples/desk/moderate.py runs/desk examples/desk/tickets.tsv
	@echo "== the desk's verdict refitted on those decisions (held-out decisions judged before and after)"
	$(BIN)/dupq index calibrate runs/desk
	@echo "== the six new questions again, judged by the desk's own fit (the tickets are stored questions now too)"
	$(BIN)/dupq search runs/desk --queries examples/desk/new.txt -k 3
	@echo "== pairs judged: a question against itself, a rewording, a different question"
	$(BIN)/dupq predict "Can I use the app offline?" "Can I use the app offline?"
	$(BIN)/dupq predict "Does the app still work when I have no internet?" "Can I use the app offline without an internet connection?"
	$(BIN)/dupq predict "How do I print an invoice?" "How do I delete a draft invoice?"
	@echo "== to review new questions on its page:  $(BIN)/dupq serve runs/desk   (then open http://127.0.0.1:8000/)"
	@echo "== the seeds' recipe (duplicate pairs only, triplet loss), trained briefly: one epoch over 17,920 Quora pairs"
	$(BIN)/dupq train --train-pool 60000 --epochs 1 --threads 0 --out runs/seed --overwrite --no-progress
	@echo "== the seeds' two questions, judged by that model"
	$(BIN)/dupq predict "When will I see you?" "When can I see you again?" --model runs/seed
	$(BIN)/dupq predict "Do they enjoy eating the dessert?" "Do they like hiking in the desert?" --model runs/seed

labelled: install
	$(BIN)/dupq train --preset labelled --out runs/model --overwrite --no-progress
	$(BIN)/dupq evaluate runs/model
	$(BIN)/dupq report runs/model --out runs/report --overwrite
	@echo "the seeds' first example, judged by the model just trained (Quora's labels only):"
	$(BIN)/dupq predict "When will I see you?" "When can I see you again?" --model runs/model
	@echo "and by the bundled model (the same recipe, distilled from all-MiniLM-L6-v2):"
	$(BIN)/dupq predict "When will I see you?" "When can I see you again?"
	@echo "report: runs/report/index.html"

bundled: install
	$(BIN)/python -m pip install --quiet -e ".[distil]"
	$(BIN)/dupq distil teach --out runs/teacher --threads 0
	$(BIN)/dupq train --preset bundled --out runs/bundled --overwrite --no-progress
	$(BIN)/dupq compact runs/bundled --out runs/bundled-half --half --overwrite
	$(BIN)/dupq calibrate runs/bundled-half
	$(BIN)/dupq distil branch runs/bundled-half --preset branch --out runs/bundled-branch --overwrite
	$(BIN)/dupq evaluate runs/bundled-branch

test: install
	$(BIN)/python -m pytest -q

# Every figure of README.md and docs/**/*.md (`dupq-lab figures` with no file: all of them): tables and the
# training/timing blocks from their inputs in docs/results/, the quick console blocks (the bundled model's
# answers) by running their commands. A minute or two.
figures: install
	$(BIN)/dupq-lab figures

# Run the training and timing commands of the `saved` blocks again (hours; needs the Quora file), rewrite their
# docs/results/*.json, then the figures; `dupq-lab figures --measure --only TEXT` reruns one.
measurements: install
	$(BIN)/dupq-lab figures --measure

bench: install
	$(BIN)/dupq-lab train-speed

clean:
	rm -rf $(VENV) runs build *.egg-info src/*.egg-info
