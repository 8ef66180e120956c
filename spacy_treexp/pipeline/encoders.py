"""``spacy_treexp.PackedBiLSTMEncoder.v1``: spaCy's ``TorchBiLSTMEncoder`` without padding leaks.

spaCy's ``spacy.TorchBiLSTMEncoder.v1`` runs thinc's ``PyTorchLSTM`` over a padded batch
(time-major, the Docs sorted by length): the backward direction of a shorter Doc starts in
the padding after it, so a Doc's vectors, and what a ``senter`` or ``tagger`` predicts from
them, depend on the other Docs of its batch. Measured with the shipped pipeline: the same
text was one sentence alone and two inside ``nlp.pipe`` of 64 texts (the senter's logit moved
from 4.44 to 3.96), so ``annotate`` with another ``--batch-size``, a resumed run or the Ray
backend could split and parse it differently.

This encoder has the same layers and weights (a ``torch.nn.LSTM`` of ``width // 2`` per
direction, ``depth`` layers, inside thinc's ``with_padded``), so it loads a model trained
with spaCy's, but it packs each batch by the Docs' lengths
(``torch.nn.utils.rnn.pack_padded_sequence``): every Doc gets the vectors it gets alone, in
prediction and in training.
"""

from __future__ import annotations

import warnings
from typing import Any, Dict, List, Optional, Set, Tuple, cast

import torch
from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import ArgsKwargs, Model, noop, torch2xp, with_padded, xp2torch
from thinc.layers.pytorchwrapper import PyTorchRNNWrapper, convert_rnn_outputs
from thinc.shims import PyTorchShim
from thinc.types import Floats2d, Padded


class PackedLSTM(torch.nn.LSTM):
    """``torch.nn.LSTM`` (same parameters) over a padded time-major batch and its lengths,
    run as a packed sequence; the padding of the output is zero."""

    def forward(  # type: ignore[override]
        self, X: torch.Tensor, lengths: Optional[torch.Tensor] = None
    ) -> Tuple[torch.Tensor, None]:
        if lengths is None:
            return super().forward(X)[0], None
        nonempty = lengths > 0
        if not bool(nonempty.all()):  # an empty Doc in the batch: packing refuses length 0
            out = X.new_zeros(X.shape[0], X.shape[1], self.hidden_size * (2 if self.bidirectional else 1))
            if bool(nonempty.any()):
                out[:, nonempty] = self.forward(X[:, nonempty], lengths[nonempty])[0]
            return out, None
        # thinc's list2padded sorts the Docs longest first: packing them so skips a sort and two
        # copies of the batch (the input's and the output's reordering)
        longest_first = bool((lengths[:-1] >= lengths[1:]).all())
        packed = torch.nn.utils.rnn.pack_padded_sequence(X, lengths, enforce_sorted=longest_first)
        output, _ = super().forward(packed)
        padded, _ = torch.nn.utils.rnn.pad_packed_sequence(output, total_length=X.shape[0])
        return padded, None


def _packed_inputs(model: Model, Xp: Padded, is_train: bool) -> Tuple[ArgsKwargs, Any]:
    """thinc's ``convert_rnn_inputs`` with the Docs' lengths passed on for packing."""
    shim = cast(PyTorchShim, model.shims[0])
    size_at_t, lengths, indices = Xp.size_at_t, Xp.lengths, Xp.indices

    def backward(d_inputs: ArgsKwargs) -> Padded:
        return Padded(torch2xp(d_inputs.args[0]), size_at_t, lengths, indices)  # type: ignore[arg-type]

    X = xp2torch(Xp.data, requires_grad=True, device=shim.device)
    return ArgsKwargs(args=(X, torch.as_tensor(lengths, dtype=torch.int64).cpu()), kwargs={}), backward


@registry.architectures("spacy_treexp.PackedBiLSTMEncoder.v1")
def build_packed_bilstm_encoder(width: int, depth: int, dropout: float) -> Model[List[Floats2d], List[Floats2d]]:
    """spaCy's ``TorchBiLSTMEncoder.v1`` (same settings, layers and weights), each Doc encoded
    as if alone in its batch (see the module doc)."""
    if depth == 0:
        return cast(Model[List[Floats2d], List[Floats2d]], noop())
    lstm = PyTorchRNNWrapper(
        PackedLSTM(width, width // 2, depth, bidirectional=True, dropout=dropout),
        convert_inputs=_packed_inputs,
        convert_outputs=convert_rnn_outputs,
    )
    lstm.set_dim("nO", width)
    lstm.set_dim("nI", width)
    return cast(Model[List[Floats2d], List[Floats2d]], with_padded(with_padded(lstm)))


@registry.architectures("spacy_treexp.ConcatTok2Vec.v1")
def build_concat_tok2vec(*tok2vecs: Model[List[Doc], List[Floats2d]]) -> Model[List[Doc], List[Floats2d]]:
    """Several tok2vec layers side by side: each Doc's vectors are the columns of every
    layer's vectors for it, in order (``nO`` is the sum of theirs).

    Lets a ``biaffine_parser`` read its own pipeline's tok2vec (a listener) together with
    another pipeline's frozen one (``spacy_treexp.FrozenTok2Vec.v1``)."""
    if len(tok2vecs) < 2:
        raise ValueError("spacy_treexp.ConcatTok2Vec.v1 needs at least two tok2vec layers")
    widths = [layer.get_dim("nO") for layer in tok2vecs if layer.has_dim("nO") is True]
    dims: Dict[str, Optional[int]] = {"nO": sum(widths) if len(widths) == len(tok2vecs) else None}
    return Model("spacy_treexp.concat_tok2vec", _concat_forward, init=_concat_init, layers=list(tok2vecs), dims=dims)


def _concat_init(model: Model, X: Optional[List[Doc]] = None, Y: Any = None) -> None:
    for layer in model.layers:
        layer.initialize(X=X)
    if all(layer.has_dim("nO") is True for layer in model.layers):
        model.set_dim("nO", sum(layer.get_dim("nO") for layer in model.layers), force=True)


def _concat_forward(model: Model, docs: List[Doc], is_train: bool) -> Tuple[List[Floats2d], Any]:
    outputs, backprops = zip(*(layer(docs, is_train) for layer in model.layers))
    widths = [int(out[0].shape[1]) if len(out) else 0 for out in outputs]
    joined = [model.ops.xp.hstack(columns) for columns in zip(*outputs)]

    def backprop(d_joined: List[Floats2d]) -> List[Doc]:
        start = 0
        for width, layer_backprop in zip(widths, backprops):
            layer_backprop([model.ops.as_contig(d[:, start : start + width]) for d in d_joined])
            start += width
        return []

    return joined, backprop


@registry.architectures("spacy_treexp.FrozenTok2Vec.v1")
def build_frozen_tok2vec(tok2vec: Model[List[Doc], List[Floats2d]]) -> Model[List[Doc], List[Floats2d]]:
    """``tok2vec`` with its weights held fixed: it predicts (no dropout) in training too and
    passes no gradient back, so the optimizer never changes it.

    Its weights are those saved with the pipeline; ``spacy_treexp.copy_tok2vec.v1`` copies a
    stock pipeline's tok2vec into it when training starts."""
    dims: Dict[str, Optional[int]] = {"nO": tok2vec.get_dim("nO") if tok2vec.has_dim("nO") is True else None}
    return Model(
        FROZEN_TOK2VEC, _frozen_forward, init=_frozen_init, layers=[tok2vec], dims=dims, attrs={"copied_from": None}
    )


#: Name of the layers ``spacy_treexp.FrozenTok2Vec.v1`` builds.
FROZEN_TOK2VEC = "spacy_treexp.frozen_tok2vec"


def _frozen_init(model: Model, X: Optional[List[Doc]] = None, Y: Any = None) -> None:
    model.layers[0].initialize(X=X)
    if model.layers[0].has_dim("nO") is True:
        model.set_dim("nO", model.layers[0].get_dim("nO"), force=True)


#: ids of the frozen layers warned about (once each)
_WARNED: Set[int] = set()


def mark_copied(model: Model, source: str) -> None:
    """Record on a ``spacy_treexp.FrozenTok2Vec.v1`` layer that ``source``'s weights were
    copied into it (saved with the layer)."""
    model.attrs["copied_from"] = str(source)


def _frozen_forward(model: Model, docs: List[Doc], is_train: bool) -> Tuple[List[Floats2d], Any]:
    if model.attrs.get("copied_from") is None and model.id not in _WARNED:
        _WARNED.add(model.id)
        warnings.warn(
            "spacy_treexp.FrozenTok2Vec.v1 holds weights no pipeline's tok2vec was copied into (its random "
            "initial ones, never trained): add [initialize.after_init] with @callbacks = "
            '"spacy_treexp.copy_tok2vec.v1" to the training config',
            stacklevel=2,
        )
    return model.layers[0].predict(docs), lambda d_vectors: []
