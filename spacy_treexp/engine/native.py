"""One switch for the engine's fused CPU kernels (numba): whether they run for a tensor.

The pure-torch code stays the reference and the path for every other device. The kernels
run when the tensor is on the CPU, numba is importable (``pip install spacy-treexp[fast]``)
and ``SPACY_TREEXP_NATIVE`` is not ``0``; otherwise the torch code runs, with the same
results up to floating-point rounding.
"""

from __future__ import annotations

import importlib.util
import os

import torch

#: Set to ``0`` to run the pure-torch code on the CPU even where numba is installed.
NATIVE_ENV = "SPACY_TREEXP_NATIVE"

_NUMBA_INSTALLED = importlib.util.find_spec("numba") is not None


def numba_installed() -> bool:
    """Whether numba can be imported in this environment."""
    return _NUMBA_INSTALLED


def native_requested() -> bool:
    """Whether the fused CPU kernels may run at all: numba installed and
    ``SPACY_TREEXP_NATIVE`` not ``0`` (read at each call, so tests and benchmarks can
    compare both paths in one process). Also the switch of the annotation layer's kernels
    on numpy arrays (:mod:`spacy_treexp.annotate.scan`)."""
    return _NUMBA_INSTALLED and os.environ.get(NATIVE_ENV, "1").strip() != "0"


def native_enabled(tensor: torch.Tensor) -> bool:
    """Whether the fused CPU kernels run for ``tensor``: a CPU tensor and
    :func:`native_requested`."""
    return tensor.device.type == "cpu" and native_requested()
