"""The default English pipeline shipped inside the package (see its MODEL_CARD.md).

``tok2vec`` + ``senter`` + ``morphologizer`` (UPOS and features) + ``biaffine_parser``,
trained on UD English-EWT with ``configs/train_en_ewt.sh``. No download step: the files
live in ``spacy_treexp/models/en_treexp_ewt``.
"""

from pathlib import Path
from typing import Any

import spacy
from spacy.language import Language

from spacy_treexp.pipeline.config_checks import check_pipeline_folder

MODEL_NAME = "en_treexp_ewt"
MODEL_PATH = Path(__file__).resolve().parent.parent / "models" / MODEL_NAME
LOAD_OPTIONS = ("vocab", "disable", "enable", "exclude", "config")


def load(**overrides: Any) -> Language:
    """Load the shipped English pipeline.

    ``overrides`` are passed to ``spacy.load``: ``disable``, ``enable``, ``exclude``,
    ``config`` (config overrides, e.g. ``{"components.biaffine_parser.decoding": "mbr"}``)
    or ``vocab``.
    """
    unknown = sorted(set(overrides) - set(LOAD_OPTIONS))
    if unknown:
        raise ValueError(f"spacy_treexp.load: unknown option(s) {unknown}; expected {LOAD_OPTIONS}")
    if not (MODEL_PATH / "config.cfg").exists():
        raise FileNotFoundError(
            f"The default pipeline is missing from {MODEL_PATH}: reinstall spacy_treexp or "
            "rebuild it with configs/train_en_ewt.sh"
        )
    check_pipeline_folder(MODEL_PATH, overrides.get("config"))
    return spacy.load(MODEL_PATH, **overrides)
