"""``spacy-treexp audit GOLD.conllu``: which gold arcs and labels the parser finds unlikely.

Every gold word is scored (:mod:`spacy_treexp.audit.arcs`): the marginal of its gold head,
the head's probability given the rest of the gold tree, the relation's probability given the
gold head, the model's preferred head and relation, and per sentence the gold tree's
log-probability and expected disagreements. Output, most suspicious first: ``-o FILE.jsonl``
(one arc per line; ``-``: stdout) or ``-o FILE.csv``; ``--html REPORT.html`` draws each
flagged sentence with its suspicious arcs highlighted. Without either, the top arcs are
printed. Invalid gold trees are audited and flagged with the reason; a malformed CoNLL-U
sentence is reported with its line and skipped. ``--folds K`` audits a training treebank
with K models, each trained without the fold it judges. ``--stanza DIR`` audits with a Stanza
depparse model instead (``--stanza-tags``: the file's gold tags or the folder's tagger), under
the calibration map its processor applies.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated, Any, List, Optional

import typer
from tqdm import tqdm

from spacy_treexp.cli.common import (
    BatchSize,
    Code,
    Model,
    Quiet,
    Stanza,
    StanzaTags,
    StanzaTagsOption,
    StopRun,
    UserError,
    bounded_float,
    check_input_file,
    check_output_path,
    is_stdio,
    warn,
    write_output,
)
from spacy_treexp.pipeline.config_checks import PipelineError


def audit(
    gold: Annotated[Path, typer.Argument(metavar="GOLD", help="The gold CoNLL-U file.", show_default=False)],
    output: Annotated[
        Optional[Path],
        typer.Option("--output", "-o", help="Ranked arcs: .jsonl or .csv ('-': JSONL on stdout)."),
    ] = None,
    html: Annotated[
        Optional[Path], typer.Option("--html", help="The HTML report of the flagged sentences ('-': stdout).")
    ] = None,
    model: Model = None,
    code: Code = None,
    stanza: Stanza = None,
    stanza_tags: StanzaTagsOption = StanzaTags.auto,
    folds: Annotated[
        int,
        typer.Option(
            "--folds", min=0, help="Cross-fitted: train K models, each auditing the fold it never saw (0: off)."
        ),
    ] = 0,
    train_steps: Annotated[
        Optional[int],
        typer.Option("--train-steps", min=1, help="With --folds: training steps per model (default: the config's)."),
    ] = None,
    train_seconds: Annotated[
        Optional[float],
        typer.Option(
            "--train-seconds",
            parser=bounded_float(1.0),
            help="With --folds: wall-clock budget of each model's training.",
        ),
    ] = None,
    threshold: Annotated[
        float,
        typer.Option(
            "--threshold", parser=bounded_float(0.0, 1.0), help="Flag arcs whose score is at least this (HTML)."
        ),
    ] = 0.9,
    html_limit: Annotated[int, typer.Option("--html-limit", min=1, help="Most sentences in the HTML report.")] = 100,
    top: Annotated[int, typer.Option("--top", min=1, help="Arcs printed when neither -o nor --html is given.")] = 20,
    quiet: Quiet = False,
    batch_size: BatchSize = 64,
) -> int:
    """Rank every gold arc and label of a CoNLL-U treebank by how unlikely the parser finds it."""
    from spacy_treexp.audit.report import arcs_csv, arcs_jsonl, audit_html
    from spacy_treexp.audit.run import audit_cross_fitted, audit_treebank, default_trainer, fold_training
    from spacy_treexp.audit.scoring import spacy_scorer
    from spacy_treexp.cli.pipelines import check_source, load_pipeline
    from spacy_treexp.io import ConlluError, read_conllu

    check_input_file(gold, "GOLD")
    kind = None
    if output is not None:
        kind = "jsonl" if is_stdio(output) else output.suffix.lower().lstrip(".")
        if kind not in ("jsonl", "csv"):
            raise UserError(f"--output {output}: expected a .jsonl or .csv path ('-': JSONL on stdout)")
        if not is_stdio(output):
            check_output_path(output, [gold])
    if html is not None and is_stdio(html):
        if output is not None and is_stdio(output):
            raise UserError("--html - and --output -: only one of them can go to standard output")
    elif html is not None:
        check_output_path(html, [gold], what="--html")
        if output is not None and not is_stdio(output) and html.resolve() == output.resolve():
            raise UserError(f"--html {html}: is also --output; give two paths")
    if folds and (model is not None or stanza is not None):
        raise UserError(f"--folds trains its own models; leave out {'--model' if stanza is None else '--stanza'}")
    check_source(model, stanza)
    if (train_steps is not None or train_seconds is not None) and not folds:
        raise UserError("--train-steps and --train-seconds need --folds")
    if folds == 1:
        raise UserError("--folds 1: cross-fitting needs at least 2 folds (0: off)")
    bad: List[str] = []

    def skip(error: ConlluError) -> None:
        bad.append(str(error))
        warn(f"{error} (sentence skipped)")

    def failed(sentence: Any, error: Exception) -> None:
        bad.append(str(error))
        warn(f"{gold}:{sentence.line}: sentence {sentence.sent_id or ''}: {' '.join(str(error).split())} (skipped)")

    errors: List[ConlluError] = []
    total = sum(1 for _ in read_conllu(gold, on_error=errors.append))
    if total == 0:  # nothing to audit: a failed run, not an empty table
        first = f": {' '.join(str(errors[0]).split())}" if errors else ""
        raise UserError(f"GOLD {gold}: no sentence could be read as CoNLL-U{first}")
    progress = tqdm(total=total, unit="sent", disable=quiet or None, file=sys.stderr)
    started = time.perf_counter()
    try:
        if folds:
            sentences = list(read_conllu(gold, on_error=skip))
            if len(sentences) < folds:
                raise UserError(f"--folds {folds}: GOLD has only {len(sentences)} sentence(s)")
            try:
                fold_training(sentences, folds)
            except ValueError as e:
                raise UserError(f"--folds {folds}: GOLD {gold}: {e}") from e
            result = audit_cross_fitted(
                sentences,
                folds,
                default_trainer(max_steps=train_steps, max_seconds=train_seconds),
                lambda path: spacy_scorer(load_pipeline(path), batch_size),
                progress=progress.update,
                log=lambda message: progress.write(message, file=sys.stderr),
                on_error=failed,
            )
        else:
            scorer = spacy_scorer(load_pipeline(model), batch_size) if stanza is None else _stanza(stanza, stanza_tags)
            result = audit_treebank(
                read_conllu(gold, on_error=skip),
                scorer,
                progress=progress.update,
                on_error=failed,
            )
    except KeyboardInterrupt:
        progress.close()
        warn("interrupted: nothing written")
        raise StopRun(130)  # said: main adds no line of its own
    except PipelineError as e:
        raise UserError(f"the pipeline cannot run: {e}") from e
    except (ValueError, RuntimeError, OSError) as e:
        progress.close()
        warn(f"spacy-treexp: audit: {' '.join(str(e).split())}")
        return 1
    finally:
        progress.close()
    seconds = time.perf_counter() - started
    ranked = result.ranked
    invalid = [s for s in result.sentences if s.tree_problem is not None]
    if output is not None:
        text = arcs_csv(ranked) if kind == "csv" else arcs_jsonl(ranked)
        if is_stdio(output):
            sys.stdout.write(text)
            sys.stdout.flush()
        else:
            write_output(output, text)
    if html is not None:
        note = f"Cross-fitted with {result.folds} folds." if result.folds else ""
        page = audit_html(result.sentences, ranked, threshold=threshold, limit=html_limit, note=note)
        if is_stdio(html):
            sys.stdout.write(page)
            sys.stdout.flush()
        else:
            write_output(html, page, "--html")
    if output is None and html is None:
        _print_top(ranked[:top])
    timing = f" in {seconds:.1f} s"
    if result.folds:
        timing += f" (training {sum(result.train_seconds):.0f} s for {result.folds} folds)"
    warn(
        f"audited {len(result.sentences)} sentences, {len(ranked)} arcs{timing}; {len(invalid)} invalid gold "
        f"tree(s), {sum(a.score >= threshold for a in ranked)} arc(s) with score >= {threshold:g}"
        + (f"; {len(bad)} sentence(s) skipped (malformed or not parsed)" if bad else "")
    )
    return 1 if bad and not result.sentences else 0


def _print_top(arcs: list) -> None:
    """The most suspicious arcs as a table on stdout."""
    print("rank\tsent_id\tid\tform\thead\tdeprel\tscore\tp(head|rest)\tmu(head)\tp(label|head)\tmodel head\tproblem")
    for a in arcs:
        conditional = "-" if a.conditional_head_prob is None else f"{a.conditional_head_prob:.3f}"
        label = "-" if a.label_prob is None else f"{a.label_prob:.3f}"
        head = "-" if a.head is None else a.head  # not a number in the file: tree_problem says why
        print(
            f"{a.rank}\t{a.sent_id}\t{a.id}\t{a.form}\t{head}\t{a.deprel}\t{a.score:.3f}\t{conditional}\t"
            f"{a.head_prob:.3f}\t{label}\t{a.best_head} ({a.best_head_prob:.2f})\t{a.tree_problem or ''}"
        )


def _stanza(folder: Path, tags: StanzaTags) -> Any:
    """The scorer of a Stanza pipeline folder; one line for a folder Stanza cannot load."""
    from spacy_treexp.audit.scoring import stanza_scorer

    try:
        return stanza_scorer(str(folder), tags.gold_tags)
    except (ValueError, RuntimeError, OSError) as e:  # as parse, calibrate and evaluate: one line
        raise UserError(f"--stanza {folder}: {' '.join(str(e).split())}") from e
