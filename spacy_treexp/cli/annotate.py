"""``spacy-treexp annotate INPUT -o OUTPUT``: stream a file through the pipeline.

.txt (one document per line), .jsonl (``{"text": ...}``) or .conllu (gold tokens and
sentences kept) in; .jsonl, .conllu (HeadProb, HeadEntropy and DepProb in MISC, with members HeadMI
and MixtureHeadProb; sentence values as comments) or .spacy (a folder of DocBin shards) out; ``-`` for stdin or stdout. A bad line is reported with its line
number and skipped (``--strict`` stops).

Nothing lost: each finished document is written at once to ``OUTPUT.partial`` (a file, or
a folder of shards for .spacy) with a manifest ``OUTPUT.partial.manifest``, and only a
complete run renames the partial to OUTPUT (an existing OUTPUT is replaced whole, never
truncated). Ctrl-C or SIGTERM stop with exit status 130 and leave the partial holding
complete records; ``--resume`` finishes such a run, or one that was killed, with no
duplicate and no gap. The layout and the resume rule: :mod:`spacy_treexp.cli.partial`.
Standard output gets each record at once and cannot be resumed.

``--backend ray`` annotates a file, a folder or a glob on a Ray cluster into a directory
of shards (Parquet, JSONL, CoNLL-U or .spacy) with a manifest, committed shard by shard:
:mod:`spacy_treexp.scale.backend`. Ray is imported only then.
"""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer
from tqdm import tqdm

from spacy_treexp.cli import outputs, partial
from spacy_treexp.cli.common import (
    PROG,
    BatchSize,
    Code,
    Gpu,
    InputFormatOption,
    Model,
    Quiet,
    Skipped,
    Stanza,
    StopRun,
    UserError,
    bounded_float,
    check_output_path,
    is_stdio,
    open_reader,
    same_file,
    warn,
)
from spacy_treexp.cli.pipelines import make_runner


class OutputFormat(str, Enum):
    jsonl = "jsonl"
    conllu = "conllu"
    spacy = "spacy"
    parquet = "parquet"


class Backend(str, Enum):
    local = "local"
    ray = "ray"


def annotate(
    input: Annotated[
        Path,
        typer.Argument(
            metavar="INPUT",
            help="A .txt, .jsonl or .conllu file ('-': stdin); with --backend ray also a folder or a glob.",
            show_default=False,
        ),
    ],
    output: Annotated[
        Path,
        typer.Option(
            "--output",
            "-o",
            help=".jsonl, .conllu, or .spacy (a folder of DocBin shards); '-': stdout. "
            "With --backend ray: a folder of shards.",
        ),
    ],
    input_format: InputFormatOption = None,
    output_format: Annotated[
        Optional[OutputFormat],
        typer.Option(
            "--output-format",
            help="Format of OUTPUT (default: from its suffix; needed for '-'). "
            "parquet: --backend ray only, and its default.",
        ),
    ] = None,
    samples: Annotated[int, typer.Option("--samples", min=0, help="Trees to sample per sentence.")] = 0,
    n_process: Annotated[int, typer.Option("--n-process", min=1, help="Worker processes (spaCy only).")] = 1,
    strict: Annotated[bool, typer.Option("--strict", help="Stop at the first bad input (exit status 1).")] = False,
    resume: Annotated[
        bool,
        typer.Option(
            "--resume",
            help="Finish the interrupted run whose OUTPUT.partial is there (same INPUT and options); "
            "without one, just run.",
        ),
    ] = False,
    quiet: Quiet = False,
    shard_size: Annotated[
        int,
        typer.Option(
            "--shard-size", min=1, help="Docs per DocBin shard of a .spacy OUTPUT; per shard with --backend ray."
        ),
    ] = outputs.SHARD_SIZE,
    backend: Annotated[
        Backend, typer.Option("--backend", help="local: this process (and --n-process); ray: a Ray cluster.")
    ] = Backend.local,
    ray_address: Annotated[
        Optional[str],
        typer.Option(
            "--ray-address", help="Ray cluster to join (default: RAY_ADDRESS, else Ray started on this machine)."
        ),
    ] = None,
    workers: Annotated[
        Optional[int],
        typer.Option(
            "--workers", min=1, help="Ray actors, each loading the pipeline once (default: CPUs / --worker-cpus)."
        ),
    ] = None,
    worker_cpus: Annotated[
        float, typer.Option("--worker-cpus", parser=bounded_float(0.01), help="CPUs per Ray actor (its torch threads).")
    ] = 1.0,
    worker_gpus: Annotated[
        float, typer.Option("--worker-gpus", parser=bounded_float(0.0), help="GPUs per Ray actor (0: CPU).")
    ] = 0.0,
    model: Model = None,
    code: Code = None,
    stanza: Stanza = None,
    batch_size: BatchSize = 64,
    gpu: Gpu = -1,
) -> int:
    """Annotate a .txt, .jsonl or .conllu file into .jsonl, .conllu or .spacy.

    Streams, and writes each document as soon as it is done to OUTPUT.partial, renamed to
    OUTPUT when the run is complete; --resume finishes an interrupted run. A bad input
    line is reported with its number and skipped (--strict: stop there, exit status 1; exit
    status 1 too when every input of the run was bad).
    """
    if backend is Backend.ray:
        return _annotate_ray(
            input=input,
            output=output,
            input_format=input_format.value if input_format is not None else None,
            output_format=output_format,
            samples=samples,
            n_process=n_process,
            strict=strict,
            resume=resume,
            quiet=quiet,
            shard_size=shard_size,
            model=model,
            stanza=stanza,
            batch_size=batch_size,
            gpu=gpu,
            ray_address=ray_address,
            workers=workers,
            worker_cpus=worker_cpus,
            worker_gpus=worker_gpus,
            code=code,
        )
    for name, given in (("--ray-address", ray_address), ("--workers", workers)):
        if given is not None:
            raise UserError(f"{name} needs --backend ray")
    if output_format is OutputFormat.parquet:
        raise UserError("--output-format parquet needs --backend ray (a folder of Parquet shards)")
    if n_process > 1 and gpu >= 0:
        raise UserError("use --n-process 1 with --gpu")
    skipped = Skipped()

    def report(line: int, message: str) -> None:
        skipped(f"{reader.name}:{line}: {message}")
        if strict:
            raise StopRun(1)

    reader = open_reader(input, input_format, report)
    fmt = _output_format(output, output_format, input)
    kept: Optional[partial.Kept] = None
    header = None
    if is_stdio(output):
        if resume:
            raise UserError("--resume: standard output cannot be resumed; give --output a file")
    else:
        paths = partial.OutputPaths.of(output)
        for path in (paths.partial, paths.manifest):
            if same_file(path, input):
                raise UserError(f"--output {output}: {path} is the input file; write to another path")
        folder = fmt == "spacy"
        if resume and partial.is_complete(paths, folder):
            warn(f"--output {output} is complete (no {paths.partial} to resume); nothing to do")
            return 0
        if folder:
            outputs.check_docbin_target(paths.target)
        header = partial.run_header(
            fmt=fmt, input=input, input_format=reader.format, model=model, stanza=stanza, samples=samples
        )
        kept = partial.prepare(paths, header, resume=resume, folder=folder)
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
    if kept is not None:
        reader.start_after = kept.line
        warn(f"resuming: {kept.docs} documents kept, going on after input line {kept.line}")
    total = reader.count()
    writer = outputs.make_writer(output, fmt, header=header, kept=kept, shard_size=shard_size)
    progress = tqdm(
        total=total,
        initial=min(writer.docs, total or writer.docs),
        unit="doc",
        disable=quiet or None,
        file=sys.stderr,
    )
    written = 0
    try:
        for doc, context in run(reader):
            writer.write(doc, context)
            written += 1
            progress.update(1)
        if skipped.failed(written) and writer.docs == 0 and not is_stdio(output):
            # every input was bad: nothing to put in place, so OUTPUT (an earlier run's) stays as it was
            writer.close()
            partial.discard_partial(output)
            return skipped.annotate_status(0, f"{output} (left as it was)", 0)
        writer.finish()
    except KeyboardInterrupt:
        progress.close()
        writer.close()
        if is_stdio(output):
            how = ""
        elif header is not None and partial.can_resume(header):
            how = "; run the same command with --resume to finish it"
        else:
            how = (
                f"; a run on standard input or a pipe cannot be resumed: delete {paths.partial} and "
                f"{paths.manifest}, then run again"
            )
        warn(f"interrupted: {writer.docs} documents written to {writer.where}{how}")
        raise StopRun(130)  # said: main adds no line of its own
    except StopRun:
        progress.close()
        writer.close()
        warn(f"stopped at the first bad input (--strict): {writer.docs} documents written to {writer.where}")
        raise
    except OSError as e:
        progress.close()
        writer.close()
        warn(f"{PROG}: {e.strerror or e}: {e.filename or output}; {writer.docs} documents written to {writer.where}")
        return 1
    finally:
        progress.close()
        writer.close()
    return skipped.annotate_status(writer.docs, writer.where, written)  # written: this run's own


def _annotate_ray(
    *,
    input: Path,
    output: Path,
    input_format: Optional[str],
    output_format: Optional[OutputFormat],
    samples: int,
    n_process: int,
    strict: bool,
    resume: bool,
    quiet: bool,
    shard_size: int,
    model: Optional[str],
    stanza: Optional[Path],
    batch_size: int,
    gpu: int,
    ray_address: Optional[str],
    workers: Optional[int],
    worker_cpus: float,
    worker_gpus: float,
    code: Optional[Path] = None,
) -> int:
    """``--backend ray``: the sharded run of :mod:`spacy_treexp.scale.backend`."""
    from spacy_treexp.scale.backend import FORMATS, annotate_sharded, check_ray_target, import_ray, ray_executor

    if is_stdio(input) or is_stdio(output):
        raise UserError("--backend ray reads files and writes a folder of shards, not '-'")
    if stanza is not None:
        raise UserError("--backend ray runs spaCy pipelines (--model), not --stanza")
    if n_process > 1:
        raise UserError("--backend ray: give --workers, not --n-process")
    if gpu >= 0:
        raise UserError("--backend ray: give --worker-gpus, not --gpu (Ray assigns the GPUs)")
    suffix = output.suffix.lower().lstrip(".")
    fmt = output_format.value if output_format is not None else (suffix if suffix in FORMATS else "parquet")
    import_ray()
    check_ray_target(ray_address, workers, worker_cpus, worker_gpus)
    executor = ray_executor(
        model=model,
        samples=samples,
        batch_size=batch_size,
        fmt=fmt,
        address=ray_address,
        workers=workers,
        worker_cpus=worker_cpus,
        worker_gpus=worker_gpus,
        quiet=quiet,
        code=None if code is None else str(code),
    )
    return annotate_sharded(
        input=str(input),
        output=output,
        fmt=fmt,
        input_format=input_format,
        model=model,
        samples=samples,
        batch_size=batch_size,
        shard_size=shard_size,
        resume=resume,
        strict=strict,
        quiet=quiet,
        executor=executor,
    )


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
    return fmt
