"""Sentence-level risk, out-of-domain detection and the cost of the parser's ensemble members
(issue 21, parts 3 and 4).

1. **Risk**: on the CoNLL-U file (gold tokens and sentences, e.g. EWT test), the AUROC of
   each sentence score of ``spacy_treexp.evaluation.epistemic`` for "the parse has at least
   one wrong head", with 95% bootstrap intervals, beside the local (per-word softmax)
   baselines and length.
2. **Out of domain**: the same scores telling the out-of-domain sentences
   (``benchmarks/data/ood_blind5_sentences.tsv``, 120 sentences in 12 styles, the one set the
   shipped ``out_of_domain`` model was not fitted on, nor designed with) from the CoNLL-U file's sentences; both
   sides go through the same tokenizer, one sentence per line.
3. **Speed**: the whole pipeline (``spacy_treexp.load()`` + ``tree_expectations`` with its
   default settings) on the raw
   texts of the first ``--timing-sentences`` sentences, without members (``members = 0``,
   the cost before issue 21), with the default members, and with ``--full-members`` full
   members (``member_kind = "full"``); best of ``--repeats`` interleaved runs, ratios of the
   process's CPU time (one torch thread: steadier than wall-clock time on a shared machine)
   to the run without members.

``--model`` runs every part on another pipeline with ``biaffine_parser`` (e.g. the transformer
one of ``configs/train_en_ewt_trf.sh``).

Usage::

    OMP_NUM_THREADS=1 python benchmarks/epistemic.py --conllu ../shared/data/ud_en_ewt/en_ewt-ud-test.conllu

The held-out check of ``sent._.out_of_domain`` per style (the other three sets, which it was
fitted on, can be given with ``--ood`` too)::

    OMP_NUM_THREADS=1 python benchmarks/epistemic.py --conllu .../en_ewt-ud-test.conllu \
        --per-style --skip risk speed --full-members 0
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy
import torch
from spacy.tokens import Doc

from spacy_treexp.annotate.records import SentenceScores
from spacy_treexp.calibration.map import calibrate_sentences
from spacy_treexp.evaluation.epistemic import (
    auroc_table,
    fit_map_risk_temperature,
    has_attachment_error,
    parse_log_probs,
    score_table,
)
from spacy_treexp.evaluation.run import load_spacy
from spacy_treexp.evaluation.scores import text_docs
from spacy_treexp.io import read_conllu

OOD = Path(__file__).parent / "data" / "ood_blind5_sentences.tsv"


def read_ood(path: Path, column: int = 1) -> List[str]:
    """The texts (``column`` 1) or styles (0) of a ``style<TAB>text`` file (``#`` lines are comments)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return [line.split("\t", 1)[column].strip() for line in lines if line.strip() and not line.startswith("#")]


#: The scores ``--per-style`` reports for each style of the out-of-domain file.
PER_STYLE_SCORES = ("out_of_domain", "novelty", "entropy_per_word", "local_head_entropy")


def pipeline(model: Optional[str], members: int, kind: str = "head", risk_temperature: Optional[float] = None):
    """``model`` (None: the shipped pipeline) with these members and a ``tree_expectations`` of
    these settings (replacing one the pipeline has; the parser's own calibration map, when
    it carries one, still applies; ``risk_temperature`` None: the map's own, else 1)."""
    nlp = load_spacy(
        model, {"components.biaffine_parser.members": members, "components.biaffine_parser.member_kind": kind}
    )
    if "tree_expectations" in nlp.pipe_names:
        nlp.remove_pipe("tree_expectations")
    nlp.add_pipe("tree_expectations", config={"keep_scores": True, "risk_temperature": risk_temperature})
    return nlp


def senters(nlp) -> List[str]:
    return [name for name in nlp.pipe_names if nlp.get_pipe_meta(name).factory in ("senter", "sentencizer")]


def annotate(nlp, docs: Sequence[Doc]):
    """(records, arcs, docs) of Docs that are one sentence each, the senter off."""
    with nlp.select_pipes(disable=senters(nlp)):
        done = list(nlp.pipe(docs, batch_size=256))
    records = [doc._.tree_expectations[0] for doc in done]
    arcs = [doc._.parser_scores[0]["arc"] for doc in done]
    return records, arcs, done


def rounded(table: Dict[str, Dict[str, float]]) -> Dict[str, Dict[str, float]]:
    return {name: {k: round(v, 4) for k, v in row.items()} for name, row in table.items()}


def gold_docs(nlp, sentences) -> List[Doc]:
    return [Doc(nlp.vocab, words=s.forms, spaces=s.spaces, sent_starts=[True] + [False] * (s.n - 1)) for s in sentences]


def score_records(nlp, docs: Sequence[Doc]) -> List[SentenceScores]:
    """The core's records of annotated Docs (``keep_scores``): the parser's scores as
    ``tree_expectations`` reads them, before its calibration map."""
    component = nlp.get_pipe("tree_expectations")
    return [record for doc in docs for record in component.sentence_scores(doc)]


def calibrated_arcs(nlp, docs: Sequence[Doc]) -> List[numpy.ndarray]:
    """The arc scores of annotated Docs as the annotation core sees them: the parser's, with
    the ``tree_expectations`` map applied (what ``risk_temperature`` divides)."""
    calibration = nlp.get_pipe("tree_expectations").calibration
    return [record.arc for record in calibrate_sentences(score_records(nlp, docs), calibration)]


def risk(nlp, sentences) -> Dict:
    records, arcs, docs = annotate(nlp, gold_docs(nlp, sentences))
    heads = [r.heads for r in records]
    wrong = has_attachment_error(heads, [s.heads[1:] for s in sentences])
    scores = score_table(records, arcs)
    scores["error_probability_at_T1"] = -numpy.expm1(parse_log_probs(calibrated_arcs(nlp, docs), heads, 1.0))
    table = auroc_table(scores, wrong)
    return {"sentences": len(records), "with_error": round(float(wrong.mean()), 4), "auroc": rounded(table)}


def fit_on_dev(model: Optional[str], path: Path) -> Dict[str, float]:
    """``risk_temperature`` fitted on a held-out CoNLL-U file (gold tokens and sentences), on
    the scores with the pipeline's calibration map applied, as the core uses it."""
    sentences = list(read_conllu(path))
    nlp = pipeline(model, 0, risk_temperature=1.0)
    _, _, docs = annotate(nlp, gold_docs(nlp, sentences))
    calibration = nlp.get_pipe("tree_expectations").calibration
    fit = fit_map_risk_temperature(calibration, sentences, score_records(nlp, docs))
    return {k: round(v, 4) for k, v in fit.items()}


def out_of_domain(nlp, in_domain: Sequence[str], ood: Sequence[str], styles: Sequence[str] = ()) -> Dict:
    """AUROCs for telling ``ood`` from ``in_domain``; with ``styles`` (one per ``ood`` text),
    also each style's ``PER_STYLE_SCORES`` against all of ``in_domain``."""
    docs = list(text_docs(nlp, list(in_domain) + list(ood)))
    records, arcs, _ = annotate(nlp, docs)
    positive = numpy.r_[numpy.zeros(len(in_domain), bool), numpy.ones(len(ood), bool)]
    scores = score_table(records, arcs)
    out = {"in_domain": len(in_domain), "out_of_domain": len(ood), "auroc": rounded(auroc_table(scores, positive))}
    if styles:
        per_style = {}
        for style in sorted(set(styles)):
            keep = numpy.r_[numpy.ones(len(in_domain), bool), numpy.array([s == style for s in styles])]
            chosen = {name: scores[name][keep] for name in PER_STYLE_SCORES if name in scores}
            per_style[style] = rounded(auroc_table(chosen, positive[keep]))
        out["per_style"] = per_style
    return out


def speed(model: Optional[str], texts: Sequence[str], default_members: int, full_members: int, repeats: int) -> Dict:
    variants = {
        "no_members": pipeline(model, 0, risk_temperature=1.0),
        f"default_{default_members}_head": pipeline(model, default_members, risk_temperature=1.0),
        f"full_{full_members}": pipeline(model, full_members, "full", risk_temperature=1.0),
    }
    for nlp in variants.values():
        list(nlp.pipe(texts[:20]))  # warm up
    best = {name: float("inf") for name in variants}
    wall = {name: float("inf") for name in variants}
    for _ in range(repeats):  # interleaved: the machine's load drifts
        for name, nlp in variants.items():
            start, start_wall = time.process_time(), time.perf_counter()
            list(nlp.pipe(texts, batch_size=256))
            best[name] = min(best[name], time.process_time() - start)
            wall[name] = min(wall[name], time.perf_counter() - start_wall)
    base = best["no_members"]
    out: Dict = {
        "sentences": len(texts),
        "cpu_seconds": {k: round(v, 3) for k, v in best.items()},
        "wall_seconds": {k: round(v, 3) for k, v in wall.items()},
    }
    out["ratio_default"] = round(best[f"default_{default_members}_head"] / base, 3)
    out["ratio_full"] = round(best[f"full_{full_members}"] / base, 3)
    out["full_budget"] = f"<= {full_members} x 1.05 = {full_members * 1.05:.2f}"
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--conllu", required=True, help="CoNLL-U with gold trees (e.g. EWT test)")
    parser.add_argument(
        "--model", default=None, help="a pipeline folder or name with biaffine_parser (default: the shipped one)"
    )
    parser.add_argument("--ood", default=str(OOD), help="out-of-domain sentences, style<TAB>text per line")
    parser.add_argument("--limit", type=int, default=0, help="first N sentences of --conllu (0: all)")
    parser.add_argument(
        "--dev", default=None, help="held-out CoNLL-U to fit risk_temperature on (default: the calibration map's)"
    )
    parser.add_argument("--full-members", type=int, default=8, help="members of the costlier variant (0: leave it out)")
    parser.add_argument("--timing-sentences", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip", nargs="*", default=[], choices=["risk", "ood", "speed"])
    parser.add_argument("--per-style", action="store_true", help="also the AUROCs of each style of --ood")
    args = parser.parse_args()
    path = Path(args.conllu)
    if not path.is_file():
        sys.exit(f"--conllu: no such file: {args.conllu}")
    torch.manual_seed(0)
    sentences = list(read_conllu(path))
    if args.limit:
        sentences = sentences[: args.limit]
    texts = [s.text or " ".join(s.forms) for s in sentences]
    default = load_spacy(args.model).get_pipe("biaffine_parser").members
    report: Dict = {"torch_threads": torch.get_num_threads(), "default_members": default}
    temperature = None
    if args.dev:
        report["risk_temperature_fit"] = fit_on_dev(args.model, Path(args.dev))
        temperature = report["risk_temperature_fit"]["risk_temperature"]
    report["risk_temperature"] = temperature
    if "risk" not in args.skip or "ood" not in args.skip:
        variants = (("default", default, "head"), ("full", args.full_members, "full"))[: 2 if args.full_members else 1]
        for label, members, kind in variants:
            nlp = pipeline(args.model, members, kind, temperature)
            if "risk" not in args.skip:
                report[f"risk_{label}"] = risk(nlp, sentences)
            if "ood" not in args.skip:
                styles = read_ood(Path(args.ood), 0) if args.per_style else ()
                report[f"ood_{label}"] = out_of_domain(nlp, texts, read_ood(Path(args.ood)), styles)
            print(json.dumps(report, indent=1), file=sys.stderr, flush=True)
    if "speed" not in args.skip:
        report["speed"] = speed(args.model, texts[: args.timing_sentences], default, args.full_members, args.repeats)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
