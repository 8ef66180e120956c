"""Write a training config that goes on training a saved pipeline: a new learning-rate cycle.

Every component of the saved pipeline is ``source``d from its folder (spaCy resumes their
training; nothing is initialised again) and its word vectors are read from that folder, with
the rest of its config (corpora, batcher, optimizer) kept, and a new ``warmup_linear`` schedule: ``--warmup`` steps up to ``--rate``,
then down to zero at ``--steps``. A second cycle after the first's rate has decayed to zero
is what took the transformer pipeline of ``configs/train_en_ewt_trf.sh`` from EWT test UAS
90.69 to 91.02 (README, "Training on any treebank").

The calibration map kept beside the parser (``treexp_calibration.json``) travels unchanged
but was fitted for the weights before the new cycle: fit it again on the new pipeline with
``spacy-treexp calibrate --model OUT/model-last --dev DEV --out CALIBRATED``.

Usage:
    python configs/resume_config.py training/trf/model-best resume.cfg --steps 1600 --rate 1e-4
    python -m spacy train resume.cfg --output training/trf2 --paths.train ... --paths.dev ...
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy
from spacy.util import load_config

from spacy_treexp.io.files import write_atomic


def _has_vectors(model: Path) -> bool:
    """Whether the saved pipeline's vocabulary holds word vectors (a non-empty table)."""
    table = model / "vocab" / "vectors"
    return table.is_file() and numpy.load(table, mmap_mode="r", allow_pickle=False).size > 0


def resume_config(model: Path, steps: int, rate: float, warmup: int) -> str:
    """The config (text) that resumes training every component of the pipeline in ``model``."""
    config = load_config(model / "config.cfg", interpolate=False)
    for name in config["nlp"]["pipeline"]:
        config["components"][name] = {"source": str(model)}
    # the vocabulary comes from the saved pipeline: its vectors (the folder itself, which
    # spaCy's [initialize] vectors accepts), no tok2vec weights to load again
    config["initialize"]["vectors"] = str(model) if _has_vectors(model) else None
    config["initialize"]["init_tok2vec"] = None
    training = config["training"]
    training["max_steps"] = steps
    training["max_epochs"] = 0
    training["optimizer"]["learn_rate"] = {
        "@schedules": "warmup_linear.v1",
        "warmup_steps": warmup,
        "total_steps": steps,
        "initial_rate": rate,
    }
    return config.to_str()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", type=Path, help="the saved pipeline (e.g. training/trf/model-best)")
    parser.add_argument("out", type=Path, help="the config to write")
    parser.add_argument("--steps", type=int, default=1600, help="steps of the new cycle")
    parser.add_argument("--rate", type=float, default=1e-4, help="its peak learning rate")
    parser.add_argument("--warmup", type=int, default=50, help="its warm-up steps")
    args = parser.parse_args()
    if not (args.model / "config.cfg").is_file():
        parser.error(f"{args.model}: not a saved pipeline (no config.cfg)")
    if args.out.resolve() == (args.model / "config.cfg").resolve():
        parser.error(f"{args.out}: that is the saved pipeline's own config; write the new one elsewhere")
    write_atomic(args.out, resume_config(args.model, args.steps, args.rate, args.warmup))


if __name__ == "__main__":
    main()
