"""The options shared by the spaCy ``tree_expectations`` component and the Stanza processor.

One definition of their names, defaults and validation, so that both adapters accept and
mean the same things (README: Settings / Options).
"""
from __future__ import annotations

from typing import Any, Dict

WITH_REPLACEMENT = ("wilson_marginal", "wilson_reject", "colbourn", "wilson")
WITHOUT_REPLACEMENT = ("sbs", "trie")
DEVICES = ("cpu", "cuda", "auto")
DEFAULTS: Dict[str, Any] = {
    "single_root": True,
    "n_samples": 0,
    "sampler": None,
    "without_replacement": False,
    "top_k_heads": 3,
    "device": "cpu",
    "batch_size": 256,
    "seed": 0,
}


def check_options(options: Dict[str, Any], prefix: str = "") -> Dict[str, Any]:
    """Validate ``options`` against :data:`DEFAULTS` and return the complete set.

    Unknown names, wrong types and out-of-range values raise ``ValueError`` naming the
    option (as ``prefix + name``). ``sampler=None`` becomes ``"colbourn"`` (``"sbs"`` without
    replacement): Colbourn's cost does not depend on the scores, while Wilson's walks can
    take astronomically long on a trained parser's peaked scores.
    """
    unknown = sorted(set(options) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"unknown tree_expectations option(s) {unknown}; known: {sorted(DEFAULTS)}.")
    merged = {**DEFAULTS, **options}
    for name, minimum in (("n_samples", 0), ("top_k_heads", 1), ("batch_size", 1)):
        value = merged[name]
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f"{prefix}{name} must be an integer >= {minimum}, got {value!r}.")
    if merged["device"] not in DEVICES:
        raise ValueError(f"{prefix}device must be one of {DEVICES}, got {merged['device']!r}.")
    seed = merged["seed"]
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ValueError(f"{prefix}seed must be an integer or None, got {seed!r}.")
    for flag in ("single_root", "without_replacement"):
        if not isinstance(merged[flag], bool):
            raise ValueError(f"{prefix}{flag} must be True or False, got {merged[flag]!r}.")
    if merged["sampler"] is None:
        merged["sampler"] = "sbs" if merged["without_replacement"] else "colbourn"
    allowed = WITHOUT_REPLACEMENT if merged["without_replacement"] else WITH_REPLACEMENT
    if merged["sampler"] not in allowed:
        mode = "without" if merged["without_replacement"] else "with"
        raise ValueError(
            f"{prefix}sampler {merged['sampler']!r} cannot sample {mode} replacement; choose one of {allowed}."
        )
    return merged
