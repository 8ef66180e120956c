"""A NaN or infinite setting in a pipeline's config is named (spaCy's own E961 does not)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from spacy_treexp.pipeline.config_checks import check_finite_settings, check_pipeline_folder, non_finite_settings


def test_every_non_finite_setting_is_found_with_its_path():
    config = {"a": 1.0, "b": {"c": math.nan, "d": {"e": -math.inf, "f": "nan"}}, "g": math.inf}
    assert sorted(path for path, _ in non_finite_settings(config)) == ["b.c", "b.d.e", "g"]
    assert list(non_finite_settings({"a": 1.0, "b": {"c": 2, "d": "inf"}})) == []


def test_the_message_names_the_source_the_setting_and_the_value():
    with pytest.raises(ValueError, match=r"cfg: .*components\.biaffine_parser\.arc_temperature = nan"):
        check_finite_settings({"components": {"biaffine_parser": {"arc_temperature": math.nan}}}, "cfg")
    check_finite_settings({"components": {"biaffine_parser": {"arc_temperature": 2.0}}}, "cfg")


def test_a_pipeline_folder_and_load_overrides(tmp_path: Path):
    from spacy_treexp.pipeline.default_model import MODEL_PATH, load

    folder = tmp_path / "model"
    folder.mkdir()
    text = (MODEL_PATH / "config.cfg").read_text()
    assert "arc_temperature = " in text
    lines = ["arc_temperature = NaN" if line.startswith("arc_temperature = ") else line for line in text.splitlines()]
    (folder / "config.cfg").write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"arc_temperature = nan"):
        check_pipeline_folder(folder)
    check_pipeline_folder(MODEL_PATH)
    with pytest.raises(ValueError, match=r"config overrides: .*rel_temperature = inf"):
        load(config={"components.biaffine_parser.rel_temperature": math.inf})
