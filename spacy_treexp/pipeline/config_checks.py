"""Checks of a pipeline's config before spaCy builds it.

spaCy refuses a component setting that JSON cannot hold (NaN, +-inf) with E961, "non-serializable
Python object", raised in ``create_pipe`` before any factory runs, so the component itself cannot
name the setting. :func:`check_finite_settings` names it; the package's loaders
(:func:`spacy_treexp.load`, the CLI's ``--model``) run it first. This module does not import spaCy.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterator, Mapping, Tuple


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
