"""A named model's judge (threshold and probability map) fitted on Quora dev pairs, written into the package.

Loads the named model (``minilm`` or ``mpnet``, as every MODEL option does: from its packages, run as its
shipped config says, int8 included), fits its threshold and beta calibration on ``--pairs`` dev pairs drawn
at random from the Quora split (``dupq.evaluation.evaluate.calibrate``, as ``dupq train`` and ``dupq distil
teacher-model`` do; never test pairs) and writes ``src/dupq/modeling/named/NAME.json``: the model folder's
``config.json`` and this command. Prints the calibration record as one JSON line. Needs the ``quality`` extra.

``--search`` also fits how the model judges search hits, its ``suggest`` and ``duplicate`` tiers
(:func:`dupq.evaluation.search_calibration.calibrate_search`, as ``dupq calibrate MODEL --search`` does: on
the help-desk yardstick's dev searches, never its test half), with ``--candidates K`` the number of the fast
model's best it orders as a reranker (``dupq-lab rerank-k``'s choice on the dev half), so a collection that the named model
reranks judges its hits as a help desk's, out of the box. The model's vectors of the yardstick's
questions encode through the lab's cache by text (``--work``/vectors), each once across runs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import numpy as np
import typer

from dupq.core.files import write_json
from dupq.data.pairs import read_pairs, split_pairs
from dupq.evaluation.evaluate import calibrate
from dupq.evaluation.search_calibration import calibrate_search
from dupq.modeling.model import Model
from dupq.modeling.pretrained import NAMED_JSON, NAMES
from dupq_lab.options import DATA, REPO, RUNS, Data, Seed, report
from dupq_lab.vector_cache import cached


def main(
    name: Annotated[str, typer.Argument(help=f"The named model: {', '.join(NAMES)}.")],
    pairs: Annotated[int, typer.Option(min=10, help="Dev pairs drawn at random to fit on.")] = 1000,
    seed: Seed = 0,
    search: Annotated[
        bool, typer.Option(help="Fit the search calibration (tiers) on the help-desk dev half too.")
    ] = False,
    candidates: Annotated[
        Optional[int],
        typer.Option(min=1, help="With --search: how many candidates it orders as a reranker (rerank-k's dev choice)."),
    ] = None,
    data: Data = DATA,
    work: Annotated[Path, typer.Option(help="Where the model's vectors are kept between runs.")] = RUNS / "rerank-k",
) -> None:
    if name not in NAMES:
        raise typer.BadParameter(f"{name} is not one of {', '.join(NAMES)}.")
    dev = split_pairs(read_pairs(data)[0]).dev
    dev = dev.take(np.sort(np.random.default_rng(seed).choice(len(dev), min(pairs, len(dev)), replace=False)))
    model = Model.load(name)
    record = calibrate(model, dev)
    model.metrics = {"calibration": record}
    if search:
        with cached(model, work / "vectors" / model.fingerprint()):
            fit = calibrate_search(model, data)
        if candidates is not None:
            fit["candidates"] = candidates
        kept = ("fitted_on", "fitted_by", "suggest", "duplicate", "candidates")
        model.metrics["search_calibration"] = {k: fit[k] for k in kept if k in fit}
    model.save(model.folder)  # its config.json and metrics.json in the cache, as resolve will write them
    command = f"dupq-lab named-calibration {name} --pairs {pairs} --seed {seed}"
    command += (" --search" if search else "") + (f" --candidates {candidates}" if candidates else "")
    config = json.loads((model.folder / "config.json").read_text(encoding="utf-8"))
    write_json(NAMED_JSON / f"{name}.json", {"command": command, "config": config, "metrics": model.metrics})
    report(
        {
            "model": name,
            "command": command,
            "file": str((NAMED_JSON / f"{name}.json").relative_to(REPO)),
            **record,
            **({"search_calibration": model.metrics["search_calibration"]} if search else {}),
        }
    )
