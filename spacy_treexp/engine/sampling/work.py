"""Counters of the samplers' work, so that tests and benchmarks can check the documented cost
bounds by counting operations instead of timing them.

Counted (each an integer that only grows):

* ``factorisations``: L-hat LU factorisations (one per sentence, one per distinct
  conditioned sentence of :mod:`.trapped`'s phase 2), O(n^3) float64 operations each;
* ``refactorisations``: (row, word) pairs whose conditionals came from the engine's exact
  marginals of the conditioned scores, O(n^3) (log-space) operations each: the fallback for a
  Sherman-Morrison drift that the other measures should leave unused;
* ``setup_nodes``, ``trapped_nodes``: the node updates of :mod:`.trapped`'s GTH eliminations
  (per (sentence, root child) pair, and per state of a trapped word), one float64 or
  log-space operation each;
* ``walk_steps``: heads drawn by Wilson's walks, first pointers included.
"""

from __future__ import annotations

from collections import Counter
from contextlib import contextmanager
from typing import Iterator

_COUNTS: Counter = Counter()


def add(name: str, amount: int = 1) -> None:
    """Add ``amount`` to the counter ``name``."""
    _COUNTS[name] += amount


@contextmanager
def counting() -> Iterator[Counter]:
    """The work done inside the ``with`` block: a Counter filled when the block exits."""
    start = Counter(_COUNTS)
    result: Counter = Counter()
    try:
        yield result
    finally:
        result.update({name: _COUNTS[name] - start[name] for name in _COUNTS if _COUNTS[name] != start[name]})
