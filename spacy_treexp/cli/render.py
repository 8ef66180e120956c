"""``spacy-treexp render INPUT -o page.html``: the standalone HTML view of a file's parses.

The page is written to a temporary file beside OUTPUT and renamed into place once whole
(:func:`spacy_treexp.io.files.write_atomic`): an interrupted run leaves OUTPUT as it
was. OUTPUT may not be INPUT (nor a link to it); ``-`` writes to standard output."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import spacy
import typer

from spacy_treexp.cli.common import (
    BatchSize,
    Code,
    Gpu,
    InputFormatOption,
    Model,
    Skipped,
    Stanza,
    UserError,
    bounded_float,
    check_output_path,
    is_stdio,
    open_reader,
    take,
    warn,
    write_output,
)
from spacy_treexp.cli.outputs import read_docbin
from spacy_treexp.cli.pipelines import make_runner
from spacy_treexp.pipeline.render import render as render_html


def render(
    input: Annotated[
        Path,
        typer.Argument(
            metavar="INPUT",
            help="A .txt, .jsonl or .conllu file ('-': stdin), or a .spacy written by annotate (or a folder of its shards).",
            show_default=False,
        ),
    ],
    output: Annotated[Path, typer.Option("--output", "-o", help="The HTML page ('-': stdout).")],
    input_format: InputFormatOption = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="Documents to render.")] = 20,
    alt_threshold: Annotated[
        float,
        typer.Option(
            "--alt-threshold", parser=bounded_float(0.0, 1.0), help="Show alternative heads from this marginal."
        ),
    ] = 0.1,
    model: Model = None,
    code: Code = None,
    stanza: Stanza = None,
    batch_size: BatchSize = 64,
    gpu: Gpu = -1,
) -> int:
    """Write the HTML view of the first --limit documents of a file.

    Arcs drawn by their marginal, alternative heads dashed, words shaded by head entropy,
    and a heat map of the marginals per sentence.
    """
    if not is_stdio(output):
        check_output_path(output, [input])
    shards = input.is_dir() and any(input.glob("*.spacy"))  # --backend ray's folder, under any name
    if (input.suffix.lower() == ".spacy" or shards) and input_format is None:
        if not input.exists():
            raise UserError(f"INPUT {input}: no such file or folder")
        try:
            docs = list(take(read_docbin(input, spacy.blank("xx").vocab), limit))
        except (ValueError, OSError) as e:  # not a DocBin (E1014), a shard that cannot be read
            raise UserError(
                f"INPUT {input}: cannot read it as .spacy DocBin shards ({' '.join(str(e).split())})"
            ) from e
    else:
        skip = Skipped()
        reader = open_reader(input, input_format, lambda line, message: skip(f"{reader.name}:{line}: {message}"))
        run = make_runner(
            model=model,
            stanza=stanza,
            gpu=gpu,
            batch_size=batch_size,
            n_samples=0,
            gold_sentences=reader.gold_sentences,
            n_process=1,
            on_error=lambda context, e: skip(f"{reader.name}:{context['line']}: {type(e).__name__}: {e}"),
        )
        docs = [doc for doc, _ in run(take(iter(reader), limit))]
        if skip.nothing_parsed(len(docs)):
            return 1
    try:
        html = render_html(docs, alt_threshold=alt_threshold)
    except ValueError as e:  # a .spacy of Docs without the tree_expectations annotation
        raise UserError(f"INPUT {input}: {' '.join(str(e).split())}") from e
    if is_stdio(output):
        sys.stdout.write(html)
        sys.stdout.flush()
    else:
        write_output(output, html)
    warn(f"wrote {len(docs)} document(s) to {'<stdout>' if is_stdio(output) else output}")
    return 0
