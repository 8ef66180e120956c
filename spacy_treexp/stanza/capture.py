"""Capture Stanza depparse's own arc and relation scores during its own pass.

Stanza's graph parser (Dozat & Manning 2017; ``GraphParser.forward_scores`` in
``stanza/models/depparse/model.py``) computes, per batch, ``unlabeled_scores`` of shape
``(B, L, L)`` and ``deprel_scores`` ``(B, L, L, R)`` indexed ``S[dep, head]`` with ROOT at 0,
decodes the best tree and throws the scores away. :class:`DepparseScoreCapture` wraps three
methods *of one depparse processor instance* (never Stanza's classes), so the scores of the
parser's single pass are kept:

1. ``model.forward_scores`` records the batch's raw arc scores and ``model.forward`` its
   relation log-probabilities;
2. ``trainer.predict`` cuts them per sentence, undoes the batch-internal length sort
   (``orig_idx``) exactly as ``Trainer.predict`` undoes it for the heads, transposes them
   to the engine's ``[head, dep]`` convention and maps ``reversed`` models back to the
   original word order;
3. ``processor.process`` undoes the document-level length sort of Stanza's
   ``DataLoader`` (``sort_all``: longest first, ties by higher index first; checked against
   every sentence's words) and stores the scores on each ``Sentence`` as
   ``sentence._treexp_scores``, with the tree depparse gave it (``heads``, ``deprels``):
   :func:`captured_scores` refuses them once the sentence's tree is another (re-parsed by a
   pipeline whose depparse is not captured, or edited), which they do not score.

No score is recomputed: the relation log-probabilities are the ones Stanza's
``GraphParser.forward`` computes itself (its third prediction, a log-softmax over the
relation axis), taken by also wrapping ``model.forward``; the captured arrays are numpy
views of the batch arrays (the reversed-model mapping copies).

The raw unlabeled scores are kept (Stanza's decoder uses a log-softmax over heads that
does not mask padding; that only subtracts a constant per dependent, which changes log Z
but not the tree distribution).

Ensembles: Stanza's ``EnsembleGraphParser`` (same file) calls every member's
``forward_scores`` and decodes the *sum* of their unlabeled scores (and of their relation
scores). The capture then wraps each member's ``forward_scores`` instead of the
ensemble's, and keeps

* ``SentenceScores.arc``: the members' raw arc scores added in Stanza's order and dtype
  (``0 + s_1 + ... + s_K`` in torch, so bit-identical to the tensor Stanza
  log-softmaxes and decodes): the distribution of the tree Stanza outputs;
* ``SentenceScores.members``: ``(K, n+1, n+1)`` each member's own raw arc scores, in the
  same convention, for the epistemic uncertainty of the ensemble (issue 21);
* ``SentenceScores.rel``: the ensemble's own relation log-softmax of the summed relation
  scores (its ``forward``'s third prediction), as for a single model.
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

import numpy

from spacy_treexp.annotate import SentenceScores

#: Attribute under which captured scores are stored on a ``stanza`` ``Sentence``.
SCORES_ATTR = "_treexp_scores"


#: The Stanza versions whose depparse internals the capture was tested against ([low, high)).
SUPPORTED_STANZA = ((1, 15), (1, 16))
#: The pip requirement of that range, for messages.
STANZA_REQUIREMENT = f"stanza>={'.'.join(map(str, SUPPORTED_STANZA[0]))},<{'.'.join(map(str, SUPPORTED_STANZA[1]))}"


def sentence_tree(sentence: Any) -> Tuple[List[int], List[Optional[str]]]:
    """A Stanza sentence's heads (0 = ROOT) and relations, as they are now."""
    return [word.head for word in sentence.words], [word.deprel for word in sentence.words]


def with_tree(scores: SentenceScores, sentence: Any) -> SentenceScores:
    """``scores`` with the sentence's tree as it is now (what :func:`captured_scores` checks)."""
    heads, deprels = sentence_tree(sentence)
    return scores.replace(heads=numpy.array(heads, dtype=numpy.int64), deprels=deprels)


def captured_scores(sentence: Any, where: str) -> Optional[SentenceScores]:
    """The sentence's captured scores (None if it has none), refused with a ``ValueError``
    naming ``where`` when its tree is no longer the one depparse gave with them: another
    parser's (or a hand-edited) tree would be scored with this parser's numbers."""
    scores: Optional[SentenceScores] = getattr(sentence, SCORES_ATTR, None)
    if scores is None or scores.heads is None:
        return scores
    heads, deprels = sentence_tree(sentence)
    if [int(h) for h in scores.heads] != heads or (scores.deprels is not None and list(scores.deprels) != deprels):
        text = " ".join(word.text for word in sentence.words)[:60]
        raise ValueError(
            f"{where}: the tree of the sentence {text!r} changed after its depparse scores were captured "
            "(re-parsed by a pipeline without tree_expectations, or edited), so those scores belong to "
            "another tree; parse it again with the pipeline that has tree_expectations."
        )
    return scores


def check_stanza_version(version: str) -> None:
    """Raise ``RuntimeError`` naming ``version`` when it is outside :data:`SUPPORTED_STANZA`:
    the capture wraps private methods of Stanza's depparse, which other versions may change."""
    parts = tuple(int(p) for p in version.split(".")[:2] if p.isdigit())
    low, high = SUPPORTED_STANZA
    if not low <= parts < high:
        raise RuntimeError(
            f"spacy_treexp's Stanza processor supports stanza >= {'.'.join(map(str, low))}, < "
            f"{'.'.join(map(str, high))} (it captures depparse's scores from its internals); "
            f"installed: stanza {version}. Install a supported version: pip install '{STANZA_REQUIREMENT}'."
        )


def _check_graph_model(processor: Any) -> Any:
    """Return the depparse trainer after checking it holds a graph-based model (one
    ``GraphParser`` or an ``EnsembleGraphParser`` of them)."""
    from stanza.models.depparse.model import EnsembleGraphParser, GraphParser

    if getattr(processor, "_variant", None) is not None:
        raise ValueError(
            "tree_expectations needs Stanza's neural depparse; this depparse processor is "
            f"the variant {type(processor._variant).__name__}, which has no arc scores."
        )
    trainer = getattr(processor, "trainer", None)
    model = getattr(trainer, "model", None)
    if isinstance(model, EnsembleGraphParser):
        kinds = sorted({type(member).__name__ for member in model.models if not isinstance(member, GraphParser)})
        if kinds or not len(model.models):
            raise ValueError(
                "tree_expectations needs an ensemble of graph-based (biaffine) depparse models; this "
                f"EnsembleGraphParser holds {', '.join(kinds) or 'no models'}."
            )
    elif model is None:  # Stanza keeps a placeholder when depparse could not be built
        raise ValueError(
            "tree_expectations: this pipeline's depparse processor has no model loaded; Stanza could not "
            "build it (often a missing requirement: depparse needs 'tokenize', 'pos' and 'lemma' before it). "
            "Check the pipeline without tree_expectations for Stanza's own message."
        )
    elif not isinstance(model, GraphParser):
        kind = type(model).__name__
        raise ValueError(
            "tree_expectations needs a graph-based (biaffine) depparse model, whose arc "
            f"scores define a distribution over trees; this pipeline's depparse model is a "
            f"{kind} (transition-based models are not supported)."
        )
    return trainer


def _relation_labels(trainer: Any, n_relations: int) -> List[str]:
    from stanza.models.common.vocab import VOCAB_PREFIX_SIZE

    vocab = trainer.vocab["deprel"]
    return list(vocab.unmap([r + VOCAB_PREFIX_SIZE for r in range(n_relations)]))


def _normalise(text: str) -> str:
    """The punctuation simplification Stanza's depparse DataLoader applies to words."""
    from stanza.models.common.utils import EXCLAM_RE, QUESTION_RE

    return EXCLAM_RE.sub("!", QUESTION_RE.sub("?", text))


class DepparseScoreCapture:
    """Keeps the scores of one depparse processor's own parser pass (see module doc)."""

    def __init__(self, processor: Any) -> None:
        import stanza

        check_stanza_version(stanza.__version__)
        self.trainer = _check_graph_model(processor)
        self.model = self.trainer.model
        if processor.config.get("batch_size") is None:
            raise ValueError(
                "tree_expectations: this depparse model stores no batch size (ensembles saved by "
                "stanza.models.depparse.ensemble do not), so Stanza's depparse cannot run it: pass "
                "depparse_batch_size=5000 (words a batch) to stanza.Pipeline."
            )
        #: The ensemble's member models (Stanza's ``EnsembleGraphParser.models``), or [] for one model.
        self.members: List[Any] = list(getattr(self.model, "models", []))
        scorers = self.members or [self.model]
        self.labels = _relation_labels(self.trainer, scorers[0].num_relations)
        self._batch_arcs: List[Any] = []
        self._batch_rel: Optional[numpy.ndarray] = None
        self._sorted: List[Tuple[List[str], SentenceScores]] = []
        self._process = processor.process
        self._predict = self.trainer.predict
        self._forward = self.model.forward
        self._processor = processor
        # instance attributes shadow the class methods for this processor only
        for scorer in scorers:
            scorer.forward_scores = self._wrap_forward_scores(scorer.forward_scores)
        self.model.forward = self._capture_forward
        self.trainer.predict = self._capture_predict
        processor.process = self._capture_process

    @classmethod
    def attach(cls, processor: Any) -> DepparseScoreCapture:
        """The processor's capture, installed once however many times it is asked for."""
        existing = processor.__dict__.get("_treexp_capture")
        if existing is not None:
            return existing
        capture = cls(processor)
        processor._treexp_capture = capture
        return capture

    # -- wrapped methods ------------------------------------------------------------

    def _wrap_forward_scores(self, forward_scores: Any) -> Any:
        def capture_forward_scores(*args: Any, **kwargs: Any) -> Any:
            out = forward_scores(*args, **kwargs)
            if not self.model.training:
                self._batch_arcs.append(out[0].detach())
            return out

        return capture_forward_scores

    def _capture_forward(self, *args: Any, **kwargs: Any) -> Any:
        loss, preds = self._forward(*args, **kwargs)
        if not self.model.training:
            # log p(l | h, d) as Stanza computed it, (B, L, L, R) indexed [dep, head, l]
            self._batch_rel = preds[2]
        return loss, preds

    def _batch_scores(self) -> Tuple[numpy.ndarray, Optional[numpy.ndarray]]:
        """The batch's arc scores (B, L, L) and, for an ensemble, its members' (K, B, L, L)."""
        arcs, self._batch_arcs = self._batch_arcs, []
        expected = len(self.members) or 1
        if len(arcs) != expected:
            raise RuntimeError(
                f"tree_expectations: depparse computed {len(arcs)} arc score tensors for a batch, expected "
                f"{expected}; this Stanza version scores batches differently from the one spacy_treexp supports."
            )
        if not self.members:
            return arcs[0].float().cpu().numpy(), None
        total: Any = 0
        for arc in arcs:  # EnsembleGraphParser.forward's own sum, in its order and dtype
            total = total + arc
        return total.float().cpu().numpy(), numpy.stack([arc.float().cpu().numpy() for arc in arcs])

    def _capture_predict(self, batch: Sequence[Any], unsort: bool = True, **kwargs: Any) -> Any:
        self._batch_arcs, self._batch_rel = [], None
        try:
            preds = self._predict(batch, unsort=unsort, **kwargs)
            rel = self._batch_rel
            if not self._batch_arcs or rel is None:
                raise RuntimeError("tree_expectations: depparse predicted without computing its scores.")
            unlabeled, members = self._batch_scores()
        finally:
            self._batch_arcs, self._batch_rel = [], None
        orig_idx, sentlens, text = batch[11], batch[13], batch[15]
        # read when predicting, as Trainer.predict does
        reversed_model = bool(self.trainer.args.get("reversed", False))
        per_sentence = []
        for i, size in enumerate(sentlens):
            arc = unlabeled[i, :size, :size].T
            rel_i = rel[i, :size, :size].transpose(1, 0, 2)
            member_arcs = None if members is None else members[:, i, :size, :size].transpose(0, 2, 1)
            words = list(text[i])
            if reversed_model:
                perm = numpy.array([0] + list(range(size - 1, 0, -1)))
                arc = arc[numpy.ix_(perm, perm)]
                rel_i = rel_i[numpy.ix_(perm, perm)]
                if member_arcs is not None:
                    member_arcs = member_arcs[:, perm][:, :, perm]
                words = words[::-1]
            scores = SentenceScores(arc=arc, rel=rel_i, labels=self.labels, members=member_arcs)
            per_sentence.append((words, scores))
        if unsort:
            restored: List[Any] = [None] * len(per_sentence)
            for position, original in enumerate(orig_idx):
                restored[original] = per_sentence[position]
            per_sentence = restored
        self._sorted.extend(per_sentence)
        return preds

    def _capture_process(self, document: Any) -> Any:
        self._sorted = []
        try:
            result = self._process(document)
            self._assign(result.sentences)
        finally:
            self._sorted = []
        return result

    def _assign(self, sentences: Sequence[Any]) -> None:
        """Map the captured (length-sorted) sentences back to the document's order."""
        if len(self._sorted) != len(sentences):
            raise RuntimeError(
                f"tree_expectations: captured scores for {len(self._sorted)} sentences but the "
                f"document has {len(sentences)} (did depparse drop sentences?)."
            )
        if self._processor.config.get("sort_during_eval", True):
            # Stanza's sort_all: descending (length, index)
            order = sorted(range(len(sentences)), key=lambda i: (len(sentences[i].words), i), reverse=True)
        else:
            order = list(range(len(sentences)))
        for (words, scores), index in zip(self._sorted, order):
            sentence = sentences[index]
            expected = [_normalise(word.text) for word in sentence.words]
            if words != expected:
                raise RuntimeError(
                    "tree_expectations: the captured depparse scores do not line up with the "
                    f"sentence {' '.join(expected)[:60]!r}; this Stanza version orders "
                    "depparse batches differently from the one spacy_treexp supports."
                )
            setattr(sentence, SCORES_ATTR, with_tree(scores, sentence))
