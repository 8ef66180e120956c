"""The ``spacy-treexp`` command line (also ``python -m spacy_treexp``): one module per command.

Exit status: 0 done; 1 the run failed (``--strict`` at a bad input, an evaluation error);
2 a mistake in the command line or its files, shown as one line ``spacy-treexp: ...``
on stderr (a missing input or ``--model``, an output in a folder that does not exist, is
a file or is not writable, an output that is the input or a link to it); 130 interrupted
(Ctrl-C or SIGTERM, which every command takes as Ctrl-C).

Outputs are never written in place: ``annotate`` writes ``OUTPUT.partial`` and a
manifest, renamed to OUTPUT when complete, and ``--resume`` finishes an interrupted run
(:mod:`spacy_treexp.cli.partial`); ``render`` renames a whole page into place.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from typing import Annotated, Optional

import typer

from spacy_treexp import __version__
from spacy_treexp.cli import annotate, calibrate, evaluate, parse, render
from spacy_treexp.cli import audit as audit_command
from spacy_treexp.cli import select as select_command
from spacy_treexp.cli import train as train_command
from spacy_treexp.cli.common import PROG, StopRun, UserError, sigterm_as_interrupt

_LINE_BREAKS = re.compile(r"\s*[\r\n]+\s*")

try:  # recent typer carries its own copy of click
    from typer._click import exceptions as click_exceptions
except ImportError:  # older typer runs on click
    from click import exceptions as click_exceptions  # type: ignore[no-redef]

app = typer.Typer(
    name=PROG,
    help="Dependency parses with exact arc marginals, tree entropy and sampled alternatives.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"{PROG} {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool, typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    """Dependency parses with exact arc marginals, tree entropy and sampled alternatives."""


app.command("parse")(parse.parse)
app.command("annotate")(annotate.annotate)
app.command("render")(render.render)
app.command("evaluate")(evaluate.evaluate)
app.command("calibrate")(calibrate.calibrate)
app.command("audit")(audit_command.audit)
app.command("select")(select_command.select)
app.command("train")(train_command.train)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command line on ``argv`` (default: ``sys.argv[1:]``); return the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    command = typer.main.get_command(app)
    try:
        with sigterm_as_interrupt():
            status = command.main(args=args, prog_name=PROG, standalone_mode=False, obj={"argv": args})
    except UserError as e:
        return _fail(str(e))
    except click_exceptions.NoArgsIsHelpError as e:
        help_text = e.format_message()  # empty when typer has printed the help with rich
        if help_text.strip():
            print(help_text, file=sys.stderr)
        return 2
    except click_exceptions.UsageError as e:
        hint = f" (see '{e.ctx.command_path} --help')" if e.ctx is not None else ""
        return _fail(e.format_message() + hint)
    except click_exceptions.ClickException as e:
        return _fail(e.format_message(), e.exit_code)
    except typer.Abort:
        return _fail("interrupted", 130)
    except StopRun as e:  # a command that has said why it stops (annotate, audit, select: what they kept)
        return e.code
    if status == 130:  # typer's status for Ctrl-C (or SIGTERM) in a command that says nothing of it
        return _fail("interrupted", 130)
    return status if isinstance(status, int) else 0


def _fail(message: str, status: int = 2) -> int:
    """One line on stderr, whatever the message holds."""
    print(f"{PROG}: {_LINE_BREAKS.sub(' ', message.strip())}", file=sys.stderr)
    return status


__all__ = ["app", "main"]
