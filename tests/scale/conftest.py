"""Fixtures of the scale-out tests: a tiny biaffine pipeline saved to disk (loadable by any
process, Ray workers included, through the package's entry points) and small inputs."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.toy_pipelines import TINY_CONFIG, train_toy

WORDS = "the cat dog man saw a bird with telescope in garden old red sang plays reads".split()


def text(i: int) -> str:
    """Document i: one or two sentences, of lengths that vary with i."""
    words = [WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(3 + i % 9)]
    first = " ".join(words).capitalize() + " ."
    return first + (" Another one is here ." if i % 3 == 0 else "")


def _write_txt(path: Path, n: int, blank_at: tuple[int, ...] = ()) -> Path:
    lines = []
    for i in range(n):
        lines.append(text(i) + "\n")
        if i in blank_at:
            lines.append("\n")
    path.write_text("".join(lines), encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def write_txt():
    """``write_txt(path, n, blank_at=())``: ``n`` documents, one a line, with an empty line
    after each document in ``blank_at``; returns ``path``."""
    return _write_txt


@pytest.fixture(scope="session")
def toy_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    """tok2vec + sentencizer + biaffine_parser, initialised on the toy treebank (one update)."""
    nlp, _, _ = train_toy(TINY_CONFIG, 1)
    path = tmp_path_factory.mktemp("scale") / "toy"
    nlp.to_disk(path)
    return str(path)


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str]):
    """``run_cli(*args)`` -> (exit status, stdout, stderr) of an in-process run."""
    from spacy_treexp.cli import main

    def run(*args: str) -> tuple[int, str, str]:
        status = main(list(args))
        captured = capsys.readouterr()
        return status, captured.out, captured.err

    return run
