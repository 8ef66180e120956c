"""Evaluate a trained pipeline on UD English-EWT test with gold tokenization.

Reports UAS / LAS (all tokens, as in the UD / CoNLL 2018 evaluation, and without
punctuation), sentence segmentation, UPOS accuracy and speed (words/s of the whole
pipeline) with the sentence boundaries

* ``predicted``: the pipeline's ``senter`` on the words alone (one space between words
  unless the treebank says SpaceAfter=No);
* ``predicted+paragraphs``: the same words with a blank line (a ``"\n\n"`` token) wherever
  the treebank starts a paragraph (``# newpar`` / ``# newdoc``; the raw text UD derives from
  the CoNLL-U and the CoNLL 2018 shared task's input have them), so ``paragraph_breaks``
  and the ``senter`` both run; needs ``--conllu``;
* ``gold``: the treebank's boundaries (``senter`` and ``sentencizer`` disabled).

Sentence segmentation is scored two ways: ``sents_p/r/f`` (spaCy's ``sents`` score and
CoNLL 2018's "Sentences": a sentence counts when both its ends are right) and
``boundary_p/r/f`` (each sentence start other than a Doc's first token is one boundary
decision). Whitespace tokens inserted for paragraphs are not words: they are skipped in
every score and in words/s.

    python configs/evaluate_en_ewt.py spacy_treexp/models/en_treexp_ewt corpus/en_ewt-ud-test.spacy \
        --conllu ../shared/data/ud_en_ewt/en_ewt-ud-test.conllu
"""

import argparse
import json
import time
from pathlib import Path
from typing import Dict, List, Optional

import numpy
from spacy.language import Language
from spacy.scorer import Scorer
from spacy.tokens import Doc, DocBin
from spacy.training import Example

from spacy_treexp.pipeline.biaffine_parser import biaffine_parser_score
from spacy_treexp.pipeline.default_model import load_named
from spacy_treexp.pipeline.readers import gold_tokens_doc

CONDITIONS = ("predicted", "predicted+paragraphs", "gold")


def paragraph_flags(conllu: Path) -> List[bool]:
    """One flag per sentence of a CoNLL-U file: does it start a paragraph (or document)?"""
    flags, starts = [], False
    with conllu.open(encoding="utf8") as f:
        for line in f:
            if line.startswith(("# newpar", "# newdoc")):
                starts = True
            elif line.startswith("# sent_id"):
                flags.append(starts)
                starts = False
    return flags


def _words_only(reference: Doc, condition: str, paragraphs: Optional[List[bool]] = None) -> Doc:
    """The reference's words, with its sentence boundaries (``gold``) or a blank-line token
    before each paragraph but the Doc's first (``predicted+paragraphs``)."""
    if condition == "predicted":
        return gold_tokens_doc(reference, reference.vocab)
    words = [token.text for token in reference]
    spaces = [bool(token.whitespace_) for token in reference]
    if condition == "gold":
        sent_starts = [bool(token.is_sent_start) for token in reference]
        return Doc(reference.vocab, words=words, spaces=spaces, sent_starts=sent_starts)
    out_words: List[str] = []
    out_spaces: List[bool] = []
    for sent, new_paragraph in zip(reference.sents, paragraphs):
        if new_paragraph and out_words:
            out_spaces[-1] = False
            out_words.append("\n\n")
            out_spaces.append(False)
        out_words.extend(words[sent.start : sent.end])
        out_spaces.extend(spaces[sent.start : sent.end])
    return Doc(reference.vocab, words=out_words, spaces=out_spaces)


def boundary_prf(docs: List[Doc], references: List[Doc]) -> Dict[str, float]:
    """Precision, recall and F of sentence starts, each Doc's first word excluded; a
    predicted sentence starts at its first non-whitespace token."""
    tp = n_pred = n_gold = 0
    for doc, ref in zip(docs, references):
        words = [token.i for token in doc if not token.is_space]
        assert len(words) == len(ref), "the predicted Doc's words must be the reference's"
        position = {i: k for k, i in enumerate(words)}
        predicted = set()
        for sent in doc.sents:
            first = next((t.i for t in sent if not t.is_space), None)
            if first is not None:
                predicted.add(position[first])
        gold = {token.i for token in ref if token.is_sent_start}
        predicted.discard(0)
        gold.discard(0)
        tp += len(predicted & gold)
        n_pred += len(predicted)
        n_gold += len(gold)
    p = tp / n_pred if n_pred else 0.0
    r = tp / n_gold if n_gold else 0.0
    return {"p": p, "r": r, "f": 2 * p * r / (p + r) if p + r else 0.0}


def evaluate(
    nlp: Language, references: List[Doc], condition: str, paragraphs: Optional[List[List[bool]]] = None
) -> Dict[str, float]:
    """Parse the gold-tokenized texts and score them against ``references``."""
    if condition not in CONDITIONS:
        raise ValueError(f"condition must be one of {CONDITIONS}, got {condition!r}")
    flags = paragraphs if paragraphs is not None else [None] * len(references)
    inputs = [_words_only(ref, condition, par) for ref, par in zip(references, flags)]
    disable = ["senter", "sentencizer"] if condition == "gold" else []
    with nlp.select_pipes(disable=[name for name in disable if name in nlp.pipe_names]):
        start = time.perf_counter()
        docs = list(nlp.pipe(inputs, batch_size=64))
        seconds = time.perf_counter() - start
    examples = [Example(doc, ref) for doc, ref in zip(docs, references)]
    all_tokens = biaffine_parser_score(examples)
    no_punct = biaffine_parser_score(examples, ignore_labels=("punct",))
    sents = Scorer.score_spans(examples, "sents", has_annotation=lambda doc: doc.has_annotation("SENT_START"))
    boundaries = boundary_prf(docs, references)
    pos = Scorer.score_token_attr(examples, "pos")
    n_words = sum(len(ref) for ref in references)
    return {
        "sentences": condition,
        "uas": round(100 * all_tokens["dep_uas"], 2),
        "las": round(100 * all_tokens["dep_las"], 2),
        "uas_no_punct": round(100 * no_punct["dep_uas"], 2),
        "las_no_punct": round(100 * no_punct["dep_las"], 2),
        "sents_p": round(sents["sents_p"], 4),
        "sents_r": round(sents["sents_r"], 4),
        "sents_f": round(sents["sents_f"], 4),
        "boundary_p": round(boundaries["p"], 4),
        "boundary_r": round(boundaries["r"], 4),
        "boundary_f": round(boundaries["f"], 4),
        "upos_acc": round(100 * pos["pos_acc"], 2),
        "words": n_words,
        "words_per_second": round(n_words / seconds),
    }


def main(
    model: str,
    test_path: Path,
    conllu: Optional[Path] = None,
    output: Optional[Path] = None,
    only: Optional[List[str]] = None,
) -> None:
    nlp = load_named(model)
    references = list(DocBin().from_disk(test_path).get_docs(nlp.vocab))
    conditions = ["predicted", "gold"]
    paragraphs = None
    if conllu is not None:
        flags = paragraph_flags(conllu)
        counts = [len(list(ref.sents)) for ref in references]
        if sum(counts) != len(flags):
            raise SystemExit(f"{conllu} has {len(flags)} sentences, {test_path} has {sum(counts)}")
        offsets = numpy.cumsum([0] + counts)
        paragraphs = [flags[a:b] for a, b in zip(offsets[:-1], offsets[1:])]
        conditions.insert(1, "predicted+paragraphs")
    if only:
        conditions = [condition for condition in conditions if condition in only]
    results = [evaluate(nlp, references, condition, paragraphs) for condition in conditions]
    text = json.dumps(results, indent=2)
    print(text)
    if output is not None:
        output.write_text(text + "\n", encoding="utf8")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="a pipeline folder or package, or en_treexp_ewt_ensemble")
    parser.add_argument("test_path", type=Path)
    parser.add_argument(
        "--conllu",
        type=Path,
        default=None,
        help="the CoNLL-U the .spacy file was converted from: adds the paragraph condition",
    )
    parser.add_argument("--output", type=Path, default=None, help="also write the JSON here")
    parser.add_argument("--conditions", nargs="+", choices=CONDITIONS, default=None, help="only these")
    args = parser.parse_args()
    main(args.model, args.test_path, args.conllu, args.output, args.conditions)
