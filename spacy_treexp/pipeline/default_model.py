"""The default English pipeline shipped inside the package (see its MODEL_CARD.md).

``tok2vec`` + ``senter`` + ``morphologizer`` (UPOS and features) + ``biaffine_parser``,
trained on UD English-EWT with ``configs/train_en_ewt.sh``. No download step: the files
live in ``spacy_treexp/models/en_treexp_ewt``.
"""

from pathlib import Path
from typing import Any, Optional

import spacy
from spacy.language import Language

from spacy_treexp.pipeline.config_checks import check_pipeline_folder

MODEL_NAME = "en_treexp_ewt"
MODEL_PATH = Path(__file__).resolve().parent.parent / "models" / MODEL_NAME
LOAD_OPTIONS = ("vocab", "disable", "enable", "exclude", "config")
#: A small ``biaffine_parser`` trained on en_core_web_sm 3.8's own frozen tok2vec
#: (``configs/train_en_core_web_sm_head.sh``; MODEL_CARD.md, "The head for en_core_web_sm").
STOCK_HEAD_NAME = "en_core_web_sm_head"
STOCK_HEAD_PATH = MODEL_PATH.parent / STOCK_HEAD_NAME


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


def stock_head_for(nlp: Language) -> Optional[Language]:
    """The shipped head (:data:`STOCK_HEAD_PATH`) loaded, when ``nlp``'s ``tok2vec`` has the
    weights the head was trained on, byte for byte (en_core_web_sm 3.8's); else None.

    Sourced into ``nlp``, such a head reads the tok2vec output the host computes anyway
    (``doc.tensor``; ``BiaffineParser._reads_host_tensors``) instead of running an encoder
    of its own, which is what makes it cheap."""
    saved = STOCK_HEAD_PATH / "tok2vec" / "model"
    tok2vec = nlp.get_pipe("tok2vec") if "tok2vec" in nlp.pipe_names else None
    model = getattr(tok2vec, "model", None)
    if model is None or not saved.is_file():
        return None
    weights = model.to_bytes()
    if len(weights) != saved.stat().st_size or weights != saved.read_bytes():
        return None
    return spacy.load(STOCK_HEAD_PATH)
