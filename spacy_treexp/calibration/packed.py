"""JSON values stored as one compressed string inside a calibration map.

A map's large tables (the domain model's lexicon, the word language model's n-gram counts)
are written as base64 of zlib-compressed JSON: one string, so the map can sit in a spaCy
config (where a dict's keys are options and ``${`` starts a variable), and about five times
smaller than the JSON itself (the shipped map: 1.4 MB less). Reading accepts the older,
uncompressed form (base64 of the JSON) too.
"""

from __future__ import annotations

import base64
import json
import zlib
from typing import Any, Mapping

#: Key suffix of the compressed form, and of the older uncompressed one.
PACKED, PLAIN = "_zlib_base64", "_base64"


def pack(value: Any) -> str:
    """``value`` (JSON-ready) as base64 of its zlib-compressed JSON (deterministic)."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return base64.b64encode(zlib.compress(text.encode("utf8"), 9)).decode("ascii")


def unpack(data: Mapping[str, Any], name: str) -> Any:
    """The value stored under ``name + PACKED`` in ``data``, or under ``name + PLAIN``
    (written before compression); ``KeyError`` if neither, ``ValueError`` if unreadable."""
    if name + PACKED in data:
        try:
            raw = zlib.decompress(base64.b64decode(data[name + PACKED], validate=True))
        except zlib.error as e:
            raise ValueError(f"{name}{PACKED} is not zlib data ({e})") from e
    else:
        raw = base64.b64decode(data[name + PLAIN], validate=True)
    return json.loads(raw.decode("utf8"))
