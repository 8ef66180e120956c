"""Calibration on a gold treebank: the tree distribution against the local per-word softmax,
raw and with maps fitted on dev (issue 21, part 2), per genre with chance bands.

    python benchmarks/calibration_ewt.py --dev ../shared/data/ud_en_ewt/en_ewt-ud-dev.conllu \
        --test ../shared/data/ud_en_ewt/en_ewt-ud-test.conllu --out docs/eval_ewt \
        [--model PATH] [--write-map spacy_treexp/models/en_treexp_ewt/biaffine_parser/treexp_calibration.json]

Writes OUT/calibration.json, OUT/calibration.md and OUT/reliability_genres.png (the same
block ``spacy-treexp evaluate --dev`` writes into its report), and with ``--write-map`` the
distance map fitted on all of dev (what ``spacy-treexp calibrate`` would store). Parsing is
on gold tokens and sentences; scores are the pipeline's ``Doc._.parser_scores``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import torch

from spacy_treexp.calibration import CalibrationMap, fit_calibration
from spacy_treexp.evaluation import read_conllu, spacy_scores
from spacy_treexp.evaluation.calibration_report import calibration_section
from spacy_treexp.evaluation.epistemic import with_risk_temperature
from spacy_treexp.evaluation.report import calibration_lines, json_safe, reliability_by_genre
from spacy_treexp.evaluation.run import load_spacy, machine, shown_path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dev", required=True)
    parser.add_argument("--test", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--model", default=None, help="spaCy pipeline (default: the shipped model)")
    parser.add_argument("--write-map", default=None, help="also write the distance map fitted on all of dev here")
    parser.add_argument("--bootstrap", type=int, default=200)
    parser.add_argument(
        "--encoder-precision", default=None, choices=["float32", "bfloat16"], help="the parser's encoder_precision"
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    start = time.perf_counter()
    overrides = (
        {}
        if args.encoder_precision is None
        else {"components.biaffine_parser.encoder_precision": args.encoder_precision}
    )
    nlp = load_spacy(args.model, overrides)
    dev_gold, test_gold = read_conllu(args.dev), read_conllu(args.test)
    dev_scores, test_scores = spacy_scores(nlp, dev_gold), spacy_scores(nlp, test_gold)
    section = calibration_section(
        test_gold, test_scores, dev_gold, dev_scores, bootstrap_replicates=args.bootstrap, log=print
    )
    command = "python benchmarks/calibration_ewt.py " + " ".join(
        shown_path(a) if Path(a).exists() else a for a in sys.argv[1:]
    )
    section["meta"] = {
        "model": args.model or "default (spacy_treexp.load())",
        "dev": shown_path(args.dev),
        "test": shown_path(args.test),
        "command": command,
        "machine": machine() + " (shared with other jobs)",
        "seconds": time.perf_counter() - start,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "calibration.json").write_text(json.dumps(json_safe(section), indent=2) + "\n", encoding="utf8")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plot = reliability_by_genre(section, out, plt)
    meta = section["meta"]
    lines = [
        "# Calibration on EWT test (maps fitted on EWT dev)",
        "",
        f"- model: `{meta['model']}`; dev `{meta['dev']}`, test `{meta['test']}`; gold tokens and sentences",
        f"- command: `{meta['command']}`",
        f"- machine: {meta['machine']}; {meta['seconds']:.0f} s",
        "",
        *calibration_lines(section),
        "",
        f"![reliability per genre]({plot})",
    ]
    (out / "calibration.md").write_text("\n".join(lines) + "\n", encoding="utf8")
    if args.write_map:
        fitted, _ = with_risk_temperature(fit_calibration(dev_gold, dev_scores, "distance"), dev_gold, dev_scores)
        fitted.fit["data"] = f"{Path(args.dev).name}: the pipeline's parser on gold tokens and sentences"
        fitted.fit["command"] = "python benchmarks/calibration_ewt.py --dev DEV --test TEST --out OUT --write-map MAP"
        if Path(args.write_map).is_file():  # keep the novelty reference (benchmarks/ood_novelty.py)
            previous = CalibrationMap.from_disk(args.write_map)
            if previous.novelty is not None:
                fitted.fit["novelty"] = previous.fit.get("novelty")
                fitted = dataclasses.replace(fitted, novelty=previous.novelty)
        fitted.to_disk(args.write_map)
        print(f"wrote {args.write_map}")
    print(f"wrote calibration.json, calibration.md and {plot} to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
