"""``spacy-treexp annotate INPUT -o OUTPUT``: stream a file through the pipeline.

.txt (one document per line), .jsonl (``{"text": ...}``) or .conllu (gold tokens and
sentences kept) in; .jsonl, .conllu (HeadProb and HeadEntropy in MISC) or .spacy (a folder
of DocBin shards) out; ``-`` for stdin or stdout. Each finished document is written at
once; a bad line is reported with its line number and skipped (``--strict`` stops).
"""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer
from tqdm import tqdm

from spacy_treexp.cli import outputs
from spacy_treexp.cli.common import (
    BatchSize,
    Gpu,
    InputFormatOption,
    Model,
    Stanza,
    StopRun,
    UserError,
    check_output_path,
    is_stdio,
    open_reader,
    sigterm_as_interrupt,
    warn,
)
from spacy_treexp.cli.pipelines import make_runner


class OutputFormat(str, Enum):
    jsonl = "jsonl"
    conllu = "conllu"
    spacy = "spacy"


def annotate(
    input: Annotated[
        Path, typer.Argument(metavar="INPUT", help="A .txt, .jsonl or .conllu file ('-': stdin).", show_default=False)
    ],
    output: Annotated[
        Path,
        typer.Option("--output", "-o", help=".jsonl, .conllu, or .spacy (a folder of DocBin shards); '-': stdout."),
    ],
    input_format: InputFormatOption = None,
    output_format: Annotated[
        Optional[OutputFormat],
        typer.Option("--output-format", help="Format of OUTPUT (default: from its suffix; needed for '-')."),
    ] = None,
    samples: Annotated[int, typer.Option("--samples", min=0, help="Trees to sample per sentence.")] = 0,
    n_process: Annotated[int, typer.Option("--n-process", min=1, help="Worker processes (spaCy only).")] = 1,
    strict: Annotated[bool, typer.Option("--strict", help="Stop at the first bad input (exit status 1).")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress bar.")] = False,
    model: Model = None,
    stanza: Stanza = None,
    batch_size: BatchSize = 64,
    gpu: Gpu = -1,
) -> int:
    """Annotate a .txt, .jsonl or .conllu file into .jsonl, .conllu or .spacy.

    Streams, and writes each document as soon as it is done; a bad input line is reported
    with its number and skipped (--strict: stop there, exit status 1).
    """
    if n_process > 1 and gpu >= 0:
        raise UserError("use --n-process 1 with --gpu")
    problems = 0

    def report(line: int, message: str) -> None:
        nonlocal problems
        problems += 1
        warn(f"{reader.name}:{line}: {message}")
        if strict:
            raise StopRun(1)

    reader = open_reader(input, input_format, report)
    fmt = _output_format(output, output_format, input)
    run = make_runner(
        model=model,
        stanza=stanza,
        gpu=gpu,
        batch_size=batch_size,
        n_samples=samples,
        gold_sentences=reader.gold_sentences,
        n_process=n_process,
        on_error=lambda context, e: report(context["line"], f"{type(e).__name__}: {e}"),
    )
    target = "<stdout>" if is_stdio(output) else str(output)
    written = 0
    with sigterm_as_interrupt():
        writer = outputs.make_writer(output, fmt)  # after every check: a mistake never clobbers
        progress = tqdm(total=reader.count(), unit="doc", disable=quiet or None, file=sys.stderr)
        try:
            for doc, context in run(reader):
                writer.write(doc, context)
                written += 1
                progress.update(1)
        except KeyboardInterrupt:
            progress.close()
            warn(f"interrupted: {written} documents written to {target}")
            return 130
        except StopRun:
            progress.close()
            warn(f"stopped at the first bad input (--strict): {written} documents written to {target}")
            raise
        finally:
            progress.close()
            writer.close()
    if problems:
        warn(f"{problems} bad input(s) skipped; {written} documents written.")
    return 0


def _output_format(output: Path, given: Optional[OutputFormat], source: Path) -> str:
    """The checked format of OUTPUT (``-``: stdout)."""
    if is_stdio(output):
        if given is None:
            raise UserError("--output -: writing to stdout needs --output-format (jsonl or conllu)")
        if given is OutputFormat.spacy:
            raise UserError("--output -: .spacy output is a folder of DocBin shards; it cannot go to stdout")
        return given.value
    fmt = given.value if given is not None else outputs.format_of(output)
    if fmt is None:
        raise UserError(f"--output {output}: expected a .jsonl, .conllu or .spacy path (or give --output-format)")
    check_output_path(output, [source], folder=fmt == "spacy")
    if fmt == "spacy":
        outputs.check_docbin_target(output)
    return fmt
