"""Out-of-domain detection (issue 21, part 4): encoder novelty
(``spacy_treexp.calibration.novelty``, how far a sentence's tok2vec vectors are from the
training data's) and the out-of-domain model built on it (``spacy_treexp.calibration.domain``,
``sent._.out_of_domain``: novelty, tree entropy per word, the words' familiarity, surface and
parts of speech), beside the tree entropy per word.

Nothing is fitted on the evaluation sets: the novelty reference is fitted on the tok2vec
vectors of ``--train`` (its first ``--train-sentences``, default all; unlabelled text, the
parser's own training data), or taken from the map ``--reference-from``; the lexicon is the
word forms of all of ``--train``; the domain model is fitted on ``--dev`` (in domain) against
``benchmarks/data/ood_dev_sentences.tsv`` (160 out-of-domain sentences we wrote, 22 styles,
none shared with the evaluation set), with its defaults (5 knots, ridge 1); the AUROC is then measured on ``--test`` against
``benchmarks/data/ood_sentences.tsv`` (130 sentences, 12 styles), overall and per style.
Every side goes through the pipeline's tokenizer and tagger, one sentence per Doc.

    OMP_NUM_THREADS=1 python benchmarks/ood_novelty.py --train .../en_ewt-ud-train.conllu \
        --dev .../en_ewt-ud-dev.conllu --test .../en_ewt-ud-test.conllu \
        [--reference-from spacy_treexp/models/en_treexp_ewt/biaffine_parser/treexp_calibration.json] \
        [--write-map spacy_treexp/models/en_treexp_ewt/biaffine_parser/treexp_calibration.json]

The token vectors are ``doc.tensor`` once the whole pipeline has run (what
``tree_expectations`` reads for ``sent._.novelty``; in the shipped pipeline the tagger's
tok2vec writes it last), or with ``--encoder NAME`` that component's output (novelty only).
``--write-map`` stores the reference with its domain model in a calibration map file (the
shipped one: ``sent._.novelty`` and ``sent._.out_of_domain``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy
import torch

import spacy_treexp
from spacy_treexp.calibration import CalibrationMap
from spacy_treexp.calibration.domain import SentenceSignals, fit_domain, lexicon_counts, sentence_features
from spacy_treexp.calibration.novelty import NoveltyReference, fit_novelty, span_novelty, spans_novelty
from spacy_treexp.evaluation.epistemic import auroc_table
from spacy_treexp.evaluation.metrics import auroc
from spacy_treexp.evaluation.scores import sentence_signals, text_docs
from spacy_treexp.io import read_conllu

DATA = Path(__file__).parent / "data"


def read_tsv(path: Path) -> Tuple[List[str], List[str]]:
    """(styles, texts) of a ``style<TAB>text`` file (``#`` lines are comments)."""
    lines = [
        line for line in path.read_text(encoding="utf-8").splitlines() if line.strip() and not line.startswith("#")
    ]
    return [line.split("\t", 1)[0] for line in lines], [line.split("\t", 1)[1].strip() for line in lines]


def run(nlp, texts: Sequence[str], encoder: Optional[str]) -> SentenceSignals:
    """Each text as one sentence through the pipeline (``sentence_signals``: the vectors in
    ``doc.tensor`` once the whole pipeline has run, what ``tree_expectations`` reads), or with
    ``encoder`` the vectors that component writes."""
    out = sentence_signals(nlp, text_docs(nlp, texts))
    if encoder:
        with nlp.select_pipes(enable=[encoder]):
            out.vectors = [doc.tensor.astype(numpy.float32) for doc in nlp.pipe(texts, batch_size=128)]
    return out


def cost(reference: NoveltyReference, done: SentenceSignals, repeats: int = 3) -> Dict[str, float]:
    """CPU seconds per 1,000 sentences (best of ``repeats``) of the novelty of ``done``'s
    sentences one product per sentence (as before) and one per batch of 128 Docs (what
    ``tree_expectations`` does), and of the domain model's features and probability."""
    spans = [(tensor, 0, len(tensor)) for tensor in done.vectors]
    per_1000 = 1000.0 / max(len(spans), 1)
    domain = reference.domain

    def best(work) -> float:
        times = []
        for _ in range(repeats):
            start = time.process_time()
            work()
            times.append(time.process_time() - start)
        return round(min(times) * per_1000, 4)

    return {
        "novelty_per_sentence_s": best(lambda: [span_novelty(reference, *span) for span in spans]),
        "novelty_batched_s": best(
            lambda: [spans_novelty(reference, spans[i : i + 128]) for i in range(0, len(spans), 128)]
        ),
        "out_of_domain_s": best(
            lambda: [
                domain.sentence_probability(w, p, 0.1, e) if domain else None
                for w, p, e in zip(done.words, done.pos, done.entropy_per_word)
            ]
        ),
    }


def rounded(table: Dict[str, Dict[str, float]]) -> Dict[str, Dict[str, float]]:
    return {k: {m: round(v, 4) for m, v in row.items()} for k, row in table.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--train", required=True, help="in-domain text to fit the reference and lexicon on (CoNLL-U)")
    parser.add_argument("--dev", required=True, help="in-domain CoNLL-U to fit the domain model on")
    parser.add_argument("--test", required=True, help="in-domain CoNLL-U to evaluate on")
    parser.add_argument("--ood-dev", default=str(DATA / "ood_dev_sentences.tsv"))
    parser.add_argument("--ood", default=str(DATA / "ood_sentences.tsv"))
    parser.add_argument("--train-sentences", type=int, default=0, help="first N sentences of --train (0: all)")
    parser.add_argument("--size", type=int, default=2048, help="reference directions")
    parser.add_argument("--reference-from", default=None, help="take the novelty reference of this calibration map")
    parser.add_argument(
        "--encoder",
        default=None,
        help="read this component's doc.tensor (default: the pipeline's last, as the component does)",
    )
    parser.add_argument("--write-map", default=None, help="add the reference to the calibration map in this JSON file")
    args = parser.parse_args()
    for name in ("train", "dev", "test", "ood_dev", "ood", "reference_from"):
        value = getattr(args, name)
        if value is not None and not Path(value).is_file():
            sys.exit(f"--{name.replace('_', '-')}: no such file: {value}")
    torch.set_num_threads(1)
    start = time.process_time()
    nlp = spacy_treexp.load(config={"components.biaffine_parser.members": 0})
    nlp.add_pipe("tree_expectations")
    train = list(read_conllu(args.train))
    styles, ood = read_tsv(Path(args.ood))
    texts = {
        "dev": [s.text or " ".join(s.forms) for s in read_conllu(args.dev)],
        "test": [s.text or " ".join(s.forms) for s in read_conllu(args.test)],
        "ood_dev": read_tsv(Path(args.ood_dev))[1],
        "ood": ood,
    }
    runs = {name: run(nlp, values, args.encoder) for name, values in texts.items()}
    if args.reference_from:
        old = CalibrationMap.from_disk(args.reference_from).novelty
        if old is None:
            sys.exit(f"--reference-from: {args.reference_from} has no novelty reference")
        reference = NoveltyReference(old.centre, old.rows)
        report: Dict = {
            "reference": {"from": Path(args.reference_from).name, "size": len(old.rows), "width": old.width}
        }
    else:
        train_texts = [s.text or " ".join(s.forms) for s in train][: args.train_sentences or None]
        vectors = run(nlp, train_texts, args.encoder).vectors
        reference = fit_novelty(numpy.concatenate(vectors), size=args.size)
        report = {
            "reference": {
                "tokens": int(sum(len(v) for v in vectors)),
                "sentences": len(train_texts),
                "size": args.size,
                "width": reference.width,
                "encoder": args.encoder or "doc.tensor after the pipeline",
            }
        }
    lexicon = lexicon_counts(s.forms for s in train)
    features: Dict[str, list] = {}
    novelty: Dict[str, numpy.ndarray] = {}
    for name, done in runs.items():
        novelty[name] = numpy.array([reference.sentence_novelty(v) for v in done.vectors])
        features[name] = [
            sentence_features(w, p, v, e, lexicon)
            for w, p, v, e in zip(done.words, done.pos, novelty[name], done.entropy_per_word)
        ]
    domain = fit_domain(features["dev"], features["ood_dev"], lexicon)
    reference = NoveltyReference(reference.centre, reference.rows, domain)
    report["domain"] = {"lexicon_words": len(lexicon), "features": len(domain.knots), "bias": round(domain.bias, 4)}
    for label, (inside, outside) in {
        "fit (dev vs ood_dev)": ("dev", "ood_dev"),
        "eval (test vs ood)": ("test", "ood"),
    }.items():
        y = numpy.r_[numpy.zeros(len(texts[inside]), bool), numpy.ones(len(texts[outside]), bool)]
        scores = {
            "novelty": numpy.r_[novelty[inside], novelty[outside]],
            "entropy_per_word": numpy.array(
                [numpy.nan if e is None else e for e in runs[inside].entropy_per_word + runs[outside].entropy_per_word]
            ),
            "out_of_domain": numpy.array([domain.probability(f) for f in features[inside] + features[outside]]),
        }
        report[label] = rounded(auroc_table(scores, y))
    per_style: Dict[str, Dict[str, float]] = {}
    test_scores = {
        "novelty": novelty["test"],
        "out_of_domain": numpy.array([domain.probability(f) for f in features["test"]]),
    }
    ood_scores = {
        "novelty": novelty["ood"],
        "out_of_domain": numpy.array([domain.probability(f) for f in features["ood"]]),
    }
    for style in sorted(set(styles)):
        chosen = numpy.array([s == style for s in styles])
        y = numpy.r_[numpy.zeros(len(texts["test"]), bool), numpy.ones(int(chosen.sum()), bool)]
        per_style[style] = {
            name: round(float(auroc(numpy.r_[test_scores[name], ood_scores[name][chosen]], y)), 3)
            for name in test_scores
        }
    report["eval per style"] = per_style
    report["cost"] = cost(reference, runs["test"])
    report["cpu_seconds"] = round(time.process_time() - start, 1)
    if args.write_map:
        calibration = CalibrationMap.from_disk(args.write_map)
        fit = dict(calibration.fit)
        if args.reference_from:  # the reference's own record stays; the domain model's is added
            fit["novelty"] = dict(CalibrationMap.from_disk(args.reference_from).fit.get("novelty", {}))
        else:
            fit["novelty"] = {
                "data": f"{len(train_texts)} sentences of {Path(args.train).name} (text only)",
                "command": "python benchmarks/ood_novelty.py --train TRAIN --dev DEV --test TEST --write-map MAP",
                **report["reference"],
            }
        fit["novelty"]["domain"] = {
            "data": f"lexicon: the forms of {Path(args.train).name}; fitted on {Path(args.dev).name} "
            f"({len(texts['dev'])} sentences, text) vs {Path(args.ood_dev).name} ({len(texts['ood_dev'])})",
            "command": "python benchmarks/ood_novelty.py --train TRAIN --dev DEV --test TEST "
            "[--reference-from MAP] --write-map MAP",
            "knots": 5,
            "l2": 1.0,
        }
        dataclasses.replace(calibration, novelty=reference, fit=fit).to_disk(args.write_map)
        report["wrote"] = args.write_map
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
