"""Evaluate a trained pipeline on UD English-EWT test with gold tokenization.

Reports UAS / LAS (all tokens, as in the UD / CoNLL 2018 evaluation, and without
punctuation), sentence-boundary F, UPOS accuracy and speed (words/s of the whole
pipeline), twice: with the sentence boundaries predicted by the pipeline's ``senter`` and
with the gold boundaries (``senter`` disabled).

    python configs/evaluate_en_ewt.py spacy_treexp/models/en_treexp_ewt corpus/en_ewt-ud-test.spacy
"""
import argparse
import json
import time
from pathlib import Path
from typing import Dict, List

import spacy
from spacy.language import Language
from spacy.scorer import Scorer
from spacy.tokens import Doc, DocBin
from spacy.training import Example

from spacy_treexp.pipeline.biaffine_parser import biaffine_parser_score


def _words_only(reference: Doc, with_sentences: bool) -> Doc:
    words = [token.text for token in reference]
    spaces = [bool(token.whitespace_) for token in reference]
    sent_starts = [bool(token.is_sent_start) for token in reference] if with_sentences else None
    return Doc(reference.vocab, words=words, spaces=spaces, sent_starts=sent_starts)


def evaluate(nlp: Language, references: List[Doc], gold_sentences: bool) -> Dict[str, float]:
    """Parse the gold-tokenized texts and score them against ``references``."""
    inputs = [_words_only(ref, gold_sentences) for ref in references]
    disable = ["senter"] if gold_sentences else []
    with nlp.select_pipes(disable=[name for name in disable if name in nlp.pipe_names]):
        start = time.perf_counter()
        docs = list(nlp.pipe(inputs, batch_size=64))
        seconds = time.perf_counter() - start
    examples = [Example(doc, ref) for doc, ref in zip(docs, references)]
    all_tokens = biaffine_parser_score(examples)
    no_punct = biaffine_parser_score(examples, ignore_labels=("punct",))
    sents = Scorer.score_spans(
        examples, "sents", has_annotation=lambda doc: doc.has_annotation("SENT_START")
    )
    pos = Scorer.score_token_attr(examples, "pos")
    n_words = sum(len(doc) for doc in docs)
    return {
        "sentences": "gold" if gold_sentences else "predicted",
        "uas": round(100 * all_tokens["dep_uas"], 2),
        "las": round(100 * all_tokens["dep_las"], 2),
        "uas_no_punct": round(100 * no_punct["dep_uas"], 2),
        "las_no_punct": round(100 * no_punct["dep_las"], 2),
        "sents_f": round(sents["sents_f"], 4),
        "upos_acc": round(100 * pos["pos_acc"], 2),
        "words": n_words,
        "words_per_second": round(n_words / seconds),
    }


def main(model: Path, test_path: Path, output: Path = None) -> None:
    nlp = spacy.load(model)
    references = list(DocBin().from_disk(test_path).get_docs(nlp.vocab))
    results = [evaluate(nlp, references, gold) for gold in (False, True)]
    text = json.dumps(results, indent=2)
    print(text)
    if output is not None:
        output.write_text(text + "\n", encoding="utf8")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("test_path", type=Path)
    parser.add_argument("--output", type=Path, default=None, help="also write the JSON here")
    args = parser.parse_args()
    main(args.model, args.test_path, args.output)
