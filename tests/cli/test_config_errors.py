"""A NaN or infinite setting in a ``--model`` folder's config: one line naming it."""

from __future__ import annotations

import shutil
from pathlib import Path


def test_the_cli_names_a_nan_temperature_in_a_model_folder(tmp_path: Path, user_error):
    from spacy_treexp.pipeline.default_model import MODEL_PATH

    folder = tmp_path / "model"
    shutil.copytree(MODEL_PATH, folder)
    config = folder / "config.cfg"
    lines = [
        "arc_temperature = Infinity" if line.startswith("arc_temperature = ") else line
        for line in config.read_text().splitlines()
    ]
    config.write_text("\n".join(lines) + "\n")
    message = user_error("parse", "Hi.", "--model", str(folder))
    assert "arc_temperature = inf" in message and "config.cfg" in message


def _misfit_pipeline(path: Path) -> str:
    """A pipeline with a component that refuses every Doc because of the pipeline around it (as a
    product parser with no parser before it does): a PipelineError."""
    import spacy
    from spacy.language import Language

    from spacy_treexp.pipeline.config_checks import PipelineError

    if "treexp_test_misfit" not in Language.factories:

        @Language.component("treexp_test_misfit")
        def misfit(doc):
            raise PipelineError("treexp_test_misfit: put a parser before it")

    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("treexp_test_misfit")
    nlp.add_pipe("treexp_test_scorer")
    nlp.to_disk(path)
    return str(path)


def test_a_pipeline_that_cannot_run_stops_with_one_line_not_one_per_document(tmp_path: Path, user_error, conllu_file):
    """Each document used to be reported as failed (30 lines for 30 inputs, exit 1): the
    pipeline's fault is one user error, exit 2, for every command that runs a pipeline."""
    import helpers.scorer  # noqa: F401  (registers the treexp_test_scorer factory)

    model = _misfit_pipeline(tmp_path / "misfit")
    texts = tmp_path / "in.txt"
    texts.write_text("".join(f"Sentence number {i}.\n" for i in range(12)), encoding="utf8")
    for args in (
        ("annotate", str(texts), "-o", str(tmp_path / "out.jsonl"), "--quiet"),
        ("parse", "One. Two."),
        ("audit", str(conllu_file), "--quiet", "-o", str(tmp_path / "audit.jsonl")),
    ):
        message = user_error(*args, "--model", model)
        assert "the pipeline cannot run" in message and "put a parser before it" in message
