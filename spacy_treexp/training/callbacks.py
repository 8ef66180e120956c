"""Registered functions that the training configs name (entry points in pyproject.toml).

* ``spacy_treexp.has_vectors.v1`` (``@misc``): ``true`` when a vectors path is given.
  ``include_static_vectors = {"@misc": "spacy_treexp.has_vectors.v1", "vectors": ${paths.vectors}}``
  makes one config train with pretrained static vectors (``--paths.vectors PATH``) or
  without them (``null``, the default): spaCy's ``include_static_vectors = true`` with no
  vectors ends in an ``IndexError``. The saved pipeline keeps the path in its config, so it
  is rebuilt with the same layers when loaded.
* ``spacy_treexp.time_budget.v1`` (``@callbacks``): a ``[training.before_update]`` callback
  that stops training once ``max_seconds`` of wall-clock time have passed since the first
  update, by raising :class:`TimeBudgetReached`. spaCy's training loop then saves
  ``model-last``; ``model-best`` holds the best evaluated checkpoint.
* ``spacy_treexp.copy_tok2vec.v1`` (``@callbacks``): an ``[initialize.after_init]`` callback
  that copies a stock pipeline's ``tok2vec`` weights into the parser's
  ``spacy_treexp.FrozenTok2Vec.v1`` layer (``configs/en_ewt_dual.cfg``).
"""

import time
from typing import Any, Callable, Dict, Optional, cast

from spacy.util import registry


class TimeBudgetReached(Exception):
    """Raised by ``spacy_treexp.time_budget.v1`` once training has used its time."""


@registry.misc("spacy_treexp.has_vectors.v1")
def has_vectors(vectors: Optional[str] = None) -> bool:
    """Whether a pretrained vectors path (or package name) is given."""
    return vectors is not None and str(vectors) != ""


@registry.callbacks("spacy_treexp.time_budget.v1")
def time_budget(max_seconds: float) -> Callable[[Any, Dict[str, Any]], None]:
    """A ``before_update`` callback that raises :class:`TimeBudgetReached` after
    ``max_seconds`` (counted from the first update)."""
    if not max_seconds > 0:
        raise ValueError(f"spacy_treexp.time_budget.v1: max_seconds must be positive, got {max_seconds!r}")
    start: Optional[float] = None

    def before_update(nlp: Any, info: Dict[str, Any]) -> None:
        nonlocal start
        now = time.monotonic()
        if start is None:
            start = now
        elif now - start >= max_seconds:
            raise TimeBudgetReached(f"the training budget of {max_seconds:g} s is spent (step {info.get('step')})")

    return before_update


@registry.callbacks("spacy_treexp.copy_tok2vec.v1")
def copy_tok2vec(source: str, component: str = "biaffine_parser") -> Callable[[Any], Any]:
    """An ``[initialize.after_init]`` callback: copy the weights of the ``tok2vec`` of the
    pipeline ``source`` (a package name or path) into every ``spacy_treexp.FrozenTok2Vec.v1``
    layer of ``component``, which must be built like it (the same architecture and settings as
    the source's ``[components.tok2vec.model]``). A source tok2vec that reads static vectors is
    refused: the copy would read the vectors of the pipeline it is copied into."""
    from spacy import load

    from spacy_treexp.pipeline.encoders import FROZEN_TOK2VEC, mark_copied

    def after_init(nlp: Any) -> Any:
        name = "spacy_treexp.copy_tok2vec.v1"
        stock = load(source)
        if "tok2vec" not in stock.pipe_names:
            raise ValueError(f"{name}: {source!r} has no 'tok2vec' component (it has {stock.pipe_names})")
        model = cast(Any, stock.get_pipe("tok2vec")).model
        if any(node.name == "static_vectors" for node in model.walk()):
            raise ValueError(
                f"{name}: the tok2vec of {source!r} reads static vectors, which a frozen copy would read from "
                "this pipeline's vocabulary instead of its own; use a stock pipeline without vectors"
            )
        frozen = [node for node in nlp.get_pipe(component).model.walk() if node.name == FROZEN_TOK2VEC]
        if not frozen:
            raise ValueError(f"{name}: {component!r} has no spacy_treexp.FrozenTok2Vec.v1 layer")
        weights = model.to_bytes()
        for node in frozen:
            try:
                node.layers[0].from_bytes(weights)
            except ValueError as e:
                built = stock.config["components"]["tok2vec"]["model"]
                raise ValueError(
                    f"{name}: the spacy_treexp.FrozenTok2Vec.v1 layer of {component!r} is not built like the "
                    f"tok2vec of {source!r} ({e}); give its tok2vec section the settings of that pipeline's "
                    f"[components.tok2vec.model]: {dict(built)}"
                ) from None
            mark_copied(node, source)
        return nlp

    return after_init
