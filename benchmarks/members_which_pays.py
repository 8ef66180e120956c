"""Which ensemble members pay (issue 21, part 3): the two independently trained parsers as
the K = 2 members of a mixture, against the MC-dropout members of ``biaffine_parser``.

Members compared, each a mixture of tree distributions (``spacy_treexp.TreeMixture``):

* ``models``: the shipped pipeline's ``biaffine_parser`` and the head for en_core_web_sm
  (``en_core_web_sm_head``, the ensemble's ``second_parser``), each run as its own pipeline
  on the same words and each **calibrated by its own map** (the shipped map; the head's own
  map), equal weights; ``models_raw`` the same on their raw scores. The two parsers were
  trained apart (other encoders, other inputs), so this is the strongest "checkpoint
  ensemble" the package has;
* ``head_2``: the default 2 MC-dropout members (``member_kind = "head"``);
* ``full_<K>``: ``--full-members`` MC-dropout members that rerun the BiLSTM
  (``member_kind = "full"``).

Measured, on the CoNLL-U file (gold tokens and sentences, e.g. EWT test) unless said:

1. **Sentence risk**: AUROC for "the shipped parser's tree has a wrong head" of the
   mixture's ``mutual_information`` (the component's estimator: one tree of the mixture,
   seeded per sentence; for ``models`` also from ``--mi-samples`` trees), per word, and, for
   ``models``, the mixture's error probability 1 − p_mix(parse); beside the shipped parser's
   own ``error_probability`` (no members).
2. **Out of domain**: AUROC of the mutual information per word (and the mean head mutual
   information) telling ``--ood`` (``style<TAB>text``) from the CoNLL-U file's sentences, both
   as raw text through the shipped tokenizer, one sentence per Doc (the head reads the same
   words); ``entropy_per_word`` of the shipped parser beside them.
3. **Per word**: AUROC of ``head_mutual_information`` for "this word's head is wrong" (the
   shipped parser's tree, every word), beside 1 − the head's marginal (no members).
4. **Cost**: CPU seconds per 1,000 words of the whole pipeline on the raw texts of the first
   ``--timing-sentences`` sentences (one torch thread; best of ``--repeats`` interleaved
   runs): the shipped pipeline without members, with the MC-dropout members, and, for
   ``models``, the shipped pipeline plus the head (tok2vec and parser on copies of the Docs),
   both parsers' maps and the mixture (mutual information and head mutual information);
   beside them ``product``, the ensemble pipeline (``en_treexp_ewt_ensemble``: both parsers,
   their product, no mixture).

95% bootstrap intervals resample sentences (sentence scores) or words (per word); the
``*_paired`` entries give differences of AUROCs with intervals from the same resamples.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/members_which_pays.py \
        --conllu .../en_ewt-ud-test.conllu --ood benchmarks/data/ood_blind4_sentences.tsv \
        > docs/eval_ewt/members_which_pays.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, Sequence, Tuple

import numpy
import torch
from epistemic import annotate, calibrated_arcs, gold_docs, pipeline, read_ood, rounded, score_records, senters
from spacy.tokens import Doc

from spacy_treexp.annotate.batching import length_buckets
from spacy_treexp.annotate.core import sentence_seed
from spacy_treexp.calibration.map import calibrate_sentences
from spacy_treexp.engine import TreeMixture
from spacy_treexp.evaluation.epistemic import auroc_table, has_attachment_error, parse_log_probs, score_table
from spacy_treexp.evaluation.metrics import auroc
from spacy_treexp.evaluation.run import load_spacy
from spacy_treexp.evaluation.scores import text_docs
from spacy_treexp.io import read_conllu
from spacy_treexp.pipeline.default_model import ENSEMBLE_NAME, STOCK_HEAD_NAME

SEED = 0
#: The differences reported with a paired bootstrap interval: (score a, score b).
RISK_PAIRS = (
    ("models: mixture_error_probability", "single: error_probability"),
    ("models: mixture_error_probability", "single: error_probability_at_T1"),
    ("models: mutual_information", "full: mutual_information"),
    ("models: mutual_information", "head_2: mutual_information"),
)
WORD_PAIRS = (
    ("models: head_mutual_information", "full: head_mutual_information"),
    ("models: head_mutual_information", "single: 1 - head marginal"),
)
OOD_PAIRS = (
    ("models: mutual_information_per_word", "full: mutual_information_per_word"),
    ("models: mutual_information_per_word", "head_2: mutual_information_per_word"),
)


def mixture_scores(pairs: Sequence[numpy.ndarray], heads: Sequence[numpy.ndarray], samples: int) -> Dict:
    """Per sentence, from its members' arc scores ``(K, n+1, n+1)`` (equal weights) and the
    parse ``heads`` ``(n,)``: the mutual information from 1 and from ``samples`` trees of the
    mixture (seeded per sentence), the mixture's error probability 1 − p_mix(parse) and the
    exact head mutual information of each word ``(n,)``; float32 members, as the core."""
    n_sent = len(pairs)
    mi1, mis, error = numpy.zeros(n_sent), numpy.zeros(n_sent), numpy.zeros(n_sent)
    head_mi: List[numpy.ndarray] = [numpy.zeros(0)] * n_sent
    for index in length_buckets([p.shape[-1] - 1 for p in pairs], 256):
        k = pairs[index[0]].shape[0]
        size = max(pairs[i].shape[-1] for i in index)
        scores = numpy.zeros((len(index), k, size, size), dtype=numpy.float32)
        parse = numpy.zeros((len(index), size), dtype=numpy.int64)
        for b, i in enumerate(index):
            n1 = pairs[i].shape[-1]
            scores[b, :, :n1, :n1] = pairs[i]
            parse[b, 1:n1] = heads[i]
        lengths = torch.tensor([pairs[i].shape[-1] - 1 for i in index])
        mixture = TreeMixture(torch.from_numpy(scores), None, lengths)
        for count, out in ((1, mi1), (samples, mis)):
            generators = [torch.Generator().manual_seed(sentence_seed(SEED, count, str(i))) for i in index]
            out[index] = mixture.mutual_information(count, generator=generators)[0].numpy()
        error[index] = -numpy.expm1(mixture.log_prob(torch.from_numpy(parse)).numpy())
        word_mi = mixture.head_mutual_information().numpy()
        for b, i in enumerate(index):
            head_mi[i] = word_mi[b, 1 : pairs[i].shape[-1]]
    return {"mi_1": mi1, f"mi_{samples}": mis, "error_probability": error, "head_mi": head_mi}


def paired(
    scores: Dict[str, numpy.ndarray], pairs: Sequence[Tuple[str, str]], positive: numpy.ndarray, n_boot: int = 1000
) -> Dict[str, Dict[str, float]]:
    """AUROC(a) − AUROC(b) of each pair of ``scores`` for ``positive``, with a 95% percentile
    interval from the same bootstrap resamples for both (paired)."""
    rng = numpy.random.default_rng(SEED)
    draws = [rng.integers(0, len(positive), len(positive)) for _ in range(n_boot)]
    draws = [d for d in draws if 0 < positive[d].sum() < len(d)]
    out = {}
    for a, b in pairs:
        diff = [auroc(scores[a][d], positive[d]) - auroc(scores[b][d], positive[d]) for d in draws]
        low, high = numpy.percentile(diff, [2.5, 97.5])
        point = auroc(scores[a], positive) - auroc(scores[b], positive)
        out[f"{a} - {b}"] = {"difference": round(point, 4), "low": round(float(low), 4), "high": round(float(high), 4)}
    return out


def on_docs(nlp, docs: Sequence[Doc]) -> Tuple[list, List[numpy.ndarray], List[numpy.ndarray]]:
    """(records, raw arc scores, calibrated arc scores) of one-sentence Docs."""
    records, arcs, done = annotate(nlp, docs)
    return records, arcs, calibrated_arcs(nlp, done)


def copies(nlp, docs: Sequence[Doc]) -> List[Doc]:
    """The same words as one-sentence Docs in ``nlp``'s vocabulary."""
    out = []
    for doc in docs:
        words = [t.text for t in doc]
        out.append(
            Doc(
                nlp.vocab,
                words=words,
                spaces=[bool(t.whitespace_) for t in doc],
                sent_starts=[True] + [False] * (len(words) - 1),  # type: ignore[arg-type]
            )
        )
    return out


def member_signals(variants: Dict, samples: int, heads: Sequence[numpy.ndarray]) -> Dict[str, Dict]:
    """Per variant: sentence scores and per-word head mutual information. ``variants`` maps a
    name to ``("mc", records)`` or ``("models", [arcs of member 1, arcs of member 2])``."""
    out: Dict[str, Dict] = {}
    for name, (kind, value) in variants.items():
        if kind == "mc":
            table = score_table(value)
            out[name] = {
                "mutual_information": table["mutual_information"],
                "mutual_information_per_word": table["mutual_information_per_word"],
                "head_mutual_information_mean": table["head_mutual_information_mean"],
                "head_mi": [r.head_mutual_information for r in value],
            }
        else:
            pairs = [numpy.stack(members) for members in zip(*value)]
            mix = mixture_scores(pairs, heads, samples)
            length = numpy.array([len(h) for h in heads], dtype=float)
            out[name] = {
                "mutual_information": mix["mi_1"],
                "mutual_information_per_word": mix["mi_1"] / length,
                f"mutual_information_{samples}_trees": mix[f"mi_{samples}"],
                "head_mutual_information_mean": numpy.array([h.mean() for h in mix["head_mi"]]),
                "mixture_error_probability": mix["error_probability"],
                "head_mi": mix["head_mi"],
            }
    return out


def risk_and_words(pipes: Dict, sentences, samples: int) -> Dict:
    base = pipes["single"]
    records, raw, cal = on_docs(base, gold_docs(base, sentences))
    _, raw_b, cal_b = on_docs(pipes["head_parser"], gold_docs(pipes["head_parser"], sentences))
    heads = [r.heads for r in records]
    gold = [numpy.asarray(s.heads[1:]) for s in sentences]
    variants: Dict = {"models": ("models", [cal, cal_b]), "models_raw": ("models", [raw, raw_b])}
    same_parse = {}
    for name in ("head_2", "full"):
        if name in pipes:
            mc_records = annotate(pipes[name], gold_docs(pipes[name], sentences))[0]
            same_parse[name] = all(numpy.array_equal(a.heads, b.heads) for a, b in zip(mc_records, records))
            variants[name] = ("mc", mc_records)
    signals = member_signals(variants, samples, heads)
    wrong = has_attachment_error(heads, gold)
    own = score_table(records)
    sentence_scores = {
        "single: error_probability": own["error_probability"],
        "single: error_probability_at_T1": -numpy.expm1(parse_log_probs(cal, heads, 1.0)),
    }
    for name, values in signals.items():
        for key, column in values.items():
            if key != "head_mi":
                sentence_scores[f"{name}: {key}"] = column
    word_wrong = numpy.concatenate([h != g for h, g in zip(heads, gold)])
    word_scores = {"single: 1 - head marginal": numpy.concatenate([1.0 - r.head_prob for r in records])}
    for name, values in signals.items():
        word_scores[f"{name}: head_mutual_information"] = numpy.concatenate(values["head_mi"])
    return {
        "sentences": len(records),
        "words": int(word_wrong.size),
        "with_error": round(float(wrong.mean()), 4),
        "wrong_heads": round(float(word_wrong.mean()), 4),
        "mc_parse_same_as_single": same_parse,
        "risk_auroc": rounded(auroc_table(sentence_scores, wrong)),
        "risk_paired": paired(sentence_scores, [p for p in RISK_PAIRS if p[1] in sentence_scores], wrong),
        "word_auroc": rounded(auroc_table(word_scores, word_wrong)),
        "word_paired": paired(word_scores, [p for p in WORD_PAIRS if p[1] in word_scores], word_wrong),
    }


def out_of_domain(pipes: Dict, in_domain: Sequence[str], ood: Sequence[str], samples: int) -> Dict:
    base = pipes["single"]
    docs = list(text_docs(base, list(in_domain) + list(ood)))
    records, raw, cal = on_docs(base, docs)
    _, raw_b, cal_b = on_docs(pipes["head_parser"], copies(pipes["head_parser"], docs))
    variants: Dict = {"models": ("models", [cal, cal_b]), "models_raw": ("models", [raw, raw_b])}
    for name in ("head_2", "full"):
        if name in pipes:
            variants[name] = ("mc", annotate(pipes[name], list(text_docs(pipes[name], list(in_domain) + list(ood))))[0])
    signals = member_signals(variants, samples, [r.heads for r in records])
    positive = numpy.r_[numpy.zeros(len(in_domain), bool), numpy.ones(len(ood), bool)]
    scores = {"single: entropy_per_word": score_table(records)["entropy_per_word"]}
    for name, values in signals.items():
        for key in ("mutual_information_per_word", "head_mutual_information_mean"):
            scores[f"{name}: {key}"] = values[key]
        if name.startswith("models"):
            scores[f"{name}: mutual_information_{samples}_trees_per_word"] = values[
                f"mutual_information_{samples}_trees"
            ] / numpy.array([r.n for r in records], dtype=float)
    return {
        "in_domain": len(in_domain),
        "out_of_domain": len(ood),
        "auroc": rounded(auroc_table(scores, positive)),
        "paired": paired(scores, [p for p in OOD_PAIRS if p[1] in scores], positive),
    }


def models_pass(single, head_parser, texts: Sequence[str]) -> None:
    """What ``models`` costs beyond nothing: the shipped pipeline, the head (its own
    ``tree_expectations`` off) on copies of the Docs, both maps and the mixture."""
    with single.select_pipes(disable=senters(single)):
        docs = list(single.pipe(text_docs(single, texts), batch_size=256))
    heads = [r.heads for doc in docs for r in doc._.tree_expectations]
    cal = calibrated_arcs(single, docs)
    skip = senters(head_parser) + ["tree_expectations"]
    with head_parser.select_pipes(disable=skip):
        docs_b = list(head_parser.pipe(copies(head_parser, docs), batch_size=256))
    records_b = score_records(head_parser, docs_b)
    cal_b = [r.arc for r in calibrate_sentences(records_b, head_parser.get_pipe("tree_expectations").calibration)]
    pairs = [numpy.stack(members) for members in zip(cal, cal_b)]
    mixture_scores(pairs, heads, 1)


def speed(pipes: Dict, texts: Sequence[str], repeats: int) -> Dict:
    words = sum(len(doc) for doc in text_docs(pipes["single"], texts))

    def pipe(nlp) -> Callable[[], object]:
        return lambda: annotate(nlp, list(text_docs(nlp, texts)))

    runs = {name: pipe(pipes[name]) for name in ("single", "head_2", "full", "product") if name in pipes}
    runs["models"] = lambda: models_pass(pipes["single"], pipes["head_parser"], texts)
    for run in runs.values():
        run()  # warm up
    best = {name: float("inf") for name in runs}
    for _ in range(repeats):  # interleaved: the machine's load drifts
        for name, run in runs.items():
            start = time.process_time()
            run()
            best[name] = min(best[name], time.process_time() - start)
    return {
        "sentences": len(texts),
        "words": words,
        "cpu_seconds": {k: round(v, 3) for k, v in best.items()},
        "cpu_ms_per_1000_words": {k: round(1e6 * v / words, 1) for k, v in best.items()},
        "ratio_to_single": {k: round(v / best["single"], 3) for k, v in best.items()},
    }


def commit() -> str:
    """The checkout's commit, with "+changes" when its tracked files differ from it."""
    root = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True)
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", "spacy_treexp"], cwd=root)
    except OSError:
        return "unknown"
    return head.stdout.strip() + ("+changes" if dirty.returncode else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--conllu", required=True, help="CoNLL-U with gold trees (e.g. EWT test)")
    parser.add_argument("--ood", required=True, help="out-of-domain sentences, style<TAB>text per line")
    parser.add_argument("--limit", type=int, default=0, help="first N sentences of --conllu (0: all)")
    parser.add_argument("--full-members", type=int, default=8, help="full MC-dropout members (0: leave them out)")
    parser.add_argument("--mi-samples", type=int, default=16, help="trees for the models' second MI estimate")
    parser.add_argument("--timing-sentences", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip", nargs="*", default=[], choices=["risk", "ood", "speed"])
    args = parser.parse_args()
    for path in (args.conllu, args.ood):
        if not Path(path).is_file():
            sys.exit(f"no such file: {path}")
    torch.manual_seed(SEED)
    sentences = list(read_conllu(Path(args.conllu)))
    if args.limit:
        sentences = sentences[: args.limit]
    texts = [s.text or " ".join(s.forms) for s in sentences]
    default = load_spacy(None).get_pipe("biaffine_parser").members
    pipes = {
        "single": pipeline(None, 0),
        "head_parser": pipeline(STOCK_HEAD_NAME, 0),
        "head_2": pipeline(None, default, "head"),
    }
    if args.full_members:
        pipes["full"] = pipeline(None, args.full_members, "full")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    report: Dict = {
        "machine": f"{platform.machine()} {platform.system()}, {os.cpu_count()} CPU cores, torch "
        f"{torch.__version__} with {torch.get_num_threads()} threads, load average {load:.1f} at start",
        "members": {
            "models": "shipped biaffine_parser + en_core_web_sm_head, each with its own calibration map, equal weights",
            "models_raw": "the same two parsers, raw scores",
            "head_2": f"{default} MC-dropout members, member_kind = head",
            "full": f"{args.full_members} MC-dropout members, member_kind = full",
            "product": "speed only: the ensemble pipeline (both parsers as a product of experts), no members",
        },
        "commit": commit(),
    }
    if "risk" not in args.skip:
        report["risk_and_words"] = risk_and_words(pipes, sentences, args.mi_samples)
        print(json.dumps(report, indent=1), file=sys.stderr, flush=True)
    if "ood" not in args.skip:
        report["out_of_domain"] = out_of_domain(pipes, texts, read_ood(Path(args.ood)), args.mi_samples)
        print(json.dumps(report, indent=1), file=sys.stderr, flush=True)
    if "speed" not in args.skip:
        pipes["product"] = pipeline(ENSEMBLE_NAME, 0)
        report["speed"] = speed(pipes, texts[: args.timing_sentences], args.repeats)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
