"""``spacy-treexp select CORPUS --budget N``: which unlabelled sentences to annotate next.

Parses CORPUS (.txt, .jsonl or .conllu; ``-`` with ``--input-format``) as ``annotate`` does
(a spaCy pipeline, or a Stanza folder with ``--stanza``), streaming, and ranks its sentences by the strategy's value per word
(:mod:`spacy_treexp.audit.select`): ``expected_errors`` (default), ``entropy``,
``mutual_information`` (needs an ensemble whose annotations carry it) or ``random``. The
budget is in words by default, as an annotator is paid per word (``--unit sentences`` counts
sentences); near-duplicates of a chosen sentence are skipped. Output: one JSON object per
chosen sentence, best first, with its scores and where it comes from (input line, sentence
number in that document).
"""

from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, List

import numpy
import typer
from spacy.tokens import Span
from tqdm import tqdm

from spacy_treexp.cli.common import (
    BatchSize,
    Code,
    InputFormatOption,
    Model,
    Quiet,
    Skipped,
    Stanza,
    StopRun,
    UserError,
    check_output_path,
    is_stdio,
    open_reader,
    warn,
    write_output,
)


class Strategy(str, Enum):
    expected_errors = "expected_errors"
    entropy = "entropy"
    mutual_information = "mutual_information"
    random = "random"


class Unit(str, Enum):
    words = "words"
    sentences = "sentences"


def select(
    corpus: Annotated[
        Path,
        typer.Argument(metavar="CORPUS", help="Unlabelled .txt, .jsonl or .conllu ('-': stdin).", show_default=False),
    ],
    budget: Annotated[int, typer.Option("--budget", min=1, help="Words (or --unit sentences) to select.")],
    strategy: Annotated[Strategy, typer.Option("--strategy", help="Value of a sentence, per word.")] = (
        Strategy.expected_errors
    ),
    unit: Annotated[Unit, typer.Option("--unit", help="What the budget counts.")] = Unit.words,
    output: Annotated[Path, typer.Option("--output", "-o", help="The selection as .jsonl ('-': stdout).")] = Path("-"),
    dedup_threshold: Annotated[
        float,
        typer.Option(
            "--dedup-threshold",
            min=0.0,
            max=1.0,
            help="Skip a sentence whose word-set Jaccard with a chosen one is this high.",
        ),
    ] = 0.8,
    no_dedup: Annotated[bool, typer.Option("--no-dedup", help="Keep near-duplicates.")] = False,
    seed: Annotated[int, typer.Option("--seed", help="Seed of --strategy random.")] = 0,
    input_format: InputFormatOption = None,
    model: Model = None,
    code: Code = None,
    stanza: Stanza = None,
    batch_size: BatchSize = 64,
    quiet: Quiet = False,
) -> int:
    """Rank unlabelled sentences for annotation and choose them within a budget."""
    from spacy_treexp.audit.select import Candidate, candidate, finite
    from spacy_treexp.audit.select import select as choose
    from spacy_treexp.cli.pipelines import check_source, make_runner
    from spacy_treexp.pipeline import attributes

    if dedup_threshold <= 0.0 and not no_dedup:
        raise UserError("--dedup-threshold must be above 0 (use --no-dedup to keep near-duplicates)")
    if not is_stdio(output):
        if output.suffix.lower() != ".jsonl":
            raise UserError(f"--output {output}: expected a .jsonl path ('-': stdout)")
        check_output_path(output, [corpus])
    check_source(model, stanza)
    skip = Skipped()
    reader = open_reader(corpus, input_format, lambda line, message: skip(f"{reader.name}:{line}: {message}"))
    run = make_runner(
        model=model,
        stanza=stanza,
        gpu=-1,
        batch_size=batch_size,
        n_samples=0,
        gold_sentences=reader.gold_sentences,
        n_process=1,
        on_error=lambda context, e: skip(f"{reader.name}:{context['line']}: {type(e).__name__}: {e} (skipped)"),
    )
    items: List[Candidate] = []
    parsed = 0
    progress = tqdm(total=reader.count(), unit="doc", disable=quiet or None, file=sys.stderr)
    try:
        for doc, context in run(reader):
            for k, record in enumerate(doc._.get(attributes.STORE) or []):
                mutual_information = finite(getattr(record, "mutual_information", None))
                if strategy is Strategy.mutual_information and mutual_information is None:
                    raise UserError(
                        "--strategy mutual_information: the pipeline's annotations carry no mutual information; "
                        "it needs an ensemble parser (several members' scores)"
                    )
                words, expected_attachment = _words(doc[record.start : record.end], record)
                if not words:  # whitespace only: nothing to annotate
                    continue
                items.append(
                    candidate(
                        doc[record.start : record.end].text,
                        words,
                        expected_attachment,
                        record.entropy,
                        mutual_information,
                        {"line": context.get("line"), "sentence": k + 1},  # 1-based, as the line
                    )
                )
            parsed += 1
            progress.update(1)
    except KeyboardInterrupt:
        progress.close()
        warn("interrupted: nothing written")
        raise StopRun(130)  # said: main adds no line of its own
    finally:
        progress.close()
    if skip.nothing_parsed(parsed):
        return 1
    selection = choose(
        items, strategy.value, budget, unit=unit.value, dedup_threshold=None if no_dedup else dedup_threshold, seed=seed
    )
    lines = []
    spent = 0
    for rank, item in enumerate(selection.chosen, start=1):
        spent += item.words
        record = {"rank": rank, "strategy": strategy.value, **item.to_dict(), "cumulative_words": spent}
        lines.append(json.dumps(record, ensure_ascii=False) + "\n")
    text = "".join(lines)
    if is_stdio(output):
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        write_output(output, text)
    warn(
        f"selected {len(selection.chosen)} of {selection.candidates} sentences, {selection.words} words "
        f"(budget {budget} {unit.value}, strategy {strategy.value}); {selection.duplicates} near-duplicate(s) skipped, "
        f"{selection.too_long} passed over for not fitting the rest of the budget"
        + (f", {selection.wordless} without a letter or digit left out" if selection.wordless else "")
    )
    return 0


def _words(sent: Span, record: Any) -> tuple[int, float]:
    """The sentence's words and the expected fraction of them with the right head. Whitespace
    tokens (extra spaces, tabs, line breaks: nodes of the parse) are not words an annotator
    checks or is paid for: they count neither in the budget nor in the expected errors."""
    words = numpy.array([not token.is_space for token in sent], dtype=bool)
    n = int(words.sum())
    if n == record.n:
        return record.n, record.expected_attachment
    if n == 0:
        return 0, 1.0
    return n, float(numpy.asarray(record.head_prob, dtype=numpy.float64)[words].mean())
