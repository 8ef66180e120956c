#!/usr/bin/env bash
# Add a PTB tagger (EWT XPOS, token.tag_) and a trainable lemmatizer to the shipped English
# pipeline without retraining its components:
#   1. convert UD English-EWT (CoNLL-U) to spaCy's format in corpus/ (if not there yet),
#   2. train tagger_tok2vec + tagger + trainable_lemmatizer on the shipped pipeline's frozen
#      tok2vec (configs/en_ewt_tagger_lemmatizer.cfg; frozen and annotating components),
#   3. source them into spacy_treexp/models/en_treexp_ewt, with a lemma table of the training
#      corpus's (tag, form) pairs over the trainable lemmatizer (configs/add_tagger_lemmatizer.py),
#   4. score the pipeline on EWT test and time it with and without them in one run
#      (benchmarks/bench_shipped_pipeline.py -> docs/eval_ewt/shipped_pipeline.json),
#   5. write the meta (version, author, url from pyproject.toml; the scores of step 4).
# Usage: configs/train_tagger_lemmatizer.sh [extra `spacy train` overrides]
# Environment: UD_EWT (required: the treebank folder), PYTHON, TRAIN_SECONDS (wall-clock
#   budget of step 2, default 3000 s; a run stopped by its budget keeps its model-best).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
UD_EWT=${UD_EWT:?set UD_EWT to the folder holding en_ewt-ud-train.conllu, en_ewt-ud-dev.conllu and en_ewt-ud-test.conllu}
TRAIN_SECONDS=${TRAIN_SECONDS:-3000}
MODEL_DIR=spacy_treexp/models/en_treexp_ewt
OUT=training_tagger

source configs/train_lib.sh
mkdir -p "$OUT"
convert_ewt
train_within "$TRAIN_SECONDS" configs/en_ewt_tagger_lemmatizer.cfg --output "$OUT/" --paths.base_model "$MODEL_DIR" "$@"

"$PYTHON" configs/add_tagger_lemmatizer.py "$MODEL_DIR" "$OUT/model-best" corpus/en_ewt-ud-train.spacy
mkdir -p docs/eval_ewt
OMP_NUM_THREADS=1 nice -n 19 "$PYTHON" benchmarks/bench_shipped_pipeline.py \
    --conllu "$UD_EWT/en_ewt-ud-test.conllu" --output docs/eval_ewt/shipped_pipeline.json
"$PYTHON" configs/write_model_meta.py "$MODEL_DIR" docs/eval_ewt/shipped_pipeline.json
