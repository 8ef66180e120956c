"""Where the engine runs: its device and its CPU threads, decided here for every adapter.

Threads: the spaCy parser's forward pass and the engine run with :func:`cpu_threads` torch
threads, ``SPACY_TREEXP_THREADS`` when set (inherited by worker processes, forked or spawned),
else :data:`DEFAULT_THREADS`. Measured with ``benchmarks/bench_threads.py`` (README, "Cost"):
on a small machine more threads than free cores made the parser up to 14x slower, while one
thread was within a few percent of the best setting idle and loaded.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator, Optional

import torch

_fork_hook_installed = False
#: Set in a process forked after :func:`install_fork_hook`: its torch work stays on one thread.
_forked_child = False

#: The environment variable that sets our torch threads (a positive integer).
THREADS_ENV = "SPACY_TREEXP_THREADS"
#: Torch threads of our CPU work when ``SPACY_TREEXP_THREADS`` is not set.
DEFAULT_THREADS = 1


def cpu_threads() -> int:
    """Torch threads for the parser's forward pass and the engine on the CPU:
    ``SPACY_TREEXP_THREADS`` if set, else :data:`DEFAULT_THREADS`; always 1 in a forked child
    (``nlp.pipe(n_process>1)`` with the fork start method): GNU OpenMP, torch's CPU thread
    pool, cannot start a team of threads in a child forked after the parent used one, and
    such a child hangs in its first parallel region (seen with ``SPACY_TREEXP_THREADS=2``).
    Spawned workers (and Ray's) are fresh processes and take the setting."""
    value = os.environ.get(THREADS_ENV, "").strip()
    if value and (not value.isdigit() or int(value) < 1):
        raise ValueError(f"{THREADS_ENV} must be a positive integer, got {value!r}")
    if _forked_child:
        return 1
    return int(value) if value else DEFAULT_THREADS


def use_cpu_share(cpus: float) -> int:
    """Run this process's torch work on ``cpus`` threads (at least one), from now on: a
    worker given a share of a machine's cores (a Ray actor's ``num_cpus``) calls it once,
    so that its workers together use the cores they were given and no more."""
    threads = 1 if _forked_child else max(1, int(cpus))
    os.environ[THREADS_ENV] = str(threads)
    torch.set_num_threads(threads)
    return threads


def resolve_device(name: str) -> torch.device:
    """``cpu``, ``cuda`` or ``auto`` (cuda when available) as a torch device; ``cuda``
    without a CUDA device raises ``ValueError``."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("tree_expectations: device 'cuda' requested but CUDA is not available.")
    return torch.device(name)


@contextmanager
def torch_threads(count: Optional[int]) -> Iterator[None]:
    """Run the block with ``count`` torch intra-op threads, then restore torch's setting
    (``None``: leave it as it is)."""
    if count is not None and count < 1:
        raise ValueError(f"threads must be >= 1, got {count}")
    previous = torch.get_num_threads()
    if count is None or count == previous:
        yield
        return
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


@contextmanager
def threads_for(device: torch.device) -> Iterator[None]:
    """Run the block on :func:`cpu_threads` torch threads when ``device`` is the CPU (a
    no-op on other devices).

    The engine's batched matrices are tiny (n ~ 20): threads mostly add synchronisation, and
    on a busy machine torch's batched ``lu_solve`` measured 1.7 ms on one thread against
    417 ms on two (B = 256, n = 20, float64)."""
    with torch_threads(cpu_threads() if device.type == "cpu" else None):
        yield


def _single_torch_thread() -> None:
    global _forked_child
    _forked_child = True
    torch.set_num_threads(1)


def install_fork_hook() -> None:
    """Make forked children (``nlp.pipe(n_process>1)``) run torch on one thread, once,
    whatever ``SPACY_TREEXP_THREADS`` says (see :func:`cpu_threads`).

    A child forked after the parent used torch's OpenMP pool can hang in its first parallel
    region; one thread per worker avoids it (the workers are the parallelism anyway)."""
    global _fork_hook_installed
    if not _fork_hook_installed and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_single_torch_thread)
        _fork_hook_installed = True
