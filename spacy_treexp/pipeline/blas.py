"""numpy's BLAS, on the package's threads, for the matrix products of spaCy's thinc layers.

thinc's ``NumpyOps`` multiplies matrices with blis. On the development machine (an AMD EPYC
with AVX-512, one thread) blis reached 31 GFLOP/s on the shipped tok2vec's products
(2000 x 384 by 384 x 384, float32) against 98 for numpy's OpenBLAS, and the shipped tok2vec
ran 1.9x faster with numpy's (88 -> 37 us a word in the pipeline; ``benchmarks/bench_shipped_pipeline.py``
has the whole pipeline's ratio). thinc offers the switch itself (``NumpyOps(use_blis=False)``
delegates to ``numpy.dot``); :class:`NumpyBlasOps` adds the thread count: OpenBLAS starts one
thread per core by default, which spun on a loaded machine (the parser's CPU time 1.70 s
against 1.30 s on one thread per 500 EWT texts), so every product runs on
:func:`~spacy_treexp.annotate.runtime.cpu_threads` threads (``SPACY_TREEXP_THREADS``, 1 by
default), as the package's torch work does, and the process's own BLAS setting holds again
after it. The results equal blis's up to float rounding.

* :func:`use_numpy_blas` gives every thinc layer of a pipeline's components these ops for
  good; the ``spacy_treexp.numpy_blas.v1`` callback (``[nlp.after_pipeline_creation]``)
  applies it to a pipeline built from a config, as the shipped one is.
* :func:`numpy_blas` does the same for one model inside a block and then restores its ops:
  the parser runs a host pipeline's tok2vec so, without changing that pipeline.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterator, List, Optional, Sequence

import numpy
from spacy.language import Language
from spacy.util import registry
from thinc.api import Model, NumpyOps, Ops

from spacy_treexp.annotate.runtime import cpu_threads

#: threadpoolctl's view of the BLAS libraries loaded (made on first use, see :func:`blas_threads`).
_CONTROLLER: Optional[Any] = None


@contextmanager
def blas_threads() -> Iterator[None]:
    """Run the block's numpy BLAS calls on ``cpu_threads()`` threads (threadpoolctl; about
    4 us a call), then restore the process's setting."""
    global _CONTROLLER
    if _CONTROLLER is None:
        from threadpoolctl import ThreadpoolController

        _CONTROLLER = ThreadpoolController()
    with _CONTROLLER.limit(limits=cpu_threads(), user_api="blas"):
        yield


class NumpyBlasOps(NumpyOps):
    """thinc's ``NumpyOps`` whose matrix products are numpy's (``use_blis=False``), each run
    on :func:`blas_threads`."""

    def __init__(self, device_type: str = "cpu", device_id: int = -1, **kwargs: Any) -> None:
        kwargs["use_blis"] = False
        super().__init__(device_type, device_id, **kwargs)

    def gemm(
        self,
        x: numpy.ndarray,
        y: numpy.ndarray,
        *,
        out: Optional[numpy.ndarray] = None,
        trans1: bool = False,
        trans2: bool = False,
    ) -> numpy.ndarray:
        with blas_threads():
            return super().gemm(x, y, out=out, trans1=trans1, trans2=trans2)


#: One instance serves every layer (ops hold no per-layer state).
NUMPY_BLAS_OPS = NumpyBlasOps()


def _blis_nodes(model: Model) -> List[Model]:
    """The layers of ``model`` that multiply with blis (CPU ``NumpyOps`` other than ours)."""
    return [
        node
        for node in model.walk()
        if isinstance(node.ops, NumpyOps) and not isinstance(node.ops, NumpyBlasOps) and node.ops.use_blis
    ]


@contextmanager
def swapped_ops(nodes: Sequence[Model], ops: Ops) -> Iterator[None]:
    """Give the thinc layers ``nodes`` the ops ``ops`` inside the block, then their own again
    (also after an error)."""
    saved = [node.ops for node in nodes]
    for node in nodes:
        node.ops = ops
    try:
        yield
    finally:
        for node, own in zip(nodes, saved):
            node.ops = own


@contextmanager
def numpy_blas(model: Model) -> Iterator[None]:
    """Run ``model``'s thinc layers with :data:`NUMPY_BLAS_OPS` inside the block
    (:func:`swapped_ops`)."""
    with swapped_ops(_blis_nodes(model), NUMPY_BLAS_OPS):
        yield


def use_numpy_blas(nlp: Language) -> Language:
    """Give every thinc layer of ``nlp``'s components :data:`NUMPY_BLAS_OPS` for good (layers
    on a GPU, or already on numpy's BLAS, keep theirs). Returns ``nlp``."""
    for _, component in nlp.components:
        model = getattr(component, "model", None)
        if isinstance(model, Model):
            for node in _blis_nodes(model):
                node.ops = NUMPY_BLAS_OPS
    return nlp


@registry.callbacks("spacy_treexp.numpy_blas.v1")
def make_numpy_blas() -> Callable[[Language], Language]:
    """``[nlp.after_pipeline_creation] @callbacks = "spacy_treexp.numpy_blas.v1"``:
    :func:`use_numpy_blas` on the pipeline once its components exist."""
    return use_numpy_blas
