"""Out-of-domain detection (issue 21, part 4): encoder novelty
(``spacy_treexp.calibration.novelty``, how far a sentence's tok2vec vectors are from the
training data's) and the out-of-domain model built on it (``spacy_treexp.calibration.domain``,
``sent._.out_of_domain``: a subset of novelty, tree entropy per word, the words' familiarity,
surface and parts of speech), beside the tree entropy per word.

Nothing is fitted on the evaluation sets: the novelty reference is fitted on the tok2vec
vectors of ``--train`` (its first ``--train-sentences``, default all; unlabelled text, the
parser's own training data), or taken from the map ``--reference-from``; the lexicon is the
word forms of all of ``--train``; the domain model is fitted on ``--dev`` (in domain) against
``--ood-dev``, by default the twenty-four out-of-domain sets we wrote before the latest
(``benchmarks/data/ood_dev_sentences.tsv``, ``ood_sentences.tsv``, ``ood_blind_sentences.tsv``,
``ood_blind2_sentences.tsv``, ``ood_blind3_sentences.tsv``, ``ood_fit1_sentences.tsv`` to
``ood_fit3_sentences.tsv``, ``ood_blind4_sentences.tsv``, ``ood_fit4_sentences.tsv`` to
``ood_fit7_sentences.tsv``, ``ood_blind5_sentences.tsv``, ``ood_blind6_sentences.tsv``,
``ood_fit8_sentences.tsv`` to ``ood_fit10_sentences.tsv``, ``ood_blind7_sentences.tsv``,
``ood_fit11_sentences.tsv`` to ``ood_fit15_sentences.tsv``: 3,010 sentences, 288 styles; the
shipped models were fitted on the first thirteen, 1,690 sentences and 156 styles, until blind7
showed that the five sets added then made them better, and on the first eighteen until blind8
showed the same of the six added next; a style named in several files is
one style) with ``fit_domain``'s
defaults, or, with ``--select``, with the features, knots and ridge that score best by
leave-one-style-out cross-validation on those sets alone (for each OOD style: fit on one half
of ``--dev`` against the other styles, score the other half against the held-out style, and
the other way round; the mean AUROC over styles; the candidates are listed below, fixed
before their results were seen). With ``--test``, the AUROC is then measured on ``--test``
against ``--ood`` (by default ``benchmarks/data/ood_blind8_sentences.tsv``, 120 sentences in
12 styles written after the others by a writer who had read none of them nor any result),
overall and per style. Every side goes through the pipeline's tokenizer and tagger, one
sentence per Doc.

    OMP_NUM_THREADS=1 python benchmarks/ood_novelty.py --train .../en_ewt-ud-train.conllu \
        --dev .../en_ewt-ud-dev.conllu [--test .../en_ewt-ud-test.conllu] [--select] \
        [--reference-from spacy_treexp/models/en_treexp_ewt/biaffine_parser/treexp_calibration.json] \
        [--write-map spacy_treexp/models/en_treexp_ewt/biaffine_parser/treexp_calibration.json]

The domain model also reads the sentence's mean token vector (``fit_domain``'s vector term, ridge
``--vector-l2``, by default ``DEFAULT_VECTOR_L2``; 0 leaves the term out): ``--select``'s candidates
fix the other settings without it, and the term is added in the final fit. The shipped model is
``fit_domain``'s defaults (the settings ``--select`` chose, all 18 features, 5 knots, ridge 1, and
the vector term with ridge 10, chosen by leave-one-fit-set-out cross-validation), written with
``--reference-from MAP --write-map MAP``.

``--sentence-encoder DIR`` also fits the opt-in model of ``tree_expectations``'s
``sentence_encoder`` (``novelty.encoder_domain``): the same features and settings, its vector
the mean token vector followed by the encoder's embedding of the sentence's text (ridge
``--encoder-l2``, by default ``DEFAULT_ENCODER_L2``); the shipped map was written with
``--train TRAIN --dev DEV --sentence-encoder all-MiniLM-L6-v2 --write-map MAP`` (the reference
fitted again on TRAIN: the same reference, so the same map byte for byte from the same fit sets;
without ``--sentence-encoder``, ``--write-map`` writes no such model).

The token vectors are ``doc.tensor`` once the whole pipeline has run (what
``tree_expectations`` reads for ``sent._.novelty``; in the shipped pipeline the tagger's
tok2vec writes it last), or with ``--encoder NAME`` that component's output (novelty only).
``--write-map`` stores the reference with its domain model in a calibration map file (the
shipped one: ``sent._.novelty`` and ``sent._.out_of_domain``); the shipped model's settings were
chosen with ``--reference-from MAP --select`` (no ``--test``).
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

from spacy_treexp.calibration import CalibrationMap
from spacy_treexp.calibration.domain import (
    BASE_FEATURES,
    DEFAULT_ENCODER_L2,
    DEFAULT_FEATURES,
    DEFAULT_KNOTS,
    DEFAULT_L2,
    DEFAULT_VECTOR_L2,
    FEATURES,
    DomainModel,
    SentenceSignals,
    fit_domain,
    lexicon_counts,
    sentence_features,
)
from spacy_treexp.calibration.language_model import WordLanguageModel
from spacy_treexp.calibration.novelty import NoveltyReference, fit_novelty, span_novelty, spans_novelty
from spacy_treexp.calibration.sentence_encoder import SentenceEncoder
from spacy_treexp.evaluation.epistemic import auroc_table
from spacy_treexp.evaluation.metrics import auroc
from spacy_treexp.evaluation.scores import sentence_signals, text_docs
from spacy_treexp.io import read_conllu
from spacy_treexp.pipeline.default_model import load_named

DATA = Path(__file__).parent / "data"

# --select: the candidates, fixed before any of their results was seen. Feature sets (in the
# order of FEATURES): entropy_per_word alone; uncertainty (entropy_per_word, novelty,
# log_length); + lexicon (unseen, rare); + lexicon + UPOS shares (= all but the surface
# features); + lexicon + surface (= all but the UPOS shares); all 17 (the model shipped before).
# Added with word_surprisal (the word trigram model of --train's text, tokenized by the
# pipeline): + lexicon + word_surprisal, and all 18.
# Each with 2 knots (linear terms) and 5, and ridge 1, 10 and 100: 48 candidates. The raw
# entropy_per_word (no fit) is a reference row. Chosen: the highest mean leave-one-style-out
# AUROC; a candidate within SELECT_TIE of it that is simpler (fewer features, then fewer
# knots, then a stronger ridge) wins the tie.
UNCERTAINTY = ("entropy_per_word", "novelty", "log_length")
LEXICON = ("unseen", "rare")
UPOS = ("pronouns", "verbs", "nouns", "determiners", "no_verb")
SURFACE = ("capitalised", "lower_start", "final_punct", "word_length", "digits", "symbols", "all_caps")
FEATURE_SETS = {
    "entropy": ("entropy_per_word",),
    "uncertainty": UNCERTAINTY,
    "+lexicon": UNCERTAINTY + LEXICON,
    "+lexicon+word_surprisal": UNCERTAINTY + LEXICON + ("word_surprisal",),
    "+lexicon+upos": UNCERTAINTY + LEXICON + UPOS,
    "+lexicon+surface": UNCERTAINTY + LEXICON + SURFACE,
    "all but word_surprisal": BASE_FEATURES,
    "all": FEATURES,
}
SELECT_KNOTS = (2, 5)
SELECT_L2 = (1.0, 10.0, 100.0)
SELECT_TIE = 0.005


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
                domain.sentence_probability(w, p, 0.1, e, v) if domain else None
                for w, p, e, v in zip(done.words, done.pos, done.entropy_per_word, done.vectors)
            ]
        ),
    }


def ordered(features: Sequence[str]) -> Tuple[str, ...]:
    return tuple(name for name in FEATURES if name in features)


def halves(n: int, seed: int = 0) -> Tuple[numpy.ndarray, numpy.ndarray]:
    """A fixed random split of ``n`` in-domain sentences into two halves (indices)."""
    order = numpy.random.default_rng(seed).permutation(n)
    return numpy.sort(order[: n // 2]), numpy.sort(order[n // 2 :])


def leave_one_style_out(
    inside: List[Dict[str, float]],
    outside: List[Dict[str, float]],
    styles: Sequence[str],
    lexicon: Dict[str, int],
    features: Optional[Sequence[str]],
    knots: int = 0,
    l2: float = 0.0,
    language_model: Optional[WordLanguageModel] = None,
) -> Dict[str, float]:
    """Per out-of-domain style, the AUROC of a model fitted without it on unseen text: the
    in-domain rows split in two fixed halves; for each half, fit on it against the other
    styles' rows and score the held-out half against the style's; the mean of the two.
    ``features`` None: the raw ``entropy_per_word`` (no fit)."""
    split = halves(len(inside))
    out: Dict[str, float] = {}
    for style in sorted(set(styles)):
        held = [row for row, s in zip(outside, styles) if s == style]
        rest = [row for row, s in zip(outside, styles) if s != style]
        aurocs = []
        for fit_part, eval_part in (split, split[::-1]):
            evaluated = [inside[i] for i in eval_part] + held
            if features is None:
                scores = [row["entropy_per_word"] for row in evaluated]
            else:
                model = fit_domain([inside[i] for i in fit_part], rest, lexicon, knots, l2, features, language_model)
                scores = [model.logit(row) for row in evaluated]
            y = numpy.r_[numpy.zeros(len(eval_part), bool), numpy.ones(len(held), bool)]
            aurocs.append(auroc(numpy.array(scores), y))
        out[style] = float(numpy.mean(aurocs))
    return out


def select(
    inside: List[Dict[str, float]],
    outside: List[Dict[str, float]],
    styles: Sequence[str],
    lexicon: Dict[str, int],
    language_model: WordLanguageModel,
) -> Tuple[Dict[str, Dict], Tuple[Tuple[str, ...], int, float]]:
    """The leave-one-style-out table of every candidate (mean over styles, the worst style)
    and the chosen (features, knots, l2) (see the candidates above; printed to stderr)."""
    table: Dict[str, Dict] = {}
    settings: Dict[str, Tuple[Tuple[str, ...], int, float]] = {}

    def summary(per_style: Dict[str, float]) -> Dict:
        worst = sorted(per_style, key=per_style.__getitem__)
        return {
            "mean": round(float(numpy.mean(list(per_style.values()))), 4),
            "worst": {style: round(per_style[style], 3) for style in worst[:3]},
        }

    table["entropy_per_word (raw score, reference)"] = summary(
        leave_one_style_out(inside, outside, styles, lexicon, None)
    )
    for set_name, features in FEATURE_SETS.items():
        for knots in SELECT_KNOTS:
            for l2 in SELECT_L2:
                name = f"{set_name} ({len(features)}), knots {knots}, ridge {l2:g}"
                per_style = leave_one_style_out(
                    inside, outside, styles, lexicon, ordered(features), knots, l2, language_model
                )
                table[name] = summary(per_style) | {"per_style": {k: round(v, 3) for k, v in per_style.items()}}
                settings[name] = (ordered(features), knots, l2)
                print(f"{table[name]['mean']:.4f}  worst {table[name]['worst']}  {name}", file=sys.stderr, flush=True)
    best = max(table[name]["mean"] for name in settings)
    tied = [name for name in settings if table[name]["mean"] >= best - SELECT_TIE]
    chosen = min(tied, key=lambda name: (len(settings[name][0]), settings[name][1], -settings[name][2]))
    table[chosen]["chosen"] = True
    return table, settings[chosen]


def rounded(table: Dict[str, Dict[str, float]]) -> Dict[str, Dict[str, float]]:
    return {k: {m: round(v, 4) for m, v in row.items()} for k, row in table.items()}


def probabilities(
    domain: DomainModel, features: Sequence[Optional[Dict[str, float]]], means: Sequence[Optional[numpy.ndarray]]
) -> numpy.ndarray:
    """The domain model's probability of each sentence (its features and mean vector), NaN for none."""
    values = [domain.probability(f, m) for f, m in zip(features, means)]
    return numpy.array([numpy.nan if p is None else p for p in values])


def per_style_table(
    domain: DomainModel,
    novelty: Dict[str, numpy.ndarray],
    features: Dict[str, List[Optional[Dict[str, float]]]],
    means: Dict[str, List[Optional[numpy.ndarray]]],
    texts: Dict[str, List[str]],
    styles: Sequence[str],
) -> Dict[str, Dict[str, float]]:
    """Per style of the evaluation set, the AUROC of novelty and out_of_domain against --test."""
    per_style: Dict[str, Dict[str, float]] = {}
    test_scores = {
        "novelty": novelty["test"],
        "out_of_domain": probabilities(domain, features["test"], means["test"]),
    }
    ood_scores = {
        "novelty": novelty["ood"],
        "out_of_domain": probabilities(domain, features["ood"], means["ood"]),
    }
    for style in sorted(set(styles)):
        chosen = numpy.array([s == style for s in styles])
        y = numpy.r_[numpy.zeros(len(texts["test"]), bool), numpy.ones(int(chosen.sum()), bool)]
        per_style[style] = {
            name: round(float(auroc(numpy.r_[test_scores[name], ood_scores[name][chosen]], y)), 3)
            for name in test_scores
        }
    return per_style


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--model", default=None, help="spaCy pipeline (default: the shipped one; or en_treexp_ewt_ensemble)"
    )
    parser.add_argument("--train", required=True, help="in-domain text to fit the reference and lexicon on (CoNLL-U)")
    parser.add_argument("--dev", required=True, help="in-domain CoNLL-U to fit the domain model on")
    parser.add_argument("--test", default=None, help="in-domain CoNLL-U to evaluate on (none: no evaluation)")
    parser.add_argument(
        "--ood-dev",
        nargs="+",
        default=[
            str(DATA / name)
            for name in (
                "ood_dev_sentences.tsv",
                "ood_sentences.tsv",
                "ood_blind_sentences.tsv",
                "ood_blind2_sentences.tsv",
                "ood_blind3_sentences.tsv",
                "ood_fit1_sentences.tsv",
                "ood_fit2_sentences.tsv",
                "ood_fit3_sentences.tsv",
                "ood_blind4_sentences.tsv",
                "ood_fit4_sentences.tsv",
                "ood_fit5_sentences.tsv",
                "ood_fit6_sentences.tsv",
                "ood_fit7_sentences.tsv",
                "ood_blind5_sentences.tsv",
                "ood_blind6_sentences.tsv",
                "ood_fit8_sentences.tsv",
                "ood_fit9_sentences.tsv",
                "ood_fit10_sentences.tsv",
                "ood_blind7_sentences.tsv",
                "ood_fit11_sentences.tsv",
                "ood_fit12_sentences.tsv",
                "ood_fit13_sentences.tsv",
                "ood_fit14_sentences.tsv",
                "ood_fit15_sentences.tsv",
            )
        ],
        help="out-of-domain sentences to fit on (one or more style<TAB>text files; a style named in several is one style)",
    )
    parser.add_argument("--ood", default=str(DATA / "ood_blind8_sentences.tsv"))
    parser.add_argument("--train-sentences", type=int, default=0, help="first N sentences of --train (0: all)")
    parser.add_argument("--size", type=int, default=2048, help="reference directions")
    parser.add_argument("--reference-from", default=None, help="take the novelty reference of this calibration map")
    parser.add_argument(
        "--encoder",
        default=None,
        help="read this component's doc.tensor (default: the pipeline's last, as the component does)",
    )
    parser.add_argument("--write-map", default=None, help="add the reference to the calibration map in this JSON file")
    parser.add_argument(
        "--vector-l2",
        type=float,
        default=DEFAULT_VECTOR_L2,
        help="ridge of the domain model's term on the sentence's mean token vector (default: the shipped "
        "model's; 0: no such term, the model before it)",
    )
    parser.add_argument(
        "--sentence-encoder",
        default=None,
        help="a local sentence encoder directory (all-MiniLM-L6-v2 for the shipped map): also fit the opt-in "
        "out-of-domain model that reads its embedding (novelty.encoder_domain; tree_expectations' sentence_encoder)",
    )
    parser.add_argument(
        "--encoder-l2",
        type=float,
        default=DEFAULT_ENCODER_L2,
        help="ridge of the opt-in model's vector term (the mean vector and the embedding, standardised)",
    )
    parser.add_argument(
        "--select",
        action="store_true",
        help="choose the domain model's features, knots and ridge by leave-one-style-out AUROC on "
        "--dev vs --ood-dev (the candidates in this script); without it, fit_domain's defaults",
    )
    args = parser.parse_args()
    for name in ("train", "dev", "test", "ood_dev", "ood", "reference_from"):
        for value in getattr(args, name) if name == "ood_dev" else [getattr(args, name)]:
            if value is not None and not Path(value).is_file():
                sys.exit(f"--{name.replace('_', '-')}: no such file: {value}")
    torch.set_num_threads(1)
    start = time.process_time()
    nlp = load_named(args.model, config={"components.biaffine_parser.members": 0})
    nlp.add_pipe("tree_expectations")
    train = list(read_conllu(args.train))
    styles, ood = read_tsv(Path(args.ood))
    dev_styles, ood_dev = [], []
    for path in args.ood_dev:
        file_styles, file_texts = read_tsv(Path(path))
        dev_styles += file_styles
        ood_dev += file_texts
    texts = {"dev": [s.text or " ".join(s.forms) for s in read_conllu(args.dev)], "ood_dev": ood_dev}
    if args.test:
        texts |= {"test": [s.text or " ".join(s.forms) for s in read_conllu(args.test)], "ood": ood}
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
    language_model = WordLanguageModel.fit(
        [token.text for token in doc] for doc in nlp.tokenizer.pipe(s.text or " ".join(s.forms) for s in train)
    )
    features: Dict[str, list] = {}
    novelty: Dict[str, numpy.ndarray] = {}
    means = {name: done.mean_vectors() for name, done in runs.items()}
    for name, done in runs.items():
        novelty[name] = numpy.array([reference.sentence_novelty(v) for v in done.vectors])
        features[name] = [
            sentence_features(w, p, v, e, lexicon, language_model)
            for w, p, v, e in zip(done.words, done.pos, novelty[name], done.entropy_per_word)
        ]
    chosen: Tuple[Tuple[str, ...], int, float] = (DEFAULT_FEATURES, DEFAULT_KNOTS, DEFAULT_L2)
    table: Dict[str, Dict] = {}
    if args.select:
        kept = [(row, style) for row, style in zip(features["ood_dev"], dev_styles) if row is not None]
        table, chosen = select(
            [row for row in features["dev"] if row is not None],
            [row for row, _ in kept],
            [style for _, style in kept],
            lexicon,
            language_model,
        )
        report["select (leave one style out, dev halves vs ood_dev)"] = table
    vector_l2 = args.vector_l2 or None

    def fitted_rows(
        name: str, vectors: Dict[str, List[Optional[numpy.ndarray]]], needed: bool
    ) -> Tuple[List[Dict[str, float]], List[Optional[numpy.ndarray]]]:
        """Set ``name``'s feature rows and ``vectors`` of the sentences a fit can use: with
        features, and with a vector where the model reads one (``needed``)."""
        kept = [
            (f, v) for f, v in zip(features[name], vectors[name]) if f is not None and (v is not None or not needed)
        ]
        return [f for f, _ in kept], [v for _, v in kept]

    inside_rows, inside_means = fitted_rows("dev", means, bool(vector_l2))
    outside_rows, outside_means = fitted_rows("ood_dev", means, bool(vector_l2))
    reads_surprisal = "word_surprisal" in chosen[0]
    domain = fit_domain(
        inside_rows,
        outside_rows,
        lexicon,
        chosen[1],
        chosen[2],
        chosen[0],
        language_model if reads_surprisal else None,
        **(
            {"inside_vectors": inside_means, "outside_vectors": outside_means, "vector_l2": vector_l2}
            if vector_l2
            else {}
        ),
    )
    encoder_domain, joint = None, {}
    if args.sentence_encoder:  # the opt-in model: the same fit, its vector the mean vector + the embedding
        encoder = SentenceEncoder(args.sentence_encoder)
        embedded = {}
        for name, values in texts.items():
            started = time.process_time()
            embedded[name] = encoder.embed(values)
            report.setdefault("encoder_cpu_s_per_1000", {})[name] = round(
                1000 * (time.process_time() - started) / max(len(values), 1), 3
            )
        joint = {
            name: [None if m is None else numpy.r_[m, e] for m, e in zip(means[name], embedded[name])] for name in texts
        }
        joint_inside, joint_inside_vectors = fitted_rows("dev", joint, True)
        joint_outside, joint_outside_vectors = fitted_rows("ood_dev", joint, True)
        encoder_domain = fit_domain(
            joint_inside,
            joint_outside,
            lexicon,
            chosen[1],
            chosen[2],
            chosen[0],
            language_model if reads_surprisal else None,
            inside_vectors=joint_inside_vectors,
            outside_vectors=joint_outside_vectors,
            vector_l2=args.encoder_l2,
            embedding_width=encoder.width,
        )
        # the encoder's fingerprint: the component refuses another encoder of the same width (TXE030)
        encoder_domain = dataclasses.replace(encoder_domain, embedding_fingerprint=tuple(encoder.fingerprint))
        report["encoder_domain"] = {
            "encoder": Path(args.sentence_encoder).name,
            "embedding_width": encoder.width,
            "vector_l2": args.encoder_l2,
        }
    reference = NoveltyReference(reference.centre, reference.rows, domain, encoder_domain)
    report["domain"] = {
        "lexicon_words": len(lexicon),
        **({"language_model_ngrams": len(language_model.counts)} if reads_surprisal else {}),
        "features": list(domain.features),
        "knots": chosen[1],
        "l2": chosen[2],
        "vector_l2": vector_l2,
        "bias": round(domain.bias, 4),
    }
    evaluations = {"fit (dev vs ood_dev)": ("dev", "ood_dev")}
    if args.test:
        evaluations["eval (test vs ood)"] = ("test", "ood")
    for label, (inside, outside) in evaluations.items():
        y = numpy.r_[numpy.zeros(len(texts[inside]), bool), numpy.ones(len(texts[outside]), bool)]
        scores = {
            "novelty": numpy.r_[novelty[inside], novelty[outside]],
            "entropy_per_word": numpy.array(
                [numpy.nan if e is None else e for e in runs[inside].entropy_per_word + runs[outside].entropy_per_word]
            ),
            "out_of_domain": probabilities(
                domain, features[inside] + features[outside], means[inside] + means[outside]
            ),
        }
        if encoder_domain is not None:
            scores["out_of_domain with the sentence encoder"] = probabilities(
                encoder_domain, features[inside] + features[outside], joint[inside] + joint[outside]
            )
        report[label] = rounded(auroc_table(scores, y))
    if args.test:
        report["eval per style"] = per_style_table(domain, novelty, features, means, texts, styles)
    report["cost"] = cost(reference, runs["test" if args.test else "dev"])
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
            "data": f"lexicon: the forms of {Path(args.train).name}"
            + ("; word trigram model: its text, tokenized by the pipeline" if reads_surprisal else "")
            + f"; fitted on {Path(args.dev).name} "
            f"({len(texts['dev'])} sentences, text) vs {' + '.join(Path(p).name for p in args.ood_dev)} "
            f"({len(texts['ood_dev'])}, {len(set(dev_styles))} styles)",
            "command": "python benchmarks/ood_novelty.py --train TRAIN --dev DEV [--reference-from MAP] "
            + ("--select " if args.select else "")
            + (f"--vector-l2 {args.vector_l2:g} " if args.vector_l2 != DEFAULT_VECTOR_L2 else "")
            + "--write-map MAP",
            "features": list(domain.features),
            "knots": chosen[1],
            "l2": chosen[2],
            **(
                {
                    "vector_l2": vector_l2,
                    "vector": "the sentence's mean doc.tensor row (the vectors novelty reads); its ridge "
                    "chosen by leave-one-fit-set-out cross-validation (spacy_treexp.calibration.domain.DEFAULT_VECTOR_L2)",
                }
                if vector_l2
                else {}
            ),
            **(
                {
                    "chosen by": "--select: leave-one-style-out AUROC on the dev halves vs ood_dev, mean over "
                    f"styles {next(v['mean'] for v in table.values() if v.get('chosen'))}"
                }
                if args.select
                else {
                    "chosen by": "fit_domain's defaults (what --select chose on these sets: all 18 features, "
                    "5 knots, ridge 1)"
                }
            ),
        }
        if encoder_domain is not None:
            fit["novelty"]["encoder_domain"] = {
                "data": fit["novelty"]["domain"]["data"],
                "encoder": f"{Path(args.sentence_encoder).name}: its mean-pooled, unit-length embedding of each "
                "sentence's text (spacy_treexp.calibration.sentence_encoder)",
                "command": "python benchmarks/ood_novelty.py --train TRAIN --dev DEV [--reference-from MAP] "
                "--sentence-encoder DIR --write-map MAP",
                "vector_l2": args.encoder_l2,
                "embedding_width": encoder_domain.embedding_width,
            }
        else:  # --reference-from's record of a model this map no longer carries
            fit["novelty"].pop("encoder_domain", None)
        dataclasses.replace(calibration, novelty=reference, fit=fit).to_disk(args.write_map)
        report["wrote"] = args.write_map
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
