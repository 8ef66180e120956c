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
