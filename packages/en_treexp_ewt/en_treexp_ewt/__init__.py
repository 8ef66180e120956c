"""``spacy.load("en_treexp_ewt")``: the English pipeline shipped inside spacy_treexp.

spaCy loads a pipeline by name only from an installed distribution of that name, by
importing it and calling its ``load()``. This package is that name; the pipeline itself,
weights included, lives in ``spacy_treexp/models/en_treexp_ewt`` (no copy here).
"""

from pathlib import Path
from typing import Any

__all__ = ["get_model_path", "load"]


def get_model_path() -> Path:
    """The folder of the pipeline's files (inside the installed spacy_treexp)."""
    from spacy_treexp.pipeline.default_model import MODEL_PATH

    return MODEL_PATH


def load(**overrides: Any):
    """The pipeline, as ``spacy_treexp.load(**overrides)`` (``vocab``, ``disable``,
    ``enable``, ``exclude``, ``config``: what ``spacy.load`` passes)."""
    import spacy_treexp

    return spacy_treexp.load(**overrides)
