#!/usr/bin/env bash
# Fit the calibration map of the ensemble (spacy_treexp.load(ensemble=True): the shipped
# parser and the head for en_core_web_sm as one product of experts) and measure it:
#   1. the distance map and the sentence risk's temperature on EWT dev, fitted on the summed
#      scores, with the calibration report on EWT test (benchmarks/calibration_ewt.py:
#      docs/eval_ewt/ensemble/calibration.md),
#   2. the out-of-domain model on top of the shipped pipeline's novelty reference (the
#      ensemble leaves the same doc.tensor), refitted because its features read the
#      ensemble's tree entropy (benchmarks/ood_novelty.py --select, on EWT dev against the
#      twenty-four out-of-domain sets the shipped model is fitted on; evaluated on blind8),
#   3. parsing scores with gold tokens and sentences (configs/evaluate_en_ewt.py:
#      docs/eval_ewt/ensemble/attachment.json), speed and tags against the shipped pipeline
#      (benchmarks/bench_shipped_pipeline.py: docs/eval_ewt/ensemble/pipeline.json) and
#      sentence risk and out-of-domain AUROCs (benchmarks/epistemic.py: docs/eval_ewt/ensemble/epistemic.json).
# Nothing is trained: both parsers ship in the package. About 15 minutes on one CPU thread.
# Usage: UD_EWT=../shared/data/ud_en_ewt configs/fit_ensemble_map.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
UD_EWT=${UD_EWT:?set UD_EWT to the folder holding en_ewt-ud-train.conllu, en_ewt-ud-dev.conllu and en_ewt-ud-test.conllu}
MAP=spacy_treexp/models/en_treexp_ewt_ensemble_calibration.json
OUT=docs/eval_ewt/ensemble
export OMP_NUM_THREADS=1
mkdir -p "$OUT"
rm -f "$MAP"  # a fresh map: calibration_ewt.py would keep an old one's novelty and domain model
"$PYTHON" benchmarks/calibration_ewt.py --model en_treexp_ewt_ensemble --dev "$UD_EWT/en_ewt-ud-dev.conllu" \
    --test "$UD_EWT/en_ewt-ud-test.conllu" --out "$OUT" --write-map "$MAP"
"$PYTHON" benchmarks/ood_novelty.py --model en_treexp_ewt_ensemble --train "$UD_EWT/en_ewt-ud-train.conllu" \
    --dev "$UD_EWT/en_ewt-ud-dev.conllu" --test "$UD_EWT/en_ewt-ud-test.conllu" \
    --reference-from spacy_treexp/models/en_treexp_ewt/biaffine_parser/treexp_calibration.json \
    --select --write-map "$MAP" > "$OUT/ood_novelty.json"
source configs/train_lib.sh
convert_ewt
"$PYTHON" configs/evaluate_en_ewt.py en_treexp_ewt_ensemble corpus/en_ewt-ud-test.spacy \
    --conllu "$UD_EWT/en_ewt-ud-test.conllu" --output "$OUT/attachment.json"
"$PYTHON" benchmarks/bench_shipped_pipeline.py --conllu "$UD_EWT/en_ewt-ud-test.conllu" \
    --model en_treexp_ewt_ensemble --without second_parser --output "$OUT/pipeline.json"
"$PYTHON" benchmarks/epistemic.py --model en_treexp_ewt_ensemble --conllu "$UD_EWT/en_ewt-ud-test.conllu" \
    > "$OUT/epistemic.json"
