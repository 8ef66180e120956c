"""Accuracy and speed of the shipped English pipeline on UD English-EWT test, gold tokens.

Scores, for sentence boundaries predicted by the pipeline (the words alone, as
``configs/evaluate_en_ewt.py``'s ``predicted``) and for the treebank's own (``senter``
disabled):

* ``tag_acc``: PTB tags (``token.tag_``) against EWT's XPOS column;
* ``lemma_acc``: ``token.lemma_`` against EWT's LEMMA column (every word);
* ``pos_acc``, ``uas``, ``las`` (all words, punctuation included), ``sents_f`` (spaCy's
  sentence-span F, predicted boundaries only);
* ``noun_chunks_p/r/f``: ``doc.noun_chunks`` against the chunks of the gold tree. The gold
  chunks are derived by applying the definition of
  :mod:`spacy_treexp.pipeline.noun_chunks` (:func:`~spacy_treexp.pipeline.noun_chunks.chunk_spans`)
  to the treebank's HEAD, DEPREL, UPOS and XPOS columns; a chunk counts when both its
  ends match. Every word of every Doc takes part (the gold tree of a 10-sentence Doc is
  its 10 sentence trees).

``--compare`` scores other pipelines on the same Docs and the same gold chunks, e.g.
``en_core_web_sm`` (its chunks follow spaCy's English iterator on ClearNLP relations, so
their boundaries differ by convention from UD's as well as by error).

Speed: words/s of the whole pipeline, best of ``--repeats`` passes over the test Docs
(gold tokens, predicted sentences), measured for the full pipeline and for it without the
components named by ``--without`` (by default ``tagger_tok2vec``, ``tagger``, ``lemmatizer`` and
``lemma_table``: the pipeline as it was before they were added) and, where the tagger is a
product of two taggers (``spacy_treexp.ProductOfTaggers.v1``), with its first tagger alone
(``weight = 0``), alternating in one process,
in wall time and in the process's CPU time (robust on a machine loaded by other work);
``--speed-only`` skips the scores.

    OMP_NUM_THREADS=1 nice -n 19 python benchmarks/bench_shipped_pipeline.py \
        --conllu PATH/en_ewt-ud-test.conllu [--model PATH] [--compare en_core_web_sm] \
        [--output docs/eval_ewt/shipped_pipeline.json]

The ensemble (``spacy_treexp.load(ensemble=True)``) against the shipped pipeline, in one run::

    OMP_NUM_THREADS=1 python benchmarks/bench_shipped_pipeline.py --conllu PATH/en_ewt-ud-test.conllu \
        --model en_treexp_ewt_ensemble --without second_parser --output docs/eval_ewt/ensemble/pipeline.json
"""

import argparse
import json
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Set, Tuple

import spacy
import torch
from spacy.language import Language
from spacy.scorer import Scorer
from spacy.tokens import Doc
from spacy.training import Example
from spacy.training.converters import conllu_to_docs
from thinc.api import Model, NumpyOps

from spacy_treexp.pipeline.biaffine_parser import biaffine_parser_score
from spacy_treexp.pipeline.blas import swapped_ops
from spacy_treexp.pipeline.default_model import load_named
from spacy_treexp.pipeline.noun_chunks import chunk_spans
from spacy_treexp.pipeline.product_of_taggers import ProductOfTaggers

DEFAULT_WITHOUT = ("tagger_tok2vec", "tagger", "lemmatizer", "trainable_lemmatizer", "lemma_table")


def gold_chunks(reference: Doc) -> Set[Tuple[int, int]]:
    """The chunks of the gold tree: :func:`chunk_spans` on the treebank's columns."""
    return set(
        chunk_spans(
            [t.head.i for t in reference],
            [t.dep_ for t in reference],
            [t.pos_ for t in reference],
            [t.tag_ for t in reference],
        )
    )


def chunk_prf(docs: Sequence[Doc], references: Sequence[Doc]) -> Dict[str, float]:
    """Exact-span precision, recall and F1 of ``doc.noun_chunks`` against :func:`gold_chunks`."""
    tp = n_pred = n_gold = 0
    for doc, ref in zip(docs, references):
        predicted = {(c.start, c.end) for c in doc.noun_chunks}
        gold = gold_chunks(ref)
        tp += len(predicted & gold)
        n_pred += len(predicted)
        n_gold += len(gold)
    p = tp / n_pred if n_pred else 0.0
    r = tp / n_gold if n_gold else 0.0
    return {"p": p, "r": r, "f": 2 * p * r / (p + r) if p + r else 0.0, "predicted": n_pred, "gold": n_gold}


def words_doc(nlp: Language, reference: Doc, gold_sentences: bool) -> Doc:
    words = [t.text for t in reference]
    spaces = [bool(t.whitespace_) for t in reference]
    starts = [bool(t.is_sent_start) for t in reference] if gold_sentences else None
    return Doc(nlp.vocab, words=words, spaces=spaces, sent_starts=starts)


def score(nlp: Language, references: List[Doc], gold_sentences: bool) -> Dict[str, object]:
    disable = [n for n in ("senter", "sentencizer") if gold_sentences and n in nlp.pipe_names]
    with nlp.select_pipes(disable=disable):
        docs = list(nlp.pipe([words_doc(nlp, r, gold_sentences) for r in references], batch_size=64))
    examples = [Example(doc, ref) for doc, ref in zip(docs, references)]
    out: Dict[str, object] = {"sentences": "gold" if gold_sentences else "predicted"}
    for attr in ("tag", "lemma", "pos"):
        out[f"{attr}_acc"] = round(100 * (Scorer.score_token_attr(examples, attr)[f"{attr}_acc"] or 0.0), 2)
    if not gold_sentences:
        sents = Scorer.score_spans(
            examples, "sents", has_annotation=lambda doc: doc.has_annotation("SENT_START") or doc.has_annotation("DEP")
        )
        out["sents_f"] = round(sents["sents_f"], 4)
    if "biaffine_parser" in nlp.pipe_names:  # a pipeline with other relations (ClearNLP) is not scored on UD trees
        parse = biaffine_parser_score(examples)
        out["uas"] = round(100 * parse["dep_uas"], 2)
        out["las"] = round(100 * parse["dep_las"], 2)
    chunks = chunk_prf(docs, references)
    out.update({f"noun_chunks_{k}": round(v, 4) for k, v in chunks.items()})
    return out


@contextmanager
def blis_ops(nlp: Language, on: bool) -> Iterator[None]:
    """With ``on``, every thinc layer of ``nlp`` multiplies with blis (thinc's default ops)
    inside the block instead of the numpy BLAS the shipped config gives it
    (``spacy_treexp.numpy_blas.v1``): the pipeline as it ran before that callback."""
    if not on:
        yield
        return
    nodes = [
        node
        for _, pipe in nlp.pipeline
        if isinstance(getattr(pipe, "model", None), Model)
        for node in pipe.model.walk()
    ]
    with swapped_ops(nodes, NumpyOps(use_blis=True)):
        yield


@contextmanager
def first_tagger_only(nlp: Language, on: bool) -> Iterator[None]:
    """With ``on``, a ``tagger`` whose model is ``spacy_treexp.ProductOfTaggers.v1`` tags
    with its first tagger alone inside the block (``weight = 0``: the second is not run)."""
    model = nlp.get_pipe("tagger").model if on else None
    saved = None if model is None else model.attrs["weight"]
    if model is not None:
        model.attrs["weight"] = 0.0
    try:
        yield
    finally:
        if model is not None:
            model.attrs["weight"] = saved


def has_product_tagger(nlp: Language) -> bool:
    return "tagger" in nlp.pipe_names and isinstance(nlp.get_pipe("tagger").model, ProductOfTaggers)


def speed(
    nlp: Language, references: List[Doc], without: Sequence[str], repeats: int, blis: bool = False
) -> Dict[str, object]:
    """Best-of-``repeats`` words/s with and without ``without``, passes alternating, in wall
    time and in the process's CPU time (one torch thread: the CPU time is the work done,
    which other processes on a loaded machine do not inflate). With ``blis``, also both with
    thinc's blis products (``blis_ops``), alternating with the others; ``ratio_to_blis_without``
    is then the pipeline's speed over that of the pipeline without ``without`` on blis. Where
    the tagger is a product of two taggers, also with its first tagger alone
    (``first_tagger_only``), alternating with the others."""
    n_words = sum(len(r) for r in references)
    absent = [n for n in without if n in nlp.pipe_names]
    product = has_product_tagger(nlp)
    settings = [("full", [], False), ("without", absent, False)]
    if blis:
        settings += [("blis", [], True), ("blis_without", absent, True)]
    if product:
        settings += [("first_tagger", [], False)]
    best = {key: float("inf") for key, _, _ in settings}
    best_cpu = dict(best)
    list(nlp.pipe([words_doc(nlp, r, False) for r in references[:5]]))
    for _ in range(repeats):
        for key, disable, on_blis in settings:
            docs = [words_doc(nlp, r, False) for r in references]
            with (
                nlp.select_pipes(disable=disable),
                blis_ops(nlp, on_blis),
                first_tagger_only(nlp, key == "first_tagger"),
            ):
                start, start_cpu = time.perf_counter(), time.process_time()
                for _doc in nlp.pipe(docs, batch_size=64):
                    pass
                best[key] = min(best[key], time.perf_counter() - start)
                best_cpu[key] = min(best_cpu[key], time.process_time() - start_cpu)
    out: Dict[str, object] = {
        "words": n_words,
        "torch_threads": torch.get_num_threads(),
        "without": absent,
        "words_per_second": round(n_words / best["full"]),
        "words_per_second_without": round(n_words / best["without"]),
        "ratio": round(best["without"] / best["full"], 3),
        "words_per_cpu_second": round(n_words / best_cpu["full"]),
        "words_per_cpu_second_without": round(n_words / best_cpu["without"]),
        "ratio_cpu": round(best_cpu["without"] / best_cpu["full"], 3),
    }
    if blis:
        out.update(
            {
                "words_per_second_blis": round(n_words / best["blis"]),
                "words_per_second_blis_without": round(n_words / best["blis_without"]),
                "ratio_to_blis": round(best["blis"] / best["full"], 3),
                "ratio_to_blis_without": round(best["blis_without"] / best["full"], 3),
                "words_per_cpu_second_blis": round(n_words / best_cpu["blis"]),
                "words_per_cpu_second_blis_without": round(n_words / best_cpu["blis_without"]),
                "ratio_cpu_to_blis": round(best_cpu["blis"] / best_cpu["full"], 3),
                "ratio_cpu_to_blis_without": round(best_cpu["blis_without"] / best_cpu["full"], 3),
            }
        )
    if product:
        out["words_per_second_first_tagger"] = round(n_words / best["first_tagger"])
        out["ratio_first_tagger"] = round(best["first_tagger"] / best["full"], 3)
        if blis:
            out["ratio_first_tagger_to_blis_without"] = round(best["blis_without"] / best["first_tagger"], 3)
    return out


def main(
    conllu: Path,
    model: Optional[str],
    compare: Sequence[str],
    without: Sequence[str],
    repeats: int,
    output: Optional[Path],
    speed_only: bool = False,
    encoder_precision: Optional[str] = None,
    blis: bool = False,
) -> None:
    torch.set_num_threads(1)
    overrides = {} if encoder_precision is None else {"components.biaffine_parser.encoder_precision": encoder_precision}
    nlp = load_named(model, config=overrides)
    references = list(conllu_to_docs(conllu.read_text(encoding="utf8"), n_sents=10, no_print=True))
    result: Dict[str, object] = {"data": conllu.name, "pipeline": nlp.pipe_names, "config": overrides}
    if not speed_only:
        result["scores"] = [score(nlp, references, gold) for gold in (False, True)]
    if repeats:
        result["speed"] = speed(nlp, references, without, repeats, blis)
    result["compare"] = {}
    for name in compare:
        other = spacy.load(name)
        result["compare"][name] = {"pipeline": other.pipe_names, "scores": [score(other, references, False)]}
    text = json.dumps(result, indent=2)
    print(text)
    if output is not None:
        tmp = output.with_suffix(output.suffix + ".partial")
        tmp.write_text(text + "\n", encoding="utf8")
        tmp.replace(output)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conllu", type=Path, required=True, help="UD English-EWT test (CoNLL-U)")
    parser.add_argument(
        "--model", default=None, help="a pipeline path (default: the shipped one; or en_treexp_ewt_ensemble)"
    )
    parser.add_argument("--compare", nargs="*", default=[], help="other pipelines to score (e.g. en_core_web_sm)")
    parser.add_argument(
        "--without", nargs="*", default=list(DEFAULT_WITHOUT), help="components left out for the baseline speed"
    )
    parser.add_argument("--repeats", type=int, default=3, help="timed passes per setting (0: no timing)")
    parser.add_argument("--output", type=Path, default=None, help="also write the JSON here")
    parser.add_argument("--speed-only", action="store_true", help="time the pipeline, score nothing")
    parser.add_argument(
        "--encoder-precision", default=None, choices=["float32", "bfloat16"], help="the parsers' encoder_precision"
    )
    parser.add_argument(
        "--blis",
        action="store_true",
        help="also time the pipeline on thinc's blis products (the ops before spacy_treexp.numpy_blas.v1)",
    )
    args = parser.parse_args()
    main(
        args.conllu,
        args.model,
        args.compare,
        args.without,
        args.repeats,
        args.output,
        args.speed_only,
        args.encoder_precision,
        args.blis,
    )
