"""Checks of a pipeline's config before spaCy builds it.

spaCy refuses a component setting that JSON cannot hold (NaN, +-inf) with E961, "non-serializable
Python object", raised in ``create_pipe`` before any factory runs, so the component itself cannot
name the setting. :func:`check_finite_settings` names it; the package's loaders
(:func:`spacy_treexp.load`, the CLI's ``--model``) run it first. :func:`missing_sentence_source`
tells ``biaffine_parser.initialize`` that a pipeline leaves it without sentence boundaries, which
spaCy itself only finds when the first Doc is parsed. :class:`PipelineError` is what a component
raises when the pipeline around it, not the Doc, is wrong. This module does not import spaCy.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Collection, Iterator, Mapping, Optional, Sequence, Tuple


class PipelineError(ValueError):
    """The pipeline's components do not fit together (a product parser with no parser before it,
    parsers whose labels differ, ...): found at the first Doc, and every Doc would fail alike, so
    a command stops with one message instead of reporting each document."""


def non_finite_settings(config: Mapping[str, Any], where: str = "") -> Iterator[Tuple[str, float]]:
    """Every ``(dotted.path, value)`` of ``config`` whose value is a non-finite float."""
    for key, value in config.items():
        path = f"{where}.{key}" if where else str(key)
        if isinstance(value, Mapping):
            yield from non_finite_settings(value, path)
        elif isinstance(value, float) and not math.isfinite(value):
            yield path, value


def check_finite_settings(config: Mapping[str, Any], source: str) -> None:
    """Raise ``ValueError`` naming each setting of ``config`` (read from ``source``) that is NaN
    or infinite, e.g. ``components.biaffine_parser.arc_temperature = nan``."""
    bad = [f"{path} = {value}" for path, value in non_finite_settings(config)]
    if bad:
        raise ValueError(f"{source}: setting(s) must be finite numbers: {', '.join(bad)}")


def check_pipeline_folder(path: Path, overrides: Mapping[str, Any] | None = None) -> None:
    """:func:`check_finite_settings` on the ``config.cfg`` of the pipeline folder ``path`` (if it
    has one) and on ``overrides`` (``spacy.load``'s dotted config overrides)."""
    from confection import Config

    config_file = Path(path) / "config.cfg"
    if config_file.is_file():
        check_finite_settings(Config().from_disk(config_file, interpolate=False), str(config_file))
    if overrides:
        check_finite_settings(dict(overrides), "config overrides")


#: What a component's ``assigns`` (its factory's metadata) names when it sets sentence boundaries.
SENTENCE_ATTRIBUTES = frozenset({"token.is_sent_start", "token.sent_start", "doc.sents"})


def missing_sentence_source(
    name: str, earlier: Sequence[Tuple[str, Sequence[str]]], annotating: Optional[Collection[str]] = None
) -> Optional[str]:
    """Why the parser ``name`` will certainly get Docs without sentence boundaries, or None.

    ``earlier``: ``(component, assigns)`` of every component before it in the pipeline (enabled
    or not: frozen ones are disabled while spaCy initialises, and run when it evaluates);
    ``annotating``: the ``[training] annotating_components`` when the parser is one of them (its
    updates then parse Docs only those components annotated), else None. A component that
    declares nothing it assigns (a plain ``@Language.component``, ``attribute_ruler``) may set
    sentence boundaries, so it is never ruled out."""
    sources = [other for other, assigns in earlier if not assigns or SENTENCE_ATTRIBUTES.intersection(assigns)]
    if not sources:
        return (
            f"biaffine_parser '{name}': no component before it sets sentence boundaries and the training "
            "Docs have none, so every parse (spacy train's first evaluation included) would fail with 'the Doc "
            f"has no sentence boundaries': add a 'senter' or 'sentencizer' before '{name}' in [nlp] pipeline"
        )
    if annotating is not None and not any(source in annotating for source in sources):
        return (
            f"biaffine_parser '{name}' is in [training] annotating_components, but none of the components "
            f"that set its sentence boundaries ({', '.join(sources)}) is: its updates would parse Docs "
            "without them. List one of them in annotating_components too"
        )
    return None
