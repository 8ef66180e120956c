"""The ``spacy-treexp`` entry points: version, help, exit statuses of usage errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import spacy_treexp


def test_version(run_cli):
    assert run_cli("--version") == (0, f"spacy-treexp {spacy_treexp.__version__}\n", "")


def test_usage_errors_are_one_line_with_status_2(user_error):
    assert "frob" in user_error("frob")
    assert "--output" in user_error("annotate", "in.txt")
    assert "--no-such-option" in user_error("parse", "Hi.", "--no-such-option")


def test_no_command_shows_the_help(run_cli):
    status, out, err = run_cli()
    assert status == 2 and "annotate" in out + err and "Traceback" not in err


def test_module_and_console_script_entry_points():
    script = Path(sys.executable).parent / "spacy-treexp"  # installed by pip with the package
    for command in ([sys.executable, "-m", "spacy_treexp", "--help"], [str(script), "--help"]):
        result = subprocess.run(command, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0 and "annotate" in result.stdout and "render" in result.stdout
    result = subprocess.run(
        [str(script), "annotate", "missing.txt", "-o", "out.jsonl"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2 and result.stderr == "spacy-treexp: INPUT missing.txt: no such file\n"


def test_option_help_survives_rich_markup():
    """typer renders help with rich, which drops ``[word...]`` as a markup tag (the --l2
    help once lost its whole default that way): no option's help may hold one."""
    import re

    import typer.main

    from spacy_treexp.cli import app

    group = typer.main.get_command(app)
    found = []
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        for param in command.params:
            text = getattr(param, "help", None) or ""
            if re.search(r"\[[A-Za-z/]", text):
                found.append(f"{name} {param.name}: {text}")
    assert found == []
