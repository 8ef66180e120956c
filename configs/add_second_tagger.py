"""Multiply the shipped pipeline's tagger with a second tagger (a product of experts).

The second tagger is trained by configs/en_ewt_second_tagger.cfg (component ``tagger_sm``:
a frozen copy of en_core_web_sm's encoder and the pipeline's vectors under two maxout layers). This
script makes the shipped ``tagger`` component's model ``spacy_treexp.ProductOfTaggers.v1``
of the shipped tagger's model (``first``) and the second one's (``second``), scores per token
``log p_first + weight * log p_second``, with ``weight`` chosen on the dev corpus (gold
tokens) from a grid, and saves the weights at half precision (``storage = "float16"``).

Only the tagger changes: its config sections (``[components.tagger.model*]``) and its
``tagger/model`` file; every other file of the pipeline is kept byte for byte (its labels, its
listener to ``tagger_tok2vec``, and the ``doc.tensor`` the calibration map reads are as
they were). The folder is replaced atomically (a sibling folder renamed into place). Run
again, it replaces the second tagger it added (the first member is kept).

    python configs/add_second_tagger.py spacy_treexp/models/en_treexp_ewt training_second_tagger/model-best \\
        corpus/en_ewt-ud-dev.spacy [--weight W]
"""

import argparse
import json
import re
import shutil
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy
import spacy
from spacy.language import Language
from spacy.tokens import Doc, DocBin
from thinc.api import Config, Model

from spacy_treexp.io.files import config_without_sections, folder_replacement
from spacy_treexp.pipeline.product_of_taggers import (
    PRODUCT_OF_TAGGERS,
    ProductOfTaggers,
    build_product_of_taggers,
    log_probabilities,
    normalizes,
)

TAGGER = "tagger"
SECOND = "tagger_sm"
#: The weights the dev corpus chooses among.
WEIGHTS = (0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0)
STORAGE = "float16"


def first_member(nlp: Language) -> Model:
    """The shipped tagger's own model (the first member where the tagger is a product already)."""
    model = nlp.get_pipe(TAGGER).model
    return model.layers[0] if isinstance(model, ProductOfTaggers) else model


def first_member_config(config: Config) -> Dict:
    section = config["components"][TAGGER]["model"]
    return section["first"] if section.get("@architectures") == PRODUCT_OF_TAGGERS else section


def members_log_probabilities(nlp: Language, second: Model, docs: List[Doc]) -> tuple:
    """Per token of ``docs`` the two taggers' log-probabilities (float64): the shipped one's, ``second``'s."""
    first = first_member(nlp)
    with nlp.select_pipes(enable=nlp.pipe_names[: nlp.pipe_names.index(TAGGER)]):  # what the tagger reads
        analysed = list(nlp.pipe(docs, batch_size=64))
    return tuple(
        numpy.concatenate([log_probabilities(s, normalizes(member)) for s in member.predict(analysed)]).astype(
            "float64"
        )
        for member in (first, second)
    )


def choose_weight(
    first: numpy.ndarray, second: numpy.ndarray, gold: numpy.ndarray, weights: Sequence[float]
) -> Dict[float, float]:
    """Dev accuracy (%) of the product's argmax for each weight."""
    return {w: 100.0 * float(((first + w * second).argmax(axis=1) == gold).mean()) for w in weights}


def main(model_dir: Path, trained_dir: Path, dev_corpus: Path, weight: Optional[float]) -> None:
    nlp = spacy.load(model_dir)
    trained = spacy.load(trained_dir)
    if SECOND not in trained.pipe_names:
        sys.exit(f"{trained_dir} has no {SECOND!r} component (train configs/en_ewt_second_tagger.cfg)")
    labels, second_labels = list(nlp.get_pipe(TAGGER).labels), list(trained.get_pipe(SECOND).labels)
    if labels != second_labels:
        sys.exit(f"{trained_dir}'s {SECOND} scores other tags, or in another order, than {model_dir}'s {TAGGER}")
    if trained.vocab.vectors.shape != nlp.vocab.vectors.shape or not numpy.array_equal(
        trained.vocab.vectors.data, nlp.vocab.vectors.data
    ):
        sys.exit(f"{trained_dir} was trained with other vectors than {model_dir}")
    second = trained.get_pipe(SECOND).model

    references = list(DocBin().from_disk(dev_corpus).get_docs(nlp.vocab))
    docs = [
        Doc(nlp.vocab, words=[t.text for t in ref], spaces=[bool(t.whitespace_) for t in ref]) for ref in references
    ]
    gold = numpy.array([labels.index(t.tag_) if t.tag_ in labels else -1 for ref in references for t in ref])
    first_logs, second_logs = members_log_probabilities(nlp, second, docs)
    by_weight = choose_weight(first_logs, second_logs, gold, WEIGHTS if weight is None else [weight])
    chosen = max(by_weight, key=lambda w: (by_weight[w], -w))  # the smallest of the best
    print(
        json.dumps(
            {
                "dev_tag_acc_by_weight": by_weight,
                "first_alone": choose_weight(first_logs, second_logs, gold, [0.0])[0.0],
                "weight": chosen,
            }
        )
    )

    tagger = nlp.get_pipe(TAGGER)
    tagger.model = build_product_of_taggers(first_member(nlp), second, weight=chosen, storage=STORAGE)
    section = {
        "@architectures": PRODUCT_OF_TAGGERS,
        "weight": chosen,
        "storage": STORAGE,
        "first": first_member_config(nlp.config),
        "second": trained.config["components"][SECOND]["model"],
    }
    sections = Config({"components": {TAGGER: {"model": section}}}).to_str()
    sections = re.sub(rf"^\[components\]\n+\[components\.{TAGGER}\]\n+", "", sections)  # both exist already
    with folder_replacement(model_dir) as tmp:
        shutil.rmtree(tmp / TAGGER)
        tagger.to_disk(tmp / TAGGER, exclude=["vocab"])
        text = config_without_sections(
            (model_dir / "config.cfg").read_text(encoding="utf8"), f"components.{TAGGER}.model"
        )
        (tmp / "config.cfg").write_text(text + "\n" + sections.rstrip("\n") + "\n", encoding="utf8")
        loaded = spacy.load(tmp)  # refuse to ship what does not load, or loads other weights
        if loaded.get_pipe(TAGGER).model.attrs.get("weight") != chosen:
            sys.exit(f"{tmp} does not load the product of taggers")
    print(f"{model_dir}: {TAGGER} = {PRODUCT_OF_TAGGERS} (weight {chosen:g}, stored in {STORAGE})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", type=Path, help="the shipped pipeline (replaced)")
    parser.add_argument("trained_dir", type=Path, help="spacy train's model-best for en_ewt_second_tagger.cfg")
    parser.add_argument("dev_corpus", type=Path, help="the dev corpus (.spacy, gold tags) the weight is chosen on")
    parser.add_argument(
        "--weight", type=float, default=None, help=f"use this weight (default: the best on dev of {WEIGHTS})"
    )
    args = parser.parse_args()
    main(args.model_dir, args.trained_dir, args.dev_corpus, args.weight)
