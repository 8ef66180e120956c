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

from typing import Any, List, Optional, Tuple, cast

import torch
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
        packed = torch.nn.utils.rnn.pack_padded_sequence(X, lengths, enforce_sorted=False)
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
