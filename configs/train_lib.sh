# Steps the training scripts share (sourced by them; needs PYTHON and UD_EWT set).

# convert_ewt: UD English-EWT's train, dev and test CoNLL-U to spaCy's format in corpus/
# (10 sentences per Doc), each only if not there yet.
convert_ewt() {
    mkdir -p corpus
    for split in train dev test; do
        if [ ! -f "corpus/en_ewt-ud-$split.spacy" ]; then
            "$PYTHON" -m spacy convert "$UD_EWT/en_ewt-ud-$split.conllu" corpus/ --converter conllu -n 10
        fi
    done
}

# train_within SECONDS ARGS...: `spacy train ARGS` on one torch/BLAS thread (on a shared 2-core
# machine more threads only contend) under a wall-clock budget; a run its budget stops keeps
# its model-best, any other failure ends the script.
train_within() {
    local budget=$1 status=0
    shift
    OMP_NUM_THREADS=1 timeout --signal=TERM "$budget" nice -n 19 "$PYTHON" -m spacy train "$@" || status=$?
    if [ "$status" -ne 0 ] && [ "$status" -ne 124 ]; then exit "$status"; fi
}
