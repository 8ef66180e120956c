"""The evaluation command: parse a CoNLL-U file on gold tokens and sentences, measure, report.

    python benchmarks/quality.py [--model PATH | --stanza DIR] [--conllu FILE] [--dev FILE] --out DIR
    python -m spacy_treexp.evaluation ...          # the same

Library entry point: :func:`run` (what a ``spacy-treexp evaluate`` subcommand should call).
"""
from __future__ import annotations

import argparse
import os
import platform
import shlex
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import torch

from spacy_treexp.evaluation.conllu import GoldSentence, read_conllu
from spacy_treexp.evaluation.evaluator import EvalOptions, evaluate
from spacy_treexp.evaluation.report import targets, write_json, write_markdown, write_plots
from spacy_treexp.evaluation.scores import SentenceScores, spacy_scores, stanza_scores, stanza_uses_gold_tags
from spacy_treexp.evaluation.temperature import fit_arc_temperature, fit_rel_temperature
from spacy_treexp.evaluation.timing import timing_table

REPO = Path(__file__).resolve().parent.parent.parent
DEFAULT_DATA = REPO.parent / "shared" / "data" / "ud_en_ewt"
DEFAULT_TEST = DEFAULT_DATA / "en_ewt-ud-test.conllu"
DEFAULT_DEV = DEFAULT_DATA / "en_ewt-ud-dev.conllu"
DEFAULT_MODEL = "default (spacy_treexp.load())"


def load_spacy(model: Optional[str]):
    """The shipped pipeline (``model`` None) or ``spacy.load(model)``."""
    if model is None:
        import spacy_treexp

        return spacy_treexp.load()
    import spacy

    return spacy.load(model)


def score(gold: Sequence[GoldSentence], *, nlp: Any = None, stanza_dir: Optional[str] = None,
          batch_size: int = 64, stanza_gold_tags: Optional[bool] = None) -> List[SentenceScores]:
    """Scores of the gold sentences from a spaCy pipeline or a Stanza pipeline directory."""
    if stanza_dir is not None:
        return stanza_scores(stanza_dir, gold, gold_tags=stanza_gold_tags)
    return spacy_scores(nlp, gold, batch_size=batch_size)


def machine() -> str:
    load = os.getloadavg() if hasattr(os, "getloadavg") else ("?",)
    return (f"{platform.machine()} {platform.system()}, {os.cpu_count()} CPU cores, torch "
            f"{torch.__version__} with {torch.get_num_threads()} threads, load average {load[0]:.1f} at start")


def run(
    model: Optional[str],
    conllu: str | Path,
    out_dir: str | Path,
    *,
    stanza_dir: Optional[str] = None,
    stanza_gold_tags: Optional[bool] = None,
    dev: Optional[str | Path] = None,
    ks: Sequence[int] = (1, 5, 20, 100),
    samples: bool = True,
    sampler: str = "colbourn",
    reject_draws: int = 10,
    timing_repeats: int = 3,
    timing_max_per_bucket: int = 0,
    timing: bool = True,
    limit: int = 0,
    seed: int = 0,
    batch_size: int = 64,
    plots: bool = True,
    threads: Optional[int] = 1,
    command: Optional[str] = None,
    log=print,
) -> Dict[str, Any]:
    """Evaluate a pipeline on a CoNLL-U file and write report.json, summary.md and plots.

    ``model``: a spaCy pipeline path or name (None: the shipped model), or ``stanza_dir``: a
    Stanza pipeline directory. ``dev``: a CoNLL-U file on which to fit post-hoc arc and
    relation temperatures (None: no temperature scaling). ``limit`` > 0 evaluates the
    first ``limit`` sentences only. ``threads``: torch threads for the run (default 1: on a
    small shared machine more threads than free cores make torch many times slower;
    None keeps torch's setting). Returns the report dict.
    """
    if threads is not None and threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    previous_threads = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        return _run(model, conllu, out_dir, stanza_dir=stanza_dir, stanza_gold_tags=stanza_gold_tags, dev=dev, ks=ks, samples=samples, sampler=sampler,
                    reject_draws=reject_draws, timing_repeats=timing_repeats,
                    timing_max_per_bucket=timing_max_per_bucket, timing=timing, limit=limit, seed=seed,
                    batch_size=batch_size, plots=plots, command=command, log=log)
    finally:
        torch.set_num_threads(previous_threads)


def _run(model, conllu, out_dir, *, stanza_dir, stanza_gold_tags, dev, ks, samples, sampler, reject_draws, timing_repeats,
         timing_max_per_bucket, timing, limit, seed, batch_size, plots, command, log) -> Dict[str, Any]:
    start = time.perf_counter()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    meta: Dict[str, Any] = {
        "model": stanza_dir if stanza_dir is not None else (model or DEFAULT_MODEL),
        "kind": "stanza" if stanza_dir is not None else "spacy",
        "stanza_tags": None if stanza_dir is None else (
            "gold" if stanza_uses_gold_tags(stanza_dir, stanza_gold_tags) else "predicted"),
        "conllu": str(conllu),
        "dev": str(dev) if dev else None,
        "command": command or "spacy_treexp.evaluation.run(...)",
        "machine": machine(),
        "limit": limit,
        "seed": seed,
    }
    gold = read_conllu(conllu)
    if limit:
        gold = gold[:limit]
    log(f"{len(gold)} gold sentences from {conllu}")
    nlp = None if stanza_dir is not None else load_spacy(model)
    if nlp is not None:
        meta["model_path"] = str(getattr(nlp, "path", None) or "")
        meta["pipeline"] = list(nlp.pipe_names)
    t0 = time.perf_counter()
    test_scores = score(gold, nlp=nlp, stanza_dir=stanza_dir, batch_size=batch_size, stanza_gold_tags=stanza_gold_tags)
    meta["parse_seconds"] = time.perf_counter() - t0
    log(f"parsed in {meta['parse_seconds']:.1f} s")
    options = EvalOptions(ks=tuple(ks), samples=samples, sampler=sampler, reject_draws=reject_draws, seed=seed)
    report: Dict[str, Any] = {"meta": meta}
    t0 = time.perf_counter()
    report["raw"] = evaluate(gold, test_scores, options=options)
    meta["evaluate_seconds"] = time.perf_counter() - t0
    log(f"evaluated in {meta['evaluate_seconds']:.1f} s")
    report["targets"] = {"raw": targets(report["raw"])}
    if dev:
        dev_gold = read_conllu(dev)
        t0 = time.perf_counter()
        dev_scores = score(dev_gold, nlp=nlp, stanza_dir=stanza_dir, batch_size=batch_size,
                           stanza_gold_tags=stanza_gold_tags)
        arc = fit_arc_temperature(dev_gold, dev_scores)
        rel = fit_rel_temperature(dev_gold, dev_scores)
        rel_t = rel["temperature"] if rel else 1.0
        light = EvalOptions(samples=False, reject_draws=0, bootstrap=0)
        on_dev = {}
        for name, (t_arc, t_rel) in {"raw": (1.0, 1.0), "temperature_scaled": (arc["temperature"], rel_t)}.items():
            block = evaluate(dev_gold, dev_scores, arc_temperature=t_arc, rel_temperature=t_rel, options=light)
            on_dev[name] = {
                "uas_map": block["attachment"]["uas_map"], "uas_mbr": block["attachment"]["uas_mbr"],
                "arc_ece": block["calibration"]["arc"]["ece"],
                "labeled_arc_ece": block["calibration"].get("labeled_arc", {}).get("ece"),
                "auroc_one_minus_head_prob": block["error_detection"]["auroc_one_minus_head_prob"],
            }
        meta["temperature_seconds"] = time.perf_counter() - t0
        report["temperature"] = {"dev": str(dev), "arc": arc, "rel": rel, "dev_metrics": on_dev}
        log(f"temperatures fitted on dev in {meta['temperature_seconds']:.1f} s: arc T = {arc['temperature']:.3f}"
            + (f", relation T = {rel['temperature']:.3f}" if rel else ""))
        report["calibrated"] = evaluate(
            gold, test_scores, arc_temperature=arc["temperature"],
            rel_temperature=rel["temperature"] if rel else 1.0, options=options,
        )
        report["targets"]["calibrated"] = targets(report["calibrated"])
    if timing:
        t0 = time.perf_counter()
        report["timing"] = timing_table(test_scores, repeats=timing_repeats,
                                        max_sentences_per_bucket=timing_max_per_bucket, seed=seed)
        meta["timing_seconds"] = time.perf_counter() - t0
        log(f"timing table in {meta['timing_seconds']:.1f} s")
    meta["seconds"] = time.perf_counter() - start
    written = write_plots(report, out) if plots else []
    meta["plots"] = written
    write_json(report, out / "report.json")
    write_markdown(report, out / "summary.md", written)
    log(f"wrote {out / 'report.json'}, {out / 'summary.md'} and {len(written)} plots")
    return report


def _ks(text: str) -> List[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from error
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"sample counts must be positive integers, got {text!r}")
    return values


DESCRIPTION = ("Evaluate spacy_treexp's uncertainty (calibration, error detection, samples, the papers' "
               "quantities) on a CoNLL-U treebank, on gold tokens and sentences.")


def build_parser() -> argparse.ArgumentParser:
    """The command's argument parser (see :func:`add_arguments`)."""
    parser = argparse.ArgumentParser(prog="benchmarks/quality.py", description=DESCRIPTION)
    add_arguments(parser)
    return parser


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the command's options on ``parser`` (e.g. a ``spacy-treexp evaluate``
    subparser); run the parsed namespace with :func:`run_from_args`."""
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--model", default=None, help="spaCy pipeline path or name (default: the shipped model)")
    which.add_argument("--stanza", default=None, metavar="DIR", help="a Stanza pipeline directory instead")
    parser.add_argument("--stanza-tags", choices=["auto", "gold", "predicted"], default="auto",
                        help="POS tags for Stanza's depparse: the CoNLL-U file's gold tags or the folder's "
                             "tagger (auto: gold when the folder has no pos.pt)")
    parser.add_argument("--conllu", default=None, help=f"gold CoNLL-U file (default: {DEFAULT_TEST})")
    parser.add_argument("--dev", default=None,
                        help="CoNLL-U file to fit post-hoc temperatures on (default: the EWT dev file when "
                             "--conllu is not given; 'none' disables)")
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--ks", type=_ks, default=[1, 5, 20, 100], help="sample counts k (default 1,5,20,100)")
    parser.add_argument("--no-samples", action="store_true", help="skip the sampling metrics")
    parser.add_argument("--sampler", default="colbourn", choices=["colbourn", "wilson_marginal", "wilson_reject"],
                        help="exact sampler for the draws with replacement (default colbourn)")
    parser.add_argument("--reject-draws", type=int, default=10, help="Wilson-Reject draws per sentence (0: skip)")
    parser.add_argument("--timing-repeats", type=int, default=3, help="runs per sentence in the timing table")
    parser.add_argument("--timing-max-per-bucket", type=int, default=0,
                        help="time a random subset of at most this many sentences per bucket (0: all)")
    parser.add_argument("--no-timing", action="store_true", help="skip the T1 vs O(n^4) timing table")
    parser.add_argument("--limit", type=int, default=0, help="evaluate the first N sentences only (0: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=64, help="spaCy nlp.pipe batch size")
    parser.add_argument("--no-plots", action="store_true")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (default 1; more than the free cores slows torch down badly)")


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``benchmarks/quality.py`` / ``python -m spacy_treexp.evaluation``: exit status."""
    return run_from_args(build_parser().parse_args(argv), argv)


def run_from_args(args: argparse.Namespace, argv: Optional[Sequence[str]] = None) -> int:
    """Run the evaluation for a namespace parsed with :func:`add_arguments`; exit status."""
    conllu = args.conllu or DEFAULT_TEST
    if args.dev is None:
        dev = DEFAULT_DEV if args.conllu is None else None
    else:
        dev = None if args.dev.lower() == "none" else args.dev
    for path, what in ((conllu, "--conllu"), (dev, "--dev")):
        if path is not None and not Path(path).is_file():
            print(f"error: {what} file not found: {path}", file=sys.stderr)
            return 2
    command = "python " + " ".join(shlex.quote(a) for a in ([sys.argv[0]] + list(argv if argv is not None else sys.argv[1:])))
    try:
        run(args.model, conllu, args.out, stanza_dir=args.stanza,
            stanza_gold_tags={"auto": None, "gold": True, "predicted": False}[args.stanza_tags], dev=dev, ks=args.ks,
            samples=not args.no_samples, sampler=args.sampler, reject_draws=args.reject_draws, timing_repeats=args.timing_repeats,
            timing_max_per_bucket=args.timing_max_per_bucket, timing=not args.no_timing, limit=args.limit,
            seed=args.seed, batch_size=args.batch_size, plots=not args.no_plots, threads=args.threads, command=command,
            log=lambda message: print(message, file=sys.stderr, flush=True))
    except (FileNotFoundError, ValueError, RuntimeError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0
