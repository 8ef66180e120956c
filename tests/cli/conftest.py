"""Fixtures of the command-line tests: tiny spaCy pipelines whose test scorer
(``helpers.scorer``) writes reproducible random arc scores (no trained parser), a small
CoNLL-U file, and runners of the command line in this process."""

from __future__ import annotations

from pathlib import Path

import helpers.scorer  # noqa: F401  (registers the treexp_test_scorer factory)
import pytest
import spacy
from spacy.tokens import Doc

CONLLU = """# newdoc id = d1
# sent_id = s1
# text = Hello . World don't
1	Hello	hello	INTJ	UH	_	4	discourse	_	_
2	.	.	PUNCT	.	_	1	punct	_	_
3	World	world	NOUN	NN	_	4	nsubj	_	_
4-5	don't	_	_	_	_	_	_	_	SpaceAfter=No
4	do	do	AUX	VBP	_	0	root	_	_
5	n't	not	PART	RB	_	4	advmod	_	Gold=yes
6	!	!	PUNCT	.	_	4	punct	_	_

# sent_id = s2
# text = Yes.
1	Yes	yes	INTJ	UH	_	0	root	_	SpaceAfter=No
2	.	.	PUNCT	.	_	1	punct	_	_
"""


def save_pipeline(path: Path, *components: str, fail_on: str = "", members: int = 0) -> str:
    """A blank English pipeline of ``components`` then the test scorer (with ``members``
    ensemble members), saved at ``path``."""
    nlp = spacy.blank("en")
    for name in components:
        nlp.add_pipe(name)
    nlp.add_pipe("treexp_test_scorer", config={"fail_on": fail_on, "members": members})
    nlp.to_disk(path)
    return str(path)


@pytest.fixture(scope="session")
def model(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A sentencizer and the test scorer (refusing documents that contain "FAIL")."""
    return save_pipeline(tmp_path_factory.mktemp("cli") / "pipeline", "sentencizer", fail_on="FAIL")


@pytest.fixture(scope="session")
def members_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A sentencizer and the test scorer with 3 ensemble members."""
    return save_pipeline(tmp_path_factory.mktemp("cli") / "members", "sentencizer", members=3)


@pytest.fixture(scope="session")
def paragraph_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    """paragraph_breaks, a sentencizer and the test scorer (whitespace tokens in the Docs)."""
    return save_pipeline(tmp_path_factory.mktemp("cli") / "paragraphs", "paragraph_breaks", "sentencizer")


@pytest.fixture(scope="session")
def reference(model: str):
    """``reference(text, n_samples)``: the Doc the command line's pipeline makes."""
    from spacy_treexp.cli.pipelines import load_pipeline

    pipelines = {}

    def annotate(text: str, n_samples: int = 0) -> Doc:
        if n_samples not in pipelines:
            pipelines[n_samples] = load_pipeline(model, n_samples=n_samples)
        return pipelines[n_samples](text)

    return annotate


@pytest.fixture
def conllu_file(tmp_path: Path) -> Path:
    """A two-sentence CoNLL-U file with a multiword token and a MISC item of its own."""
    path = tmp_path / "in.conllu"
    path.write_text(CONLLU, encoding="utf-8")
    return path


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str]):
    """``run_cli(*args)`` -> (exit status, stdout, stderr) of an in-process run."""
    from spacy_treexp.cli import main

    def run(*args: str) -> tuple[int, str, str]:
        status = main(list(args))
        captured = capsys.readouterr()
        return status, captured.out, captured.err

    return run


@pytest.fixture
def user_error(run_cli):
    """``user_error(*args)`` -> the one line a user error prints, once checked: exit
    status 2, a single line ``spacy-treexp: ...`` on stderr, no traceback, nothing on stdout."""

    def run(*args: str) -> str:
        status, out, err = run_cli(*args)
        assert status == 2, err
        assert err.startswith("spacy-treexp: ") and err.count("\n") == 1, err
        assert "Traceback" not in err and out == ""
        return err.strip()

    return run
