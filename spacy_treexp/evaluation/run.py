"""The evaluation run: parse a CoNLL-U file on gold tokens and sentences, measure, report.

    spacy-treexp evaluate --conllu FILE --out DIR [--model PATH | --stanza DIR] [--dev FILE]

Library entry point: :func:`run` takes one :class:`EvalConfig` and returns an
:class:`EvalReport` (also written as ``report.json``, ``summary.md`` and PNG plots). Paths
in the report are relative to the working directory, so a committed report names no
directory of the machine that made it.
"""

from __future__ import annotations

import dataclasses
import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import torch

from spacy_treexp.annotate import SentenceScores, torch_threads
from spacy_treexp.calibration.fit import fittable
from spacy_treexp.calibration.map import calibrate_sentences
from spacy_treexp.engine.sampling import DEFAULT_METHOD
from spacy_treexp.evaluation.calibration_report import calibration_section, few_errors_warning, genres
from spacy_treexp.evaluation.conllu import GoldSentence, read_conllu
from spacy_treexp.evaluation.epistemic import risk_section
from spacy_treexp.evaluation.evaluator import EvalOptions, evaluate
from spacy_treexp.evaluation.report import remove_stale_plots, targets, write_json, write_markdown, write_plots
from spacy_treexp.evaluation.scores import spacy_scores, stanza_scores, stanza_uses_gold_tags
from spacy_treexp.evaluation.temperature import fit_arc_temperature, fit_rel_temperature
from spacy_treexp.evaluation.timing import timing_table

DEFAULT_MODEL = "default (spacy_treexp.load())"
PathLike = Union[str, Path]


class InputError(ValueError):
    """A problem with the evaluation's input files (an empty --conllu or --dev): the user's to
    mend, which the command line reports as such."""


@dataclass(frozen=True)
class EvalConfig:
    """What to evaluate and how.

    Attributes:
        conllu: the gold CoNLL-U file (required; no default outside the package).
        out_dir: where report.json, summary.md and the plots go.
        model: a spaCy pipeline path or name (None: the shipped model); or ``stanza_dir``,
            a Stanza pipeline directory, with ``stanza_gold_tags`` (None: gold tags when the
            folder has no ``pos.pt``).
        dev: a CoNLL-U file on which to fit post-hoc arc and relation temperatures (None:
            no temperature scaling).
        ks, samples, sampler, reject_draws, seed: see :class:`EvalOptions`.
        timing, timing_repeats, timing_max_per_bucket: the T1 vs O(n⁴) entropy timing table.
        limit: evaluate the first ``limit`` sentences only (0: all).
        batch_size: spaCy ``nlp.pipe`` batch size; plots: write PNG plots.
        threads: torch threads for the run (default 1: on a small shared machine more
            threads than free cores make torch many times slower; None keeps torch's setting).
        command: the command line to record in the report.
    """

    conllu: PathLike
    out_dir: PathLike
    model: Optional[str] = None
    stanza_dir: Optional[PathLike] = None
    stanza_gold_tags: Optional[bool] = None
    dev: Optional[PathLike] = None
    ks: Tuple[int, ...] = (1, 5, 20, 100)
    samples: bool = True
    sampler: str = DEFAULT_METHOD
    reject_draws: int = 10
    timing: bool = True
    timing_repeats: int = 3
    timing_max_per_bucket: int = 0
    limit: int = 0
    seed: int = 0
    batch_size: int = 64
    plots: bool = True
    threads: Optional[int] = 1
    command: Optional[str] = None

    def __post_init__(self) -> None:
        if self.model is not None and self.stanza_dir is not None:
            raise ValueError("give a spaCy model or a Stanza directory, not both")
        if self.threads is not None and self.threads < 1:
            raise ValueError(f"threads must be >= 1, got {self.threads}")
        if not self.ks or min(self.ks) < 1:
            raise ValueError(f"sample counts must be positive integers, got {self.ks}")
        for name in ("reject_draws", "timing_repeats", "timing_max_per_bucket", "limit"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")


@dataclass
class EvalReport:
    """The evaluation's results; each block is a JSON-ready dict (see README, Evaluation).

    ``raw``: the metrics of the scores as they are; ``calibrated``: the same with the
    temperatures fitted on dev (``temperature``), when a dev file was given; ``targets``:
    the headline targets met or not; ``calibration``: the tree distribution against the
    local per-word softmax, raw and calibrated on dev (scalar temperature, the distance
    map), per genre with chance bands and bootstrap intervals
    (:mod:`spacy_treexp.evaluation.calibration_report`); ``risk``: the AUROC of each sentence
    score for "the parse has a wrong head", under the pipeline's own map, per genre with
    bootstrap intervals (:func:`spacy_treexp.evaluation.epistemic.risk_section`); ``timing``:
    the entropy timing table."""

    meta: Dict[str, Any]
    raw: Dict[str, Any]
    targets: Dict[str, Any]
    temperature: Optional[Dict[str, Any]] = None
    calibrated: Optional[Dict[str, Any]] = None
    pipeline_map: Optional[Dict[str, Any]] = None
    calibration: Optional[Dict[str, Any]] = None
    risk: Optional[Dict[str, Any]] = None
    timing: Optional[Dict[str, Any]] = None

    def to_dict(self) -> Dict[str, Any]:
        """The report as written to ``report.json`` (blocks that were not computed left out)."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


def shown_path(path: Optional[PathLike]) -> Optional[str]:
    """``path`` relative to the working directory (what a report records)."""
    if path is None or str(path) == "":
        return None
    try:
        return os.path.relpath(path)
    except ValueError:  # another drive (Windows)
        return Path(path).name


def load_spacy(model: Optional[str], config: Optional[Dict[str, Any]] = None) -> Any:
    """The shipped pipeline (``model`` None, or ``en_treexp_ewt_ensemble`` with its second
    parser) or ``spacy.load(model)``, with ``config`` overrides (e.g.
    ``{"components.biaffine_parser.encoder_precision": "bfloat16"}``); a stock pipeline
    without arc scores (``en_core_web_sm``) gets our parser beside its own, as on the command
    line (``spacy_treexp.add_uncertainty``)."""
    from spacy_treexp.pipeline.default_model import load_named
    from spacy_treexp.pipeline.stock import add_uncertainty, needs_our_parser

    nlp = load_named(model, config=config or {})
    return add_uncertainty(nlp) if needs_our_parser(nlp) else nlp


def machine() -> str:
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),)
    return (
        f"{platform.machine()} {platform.system()}, {os.cpu_count()} CPU cores, torch "
        f"{torch.__version__} with {torch.get_num_threads()} threads, load average {load[0]:.1f} at start"
    )


def run(config: EvalConfig, log: Callable[[str], None] = print) -> EvalReport:
    """Evaluate a pipeline on ``config.conllu`` and write report.json, summary.md and plots."""
    for path, what in ((config.conllu, "conllu"), (config.dev, "dev")):
        if path is not None and not Path(path).is_file():
            raise FileNotFoundError(f"{what} file not found: {path}")
    with torch_threads(config.threads):
        return _run(config, log)


def _score(config: EvalConfig, gold: Sequence[GoldSentence], nlp: Any) -> List[SentenceScores]:
    """Scores of the gold sentences from the spaCy pipeline or the Stanza directory."""
    if config.stanza_dir is not None:
        return stanza_scores(str(config.stanza_dir), gold, gold_tags=config.stanza_gold_tags)
    return spacy_scores(nlp, gold, batch_size=config.batch_size)


#: A dev UAS under this share of the test UAS, and ``evaluate`` warns that --dev may not suit the parser.
DEV_UAS_SHARE = 0.5


def _annotator_risk_temperature(nlp: Any) -> Optional[float]:
    """The ``risk_temperature`` the pipeline's last ``tree_expectations`` sets (None: the map's
    own, as where it has none)."""
    if nlp is None:
        return None
    from spacy_treexp.pipeline.tree_expectations import last_annotator

    name = last_annotator(nlp)
    options = None if name is None else getattr(nlp.get_pipe(name), "options", None)
    return None if options is None else options.risk_temperature


def _run(config: EvalConfig, log: Callable[[str], None]) -> EvalReport:
    start = time.perf_counter()
    out = Path(config.out_dir)  # made only once there is a report to write (a bad input leaves nothing)
    stanza_dir = config.stanza_dir
    meta: Dict[str, Any] = {
        "model": shown_path(stanza_dir) if stanza_dir is not None else (config.model or DEFAULT_MODEL),
        "kind": "stanza" if stanza_dir is not None else "spacy",
        "stanza_tags": None
        if stanza_dir is None
        else ("gold" if stanza_uses_gold_tags(str(stanza_dir), config.stanza_gold_tags) else "predicted"),
        "conllu": shown_path(config.conllu),
        "dev": shown_path(config.dev),
        "command": config.command or "spacy_treexp.evaluation.run(...)",
        "machine": machine(),
        "limit": config.limit,
        "seed": config.seed,
    }
    gold = read_conllu(config.conllu)
    if not gold:
        raise InputError(f"--conllu {config.conllu}: no sentences, nothing to evaluate")
    dev_read = read_conllu(config.dev) if config.dev else None  # read first: a bad --dev fails before any work
    if dev_read == []:
        raise InputError(f"--dev {config.dev}: no sentences to fit temperatures on")
    meta["dev_is_test"] = config.dev is not None and os.path.samefile(config.dev, config.conllu)
    if meta["dev_is_test"]:
        log(
            f"warning: --dev {config.dev} is the --conllu file: the temperatures and the map are fitted on the "
            "sentences they are measured on, so the columns fitted on dev are in-sample figures, not held-out ones"
        )
    if config.limit:
        gold = gold[: config.limit]
    log(f"{len(gold)} gold sentences from {meta['conllu']}")
    nlp = None if stanza_dir is not None else load_spacy(config.model)
    if nlp is not None:
        meta["model_path"] = shown_path(getattr(nlp, "path", None))
        meta["pipeline"] = list(nlp.pipe_names)
    t0 = time.perf_counter()
    test_scores = _score(config, gold, nlp)
    meta["parse_seconds"] = time.perf_counter() - t0
    log(f"parsed in {meta['parse_seconds']:.1f} s")
    options = EvalOptions(
        ks=tuple(config.ks),
        samples=config.samples,
        sampler=config.sampler,
        reject_draws=config.reject_draws,
        seed=config.seed,
    )
    t0 = time.perf_counter()
    report = EvalReport(meta=meta, raw=evaluate(gold, test_scores, options=options), targets={})
    meta["evaluate_seconds"] = time.perf_counter() - t0
    log(f"evaluated in {meta['evaluate_seconds']:.1f} s")
    report.targets["raw"] = targets(report.raw)
    own_map = None
    if nlp is not None:
        from spacy_treexp.pipeline.tree_expectations import pipeline_calibration

        own_map = pipeline_calibration(nlp)
    elif stanza_dir is not None:  # the map its processor reads, beside the depparse model
        from spacy_treexp.stanza.convert import folder_calibration

        own_map = folder_calibration(str(stanza_dir))
    if own_map is not None:  # what the pipeline's users get: its token._.head_prob, dep_prob, ...
        report.pipeline_map = evaluate(gold, calibrate_sentences(test_scores, own_map), options=options)
        report.targets["pipeline_map"] = targets(report.pipeline_map)
        meta["pipeline_map"] = own_map.kind
        log(f"the pipeline's own calibration map ({own_map.kind}) evaluated as well")
    dev_gold: Optional[List[GoldSentence]] = None
    dev_scores: Optional[List[SentenceScores]] = None
    if dev_read is not None:
        dev_gold = dev_read
        t0 = time.perf_counter()
        dev_gold, dev_scores, left_out = fittable(dev_gold, _score(config, dev_gold, nlp))
        if left_out:
            log(f"{len(left_out)} dev sentences left out of the fits: the scores forbid an arc of their gold tree")
        if not dev_gold:
            raise ValueError("--dev: the scores forbid (-inf) an arc of every sentence's gold tree")
        few_errors = few_errors_warning(dev_gold, dev_scores)
        if few_errors is not None:
            log(f"warning: --dev: {few_errors}; the columns fitted on dev can be worse than raw, fit on more sentences")
        arc = fit_arc_temperature(dev_gold, dev_scores)
        rel = fit_rel_temperature(dev_gold, dev_scores)
        rel_t = rel["temperature"] if rel else 1.0
        light = EvalOptions(samples=False, reject_draws=0, bootstrap=0)
        on_dev = {}
        for name, (t_arc, t_rel) in {"raw": (1.0, 1.0), "temperature_scaled": (arc["temperature"], rel_t)}.items():
            block = evaluate(dev_gold, dev_scores, arc_temperature=t_arc, rel_temperature=t_rel, options=light)
            on_dev[name] = {
                "uas_map": block["attachment"]["uas_map"],
                "uas_mbr": block["attachment"]["uas_mbr"],
                "arc_ece": block["calibration"]["arc"]["ece"],
                "labeled_arc_ece": block["calibration"].get("labeled_arc", {}).get("ece"),
                "auroc_one_minus_head_prob": block["error_detection"]["auroc_one_minus_head_prob"],
            }
        meta["temperature_seconds"] = time.perf_counter() - t0
        # dev_metrics are of the fitted sentences: those whose gold tree the scores forbid are left out
        report.temperature = {
            "dev": meta["dev"],
            "arc": arc,
            "rel": rel,
            "dev_metrics": on_dev,
            "dev_left_out": len(left_out),
        }
        log(
            f"temperatures fitted on dev in {meta['temperature_seconds']:.1f} s: arc T = {arc['temperature']:.3f}"
            + (f", relation T = {rel['temperature']:.3f}" if rel else "")
        )
        # a dev set of another scheme or language: the temperature fitted on it fits nothing here
        dev_uas, test_uas = on_dev["raw"]["uas_map"], report.raw["attachment"]["uas_map"]
        if dev_uas < DEV_UAS_SHARE * test_uas:
            log(
                f"warning: the parser attaches only {100 * dev_uas:.1f}% of --dev's words to their gold head, against "
                f"{100 * test_uas:.1f}% of --conllu's: is --dev from the same language and annotation scheme? A "
                f"temperature fitted on it (T = {arc['temperature']:.3f}) says how unsure the parser is there, not on --conllu"
            )
        report.calibrated = evaluate(
            gold, test_scores, arc_temperature=arc["temperature"], rel_temperature=rel_t, options=options
        )
        report.targets["calibrated"] = targets(report.calibrated)
    t0 = time.perf_counter()
    report.calibration = calibration_section(
        gold,
        test_scores,
        dev_gold,
        dev_scores,
        bootstrap_replicates=options.bootstrap,
        seed=config.seed,
        own_map=own_map,
    )
    meta["calibration_seconds"] = time.perf_counter() - t0
    log(f"calibration maps and tables in {meta['calibration_seconds']:.1f} s")
    t0 = time.perf_counter()
    sentence_genres = genres([g.sent_id for g in gold])
    report.risk = risk_section(
        gold,
        test_scores,
        own_map,
        sentence_genres,
        n_boot=options.bootstrap or 200,
        seed=config.seed,
        risk_temperature=_annotator_risk_temperature(nlp),
    )
    meta["risk_seconds"] = time.perf_counter() - t0
    log(f"sentence risk in {meta['risk_seconds']:.1f} s")
    if config.timing:
        t0 = time.perf_counter()
        report.timing = timing_table(
            test_scores,
            repeats=config.timing_repeats,
            max_sentences_per_bucket=config.timing_max_per_bucket,
            seed=config.seed,
        )
        meta["timing_seconds"] = time.perf_counter() - t0
        log(f"timing table in {meta['timing_seconds']:.1f} s")
    meta["seconds"] = time.perf_counter() - start
    as_dict = report.to_dict()
    out.mkdir(parents=True, exist_ok=True)
    written = write_plots(as_dict, out) if config.plots else []
    remove_stale_plots(out, written)
    meta["plots"] = written
    as_dict["meta"] = meta
    write_json(as_dict, out / "report.json")
    write_markdown(as_dict, out / "summary.md", written)
    log(f"wrote report.json, summary.md and {len(written)} plots to {shown_path(out)}")
    return report
