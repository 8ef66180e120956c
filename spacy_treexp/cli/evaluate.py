"""``spacy-treexp evaluate --conllu FILE --out DIR``: calibration, error detection and samples
on a gold CoNLL-U treebank (:func:`spacy_treexp.evaluation.run`)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated, Optional

import typer

from spacy_treexp.cli.common import (
    PROG,
    BatchSize,
    Code,
    Model,
    Stanza,
    StanzaTags,
    StanzaTagsOption,
    UserError,
    check_input_file,
    check_output_path,
    warn,
)
from spacy_treexp.cli.pipelines import check_not_both, check_source
from spacy_treexp.engine.sampling import DEFAULT_METHOD, SINGLE_ROOT_METHODS


def parse_ks(text: str) -> tuple[int, ...]:
    """``"1,5,20"`` -> ``(1, 5, 20)``: positive sample counts, or a UserError."""
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError as e:
        raise UserError(f"--ks {text}: expected comma-separated integers") from e
    if not values or min(values) < 1:
        raise UserError(f"--ks {text}: sample counts must be positive integers")
    return values


def evaluate(
    ctx: typer.Context,
    conllu: Annotated[Path, typer.Option("--conllu", help="The gold CoNLL-U file.", show_default=False)],
    out: Annotated[Path, typer.Option("--out", help="Output directory.", show_default=False)],
    model: Model = None,
    code: Code = None,
    stanza: Stanza = None,
    stanza_tags: StanzaTagsOption = StanzaTags.auto,
    dev: Annotated[
        Optional[Path],
        typer.Option("--dev", help="A CoNLL-U file to fit post-hoc temperatures on (default: none)."),
    ] = None,
    ks: Annotated[str, typer.Option("--ks", help="Sample counts k, comma-separated.")] = "1,5,20,100",
    samples: Annotated[bool, typer.Option("--samples/--no-samples", help="The sampling metrics.")] = True,
    sampler: Annotated[
        str,
        typer.Option(
            "--sampler",
            help=f"Exact sampler for the draws with replacement: {', '.join(SINGLE_ROOT_METHODS)}.",
        ),
    ] = DEFAULT_METHOD,
    reject_draws: Annotated[
        int, typer.Option("--reject-draws", min=0, help="Wilson-Reject draws per sentence (0: skip).")
    ] = 10,
    timing: Annotated[bool, typer.Option("--timing/--no-timing", help="The T1 vs O(n^4) timing table.")] = True,
    timing_repeats: Annotated[
        int, typer.Option("--timing-repeats", min=1, help="Runs per sentence in the timing table.")
    ] = 3,
    timing_max_per_bucket: Annotated[
        int,
        typer.Option("--timing-max-per-bucket", min=0, help="Time at most this many sentences per bucket (0: all)."),
    ] = 0,
    limit: Annotated[int, typer.Option("--limit", min=0, help="Evaluate the first N sentences only (0: all).")] = 0,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the samples and the bootstrap.")] = 0,
    batch_size: BatchSize = 64,
    plots: Annotated[bool, typer.Option("--plots/--no-plots", help="PNG plots (needs matplotlib).")] = True,
    threads: Annotated[
        int,
        typer.Option("--threads", min=1, help="Torch threads (more than the free cores slows torch down badly)."),
    ] = 1,
) -> int:
    """Evaluate the uncertainty on a gold CoNLL-U treebank, on gold tokens and sentences.

    Calibration, error detection and samples; writes report.json, summary.md and plots
    into --out. With --dev, post-hoc temperatures are fitted on that file.
    """
    from spacy_treexp.evaluation import EvalConfig, run

    sample_counts = parse_ks(ks)
    if sampler not in SINGLE_ROOT_METHODS:
        raise UserError(f"--sampler {sampler}: expected one of {', '.join(SINGLE_ROOT_METHODS)}")
    check_not_both(model, stanza)  # the model and folder after the inputs: a missing input comes before a bad --model
    for path, what in ((conllu, "--conllu"), (dev, "--dev")):
        if path is not None:
            check_input_file(path, what)
    check_source(model, stanza)
    check_output_path(out, [p for p in (conllu, dev) if p is not None], what="--out", folder=True)
    argv = (ctx.obj or {}).get("argv")
    try:
        config = EvalConfig(
            conllu=conllu,
            out_dir=out,
            model=model,
            stanza_dir=stanza,
            stanza_gold_tags=stanza_tags.gold_tags,
            dev=dev,
            ks=sample_counts,
            samples=samples,
            sampler=sampler,
            reject_draws=reject_draws,
            timing=timing,
            timing_repeats=timing_repeats,
            timing_max_per_bucket=timing_max_per_bucket,
            limit=limit,
            seed=seed,
            batch_size=batch_size,
            plots=plots,
            threads=threads,
            command=f"{PROG} {shlex.join(argv)}" if argv is not None else None,
        )
    except ValueError as e:
        raise UserError(str(e)) from e
    from spacy_treexp.evaluation.run import InputError
    from spacy_treexp.io import ConlluError

    try:
        run(config, log=warn)
    except (ConlluError, InputError) as e:  # --conllu or --dev is not CoNLL-U, or empty: a mistake in its files
        raise UserError(f"evaluate: {_one_line(e)}") from e
    except (ValueError, FileNotFoundError, RuntimeError) as e:
        warn(f"{PROG}: evaluate: {_one_line(e)}")
        return 1
    except OSError as e:  # a full disk, a folder made read-only meanwhile
        where = e.filename if e.filename is not None else out
        warn(f"{PROG}: evaluate: --out {out}: cannot write {where} ({e.strerror or _one_line(e)})")
        return 1
    return 0


def _one_line(error: Exception) -> str:
    return " ".join(str(error).split()) or type(error).__name__
