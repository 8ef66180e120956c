"""Model architecture of the biaffine parser: ``spacy_treexp.BiaffineParser.v1``.

A graph-based parser in the style of Dozat & Manning (2017, *Deep Biaffine Attention for
Neural Dependency Parsing*): token vectors from a spaCy tok2vec (own or a listener), an
explicit learned ROOT vector prepended to every sentence, an optional BiLSTM, then

- arc scores ``arc[h, d] = [r_h; 1]^T U r_d`` (biaffine, eq. 6 of Dozat & Manning, the
  head bias included in ``U``) between MLP projections of head and dependent, and
- relation log-probabilities ``log p(l | h, d)`` from a biaffine classifier over every
  (head, dependent) pair (their eq. 3, ``[r_h; 1]^T U_l [r_d; 1]``), normalised over labels.

The arc scores are the log-potentials of a tree distribution (Koo et al. 2007); the parser
is trained with the tree-CRF likelihood, see ``biaffine_parser.py``.

The model takes ``(docs, sentences, heads)``: ``sentences[i]`` lists the ``(start, end)``
token offsets of the sentences of ``docs[i]``; ``heads`` is ``None`` or, in training, the
gold heads (B, N+1) (sentence-internal indices, -1 where unknown). It returns
``(arc, rel, lengths)`` for all sentences in order: ``arc`` (B, N+1, N+1), ``lengths`` (B,)
and ``rel``: without heads, a list of B entries for all pairs (unpadded: the all-pairs
tensor dominates the cost), each an array (n_b+1, n_b+1, L) (at the scorer's
``rel_temperature``), or for a long sentence the
factors ``(head_part (n_b+1, L, d+1), dep_part (n_b+1, d+1))`` of that array (see
``spacy_treexp/annotate/relation_scores.py``); with heads, (B, N+1, L) at the given heads only, which is all the
training loss needs (zero where the head is unknown).
Its backward pass takes ``(d_arc, d_rel)``.
"""

from typing import Any, Callable, List, Optional, Tuple, Union, cast

import numpy
import torch
from spacy.pipeline.tok2vec import Tok2VecListener
from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import ArgsKwargs, Model, PyTorchWrapper_v2, torch2xp, xp2torch
from thinc.types import Floats2d, Floats3d

ParserInput = Tuple[List[Doc], List[List[Tuple[int, int]]], Optional[numpy.ndarray]]
ParserOutput = Tuple[numpy.ndarray, Union[numpy.ndarray, List[numpy.ndarray]], numpy.ndarray]

#: Precisions the BiLSTM can predict at (``BiaffineScorer.encoder_precision``).
ENCODER_PRECISIONS = ("float32", "bfloat16")


@registry.architectures("spacy_treexp.BiaffineParser.v1")
def build_biaffine_parser(
    tok2vec: Model[List[Doc], List[Floats2d]],
    arc_width: int = 256,
    rel_width: int = 64,
    lstm_depth: int = 1,
    lstm_width: int = 200,
    dropout: float = 0.33,
) -> Model[ParserInput, ParserOutput]:
    """Build the biaffine arc scorer and relation classifier on top of ``tok2vec``.

    tok2vec: any token-vector layer (``List[Doc] -> List[Floats2d]``): spaCy's ``Tok2Vec``
        or ``Tok2VecListener``, a ``spacy-transformers.TransformerListener.v1``, ... When its
        output width (``nO``) is unknown until the pipeline is initialised (a transformer's
        hidden size), it is read from a forward pass over the initialisation sample.
    arc_width / rel_width: widths of the head/dependent MLPs for arcs / relations.
    lstm_depth / lstm_width: BiLSTM layers (0 for none) and hidden size per direction.
    dropout: dropout rate inside the torch scorer (input, BiLSTM, MLPs).
    """
    for name, value in (("arc_width", arc_width), ("rel_width", rel_width)):
        if value < 1:
            raise ValueError(f"biaffine parser: {name} must be positive, got {value}")
    if lstm_depth < 0 or (lstm_depth > 0 and lstm_width < 1):
        raise ValueError("biaffine parser: need lstm_depth >= 0 and lstm_width >= 1")
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"biaffine parser: dropout must be in [0, 1), got {dropout}")
    width = _known_width(tok2vec)
    scorer = BiaffineScorer(width, arc_width, rel_width, lstm_depth, lstm_width, dropout)
    wrapped = PyTorchWrapper_v2(scorer, convert_inputs=_convert_inputs, convert_outputs=_convert_outputs)
    return Model(
        "spacy_treexp.biaffine_parser",
        _forward,
        init=_init,
        layers=[tok2vec, wrapped],
        dims={"nI": width},
    )


def _known_width(tok2vec: Model) -> Optional[int]:
    """The output width of ``tok2vec`` if it is already known, else None."""
    if tok2vec.has_dim("nO") is True:
        return int(tok2vec.get_dim("nO"))
    return None


def get_scorer_module(model: Model) -> "BiaffineScorer":
    """The torch module of a model built by ``build_biaffine_parser``."""
    return model.layers[1].shims[0]._model


def set_n_labels(model: Model, n_labels: int) -> None:
    """Resize the relation classifier of ``model`` to ``n_labels`` labels."""
    get_scorer_module(model).set_n_labels(n_labels)


def _init(model: Model, X: Optional[ParserInput] = None, Y=None) -> None:
    docs = X[0] if X is not None else None
    tok2vec = model.layers[0]
    tok2vec.initialize(X=docs)
    if model.has_dim("nI") is True:
        return
    # The width is only known now (a transformer's hidden size): read it from a sample.
    width = _known_width(tok2vec)
    if width is None and docs:
        tokvecs = tok2vec.predict(docs)
        if len(tokvecs) > 0:
            width = int(tokvecs[0].shape[-1])
    if width is None:
        raise ValueError(
            "biaffine parser: the width of the tok2vec layer is unknown: initialise the model with sample Docs"
        )
    model.set_dim("nI", width)
    get_scorer_module(model).set_input_width(width)


def _forward(model: Model, inputs: ParserInput, is_train: bool) -> Tuple[ParserOutput, Callable]:
    docs, sentences, heads = inputs
    if len(docs) != len(sentences):
        raise ValueError("biaffine parser: need one list of sentence spans per Doc")
    tok2vec, scorer = model.layers
    # a spaCy Tok2VecListener, alone or inside spacy_treexp.ConcatTok2Vec.v1
    upstream = next((node.upstream_name for node in tok2vec.walk() if isinstance(node, Tok2VecListener)), None)
    if not is_train and upstream is not None and any(len(doc) > 0 and doc.tensor.size == 0 for doc in docs):
        # in prediction a listener reads doc.tensor, and gives zeros where it is empty
        raise ValueError(
            f"biaffine parser: a Doc has no token vectors (doc.tensor is empty): the tok2vec the parser "
            f"listens to ({upstream!r}) did not run on it. Enable it (nlp.select_pipes, disable=) or run "
            "the whole pipeline."
        )
    tokvecs, backprop_tok2vec = tok2vec(docs, is_train)
    spans = [(i, start, end) for i, doc_sents in enumerate(sentences) for start, end in doc_sents]
    lengths = numpy.array([end - start for _, start, end in spans], dtype="int64")
    width = model.get_dim("nI")
    n_labels = get_scorer_module(model).n_labels
    if len(spans) == 0:
        rel: Union[numpy.ndarray, List[numpy.ndarray]] = numpy.zeros((0, 1, n_labels), "f") if heads is not None else []
        empty = (numpy.zeros((0, 1, 1), "f"), rel, lengths)

        def backprop_empty(d_scores):
            return backprop_tok2vec([model.ops.alloc2f(*t.shape) for t in tokvecs])

        return empty, backprop_empty
    for i, doc_vectors in enumerate(tokvecs):
        if len(docs[i]) > 0 and doc_vectors.shape[-1] != width:
            # spaCy's listeners read doc.tensor in prediction, which a later tok2vec may have replaced
            raise ValueError(
                f"biaffine parser: got token vectors of width {doc_vectors.shape[-1]}, expected {width}: "
                "a Doc's tensor was written by another tok2vec (e.g. a parser run alone on a Doc the "
                "whole pipeline already processed); run the pipeline, nlp(doc), instead"
            )
    X = numpy.zeros((len(spans), int(lengths.max()), width), dtype="float32")
    for b, (i, start, end) in enumerate(spans):
        X[b, : end - start] = model.ops.to_numpy(tokvecs[i][start:end])
    # thinc's Floats3d / Floats2d types describe the numpy (or cupy) arrays that its ops take
    (arc, rel), backprop_scorer = scorer((model.ops.asarray(cast(Floats3d, X)), lengths, heads), is_train)

    def backprop(d_scores: Tuple[numpy.ndarray, numpy.ndarray]):
        dX = model.ops.to_numpy(backprop_scorer(d_scores))
        d_tokvecs = [numpy.zeros(t.shape, dtype="float32") for t in tokvecs]
        for b, (i, start, end) in enumerate(spans):
            d_tokvecs[i][start:end] += dX[b, : end - start]
        return backprop_tok2vec([model.ops.asarray(cast(Floats2d, d)) for d in d_tokvecs])

    return (arc, rel, lengths), backprop


def _convert_inputs(model: Model, inputs, is_train: bool):
    X, lengths, heads = inputs
    X_torch = xp2torch(X, requires_grad=is_train)
    heads = None if heads is None else torch.as_tensor(heads)
    args = ArgsKwargs(args=(X_torch, torch.as_tensor(lengths), heads), kwargs={})

    def reverse(d_inputs: ArgsKwargs):
        return torch2xp(d_inputs.args[0])

    return args, reverse


def _convert_outputs(model: Model, inputs_outputs, is_train: bool):
    _, (arc, rel) = inputs_outputs

    def reverse(d_scores) -> ArgsKwargs:
        d_arc, d_rel = d_scores
        grads = (xp2torch(model.ops.asarray(d_arc)), xp2torch(model.ops.asarray(d_rel)))
        return ArgsKwargs(args=((arc, rel),), kwargs={"grad_tensors": grads})

    if isinstance(rel, (list, tuple)):
        return (
            torch2xp(arc),
            [
                None if r is None else tuple(torch2xp(t) for t in r) if isinstance(r, tuple) else torch2xp(r)
                for r in rel
            ],
        ), reverse
    return (torch2xp(arc), torch2xp(rel)), reverse


class BiaffineScorer(torch.nn.Module):
    """Torch part of the parser: ROOT vector, BiLSTM, biaffine arc and relation scorers."""

    def __init__(
        self,
        width: Optional[int],
        arc_width: int,
        rel_width: int,
        lstm_depth: int,
        lstm_width: int,
        dropout: float,
    ) -> None:
        """``width``: the token vectors' width, or None to set it later (``set_input_width``)."""
        super().__init__()
        self.arc_width, self.rel_width = arc_width, rel_width
        self.lstm_depth, self.lstm_width = lstm_depth, lstm_width
        self.dropout = torch.nn.Dropout(dropout)
        self.lstm: Optional[torch.nn.LSTM] = None
        # Zero-initialised biaffine weights (Dozat & Manning 2017): uniform scores at start.
        self.arc_weight = torch.nn.Parameter(torch.zeros(arc_width + 1, arc_width))
        self.rel_weight = torch.nn.Parameter(torch.zeros(0, rel_width + 1, rel_width + 1))
        # Until the width is known: an empty ROOT vector (its size is the input width).
        self.root = torch.nn.Parameter(torch.zeros(0))
        #: The dense relation log-probabilities of a prediction are at this temperature
        #: (set by the parser, not saved: its ``rel_temperature``); training ignores it.
        self.rel_temperature = 1.0
        #: Whether a prediction scores relations (set by the parser, not saved: false for a
        #: ``mixture_member``, whose relations nothing reads; its ``rel`` is then B Nones).
        self.relations = True
        #: The BiLSTM's precision in prediction (set by the parser, not saved: its
        #: ``encoder_precision``): "bfloat16" runs it under ``torch.autocast``; training and
        #: everything after the BiLSTM stay float32.
        self.encoder_precision = "float32"
        #: While set (``members.ScorerCapture``), each pass hands it what it saw: ``record(X,
        #: lengths, H, head, dep)``.
        self.capture: Optional[Any] = None
        if width is not None:
            self.set_input_width(width)

    @property
    def input_width(self) -> Optional[int]:
        """The token vectors' width, None until set."""
        return self.root.shape[0] or None

    def set_input_width(self, width: int) -> None:
        """Build the layers that depend on the input width (ROOT vector, BiLSTM, MLPs)."""
        if width < 1:
            raise ValueError(f"biaffine parser: the token vectors' width must be positive, got {width}")
        if width == self.input_width:
            return
        p = self.dropout.p
        device = self.arc_weight.device
        self.root = torch.nn.Parameter(torch.empty(width, device=device).normal_(0.0, 0.1))
        hidden = width
        if self.lstm_depth > 0:
            self.lstm = torch.nn.LSTM(
                width,
                self.lstm_width,
                num_layers=self.lstm_depth,
                batch_first=True,
                bidirectional=True,
                dropout=p if self.lstm_depth > 1 else 0.0,
            ).to(device)
            hidden = 2 * self.lstm_width
        self.arc_head = _mlp(hidden, self.arc_width, p).to(device)
        self.arc_dep = _mlp(hidden, self.arc_width, p).to(device)
        self.rel_head = _mlp(hidden, self.rel_width, p).to(device)
        self.rel_dep = _mlp(hidden, self.rel_width, p).to(device)

    @property
    def n_labels(self) -> int:
        return self.rel_weight.shape[0]

    def set_n_labels(self, n_labels: int) -> None:
        """Resize the relation classifier, keeping the weights of the first labels."""
        if n_labels == self.n_labels:
            return
        old = self.rel_weight.data
        new = old.new_zeros((n_labels,) + tuple(old.shape[1:]))
        keep = min(n_labels, old.shape[0])
        new[:keep] = old[:keep]
        self.rel_weight = torch.nn.Parameter(new)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # The label count is only known once trained: take it from the stored weights.
        stored = state_dict.get(prefix + "rel_weight")
        if stored is not None:
            self.set_n_labels(stored.shape[0])
        # Likewise the input width, when the model was built before the tok2vec knew it.
        root = state_dict.get(prefix + "root")
        if root is not None and root.shape[0] > 0:
            self.set_input_width(root.shape[0])
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def forward(
        self, X: torch.Tensor, lengths: torch.Tensor, heads: Optional[torch.Tensor] = None
    ) -> Tuple[torch.Tensor, Union[torch.Tensor, List[Union[None, torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]]]]:
        """X (B, N, width) token vectors, lengths (B,) -> arc (B, N+1, N+1) and rel: a list
        of B (n_b+1, n_b+1, L) or their factors (B Nones without ``relations``), or (B, N+1, L)
        at ``heads`` (B, N+1) when given."""
        batch, n_max, _ = X.shape
        inputs = X
        X = torch.cat([self.root.expand(batch, 1, -1).to(X.dtype), X], dim=1)
        X = self.dropout(X)
        if self.lstm is not None:
            X = self.dropout(self.encode(X, lengths))
        valid = torch.arange(n_max + 1, device=X.device)[None, :] < (lengths + 1)[:, None].to(X.device)
        if heads is None and X.device.type == "cpu" and not self.training and not torch.is_grad_enabled():
            by_head, arc_dep, rel_head_words, rel_dep = self._prediction_parts(X, valid)
        else:
            ones = X.new_ones(batch, n_max + 1, 1)
            by_head = torch.cat([self.arc_head(X), ones], dim=-1) @ self.arc_weight
            arc_dep = self.arc_dep(X)
            rel_head = torch.cat([self.rel_head(X), ones], dim=-1)
            rel_dep = torch.cat([self.rel_dep(X), ones], dim=-1)
            rel_head_words = rel_head[valid]
        if self.capture is not None:
            self.capture.record(inputs, lengths, X, by_head, arc_dep)
        arc = torch.matmul(by_head, arc_dep.transpose(-1, -2))  # [r_h; 1]^T U r_d
        if heads is not None:
            # Only the tokens with a known head, unpadded: the bilinear form costs L * width².
            sent, dep = torch.nonzero(heads >= 0, as_tuple=True)
            pairs = torch.einsum("ti,lij,tj->tl", rel_head[sent, heads[sent, dep]], self.rel_weight, rel_dep[sent, dep])
            rel = pairs.new_zeros((batch, n_max + 1, self.n_labels))
            rel = rel.index_put((sent, dep), pairs.log_softmax(dim=-1))
            return arc, rel
        if not self.relations:
            no_relations: List[Union[None, torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]] = [None] * batch
            return arc, no_relations
        sizes = (lengths + 1).tolist()
        return arc, _all_pairs_relations(rel_head_words, rel_dep, self.rel_weight, sizes, self.rel_temperature)

    def encode(self, X: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """The BiLSTM over ``X`` ``(B, N+1, width)`` (ROOT first; sentence b's first
        ``lengths[b] + 1`` rows), padded to ``N+1`` rows; ``X`` itself without a BiLSTM. In
        prediction (``not self.training``) at ``encoder_precision``: bfloat16 inputs and
        weights, float32 accumulation and output (Kalamkar et al. 2019, *A Study of BFLOAT16
        for Deep Learning Training*)."""
        if self.lstm is None:
            return X
        packed = torch.nn.utils.rnn.pack_padded_sequence(X, (lengths + 1).cpu(), batch_first=True, enforce_sorted=False)
        low = self.encoder_precision == "bfloat16" and not self.training
        with torch.autocast(X.device.type, dtype=torch.bfloat16, enabled=low):
            output, _ = self.lstm(packed)
        H, _ = torch.nn.utils.rnn.pad_packed_sequence(output, batch_first=True, total_length=X.shape[1])
        return H.to(X.dtype)

    def _prediction_parts(
        self, X: torch.Tensor, valid: torch.Tensor
    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """In prediction on the CPU (no gradient, dropout off), from the encoder's output ``X``
        ``(B, N+1, hidden)``: ``[r_h; 1]^T U`` ``(B, N+1, arc width)``, the arc dependents ``r_d``
        (same shape), the relation heads ``[r_h; 1]`` of the words only ``(T, d+1)`` and the
        relation dependents ``[r_m; 1]`` ``(B, N+1, d+1)``, zeros where ``valid`` ``(B, N+1)``
        is false (padding: nothing reads it). Computed on the sentences' words only (length
        groups pad a batch to about twice its words), with the four MLPs' linear layers as one
        matrix product, through numpy's BLAS (on the development machine, an AMD EPYC, 2x
        torch's rate for these shapes). Equal to the training-time route up to float rounding."""
        mlps: List[Any] = [self.arc_head, self.arc_dep, self.rel_head, self.rel_dep]
        weight = torch.cat([mlp[0].weight for mlp in mlps]).detach()
        words = X[valid]
        product = torch.from_numpy(words.numpy() @ weight.numpy().T)
        product += torch.cat([mlp[0].bias for mlp in mlps]).detach()
        widths = [mlp[0].out_features for mlp in mlps]
        arc_head, arc_dep, rel_head, rel_dep = (
            torch.nn.functional.leaky_relu(part, mlp[1].negative_slope)
            for part, mlp in zip(product.split(widths, -1), mlps)
        )
        U = self.arc_weight.detach()
        by_head = torch.from_numpy(arc_head.numpy() @ U[:-1].numpy())
        by_head += U[-1]
        ones = words.new_ones(len(words), 1)

        def padded(values: torch.Tensor) -> torch.Tensor:
            out = X.new_zeros(valid.shape + values.shape[-1:])
            out[valid] = values
            return out

        return padded(by_head), padded(arc_dep), torch.cat([rel_head, ones], -1), padded(torch.cat([rel_dep, ones], -1))


def _all_pairs_relations(
    head: torch.Tensor, dep: torch.Tensor, weight: torch.Tensor, sizes: List[int], temperature: float
) -> List[Union[None, torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]]:
    """Relation log-probabilities ``log_softmax([r_h; 1]^T U_l [r_m; 1] / temperature)`` over
    labels l for every (head, dependent) pair of each sentence: ``(n_b+1, n_b+1, L)``, or for a
    sentence whose (n+1)² L log-probabilities outnumber the factors (n+1)(L + 1)(d + 1) the
    factors ``(head_part (n_b+1, L, d+1), dep_part (n_b+1, d+1))`` (at temperature 1, see
    ``spacy_treexp/annotate/relation_scores.py``).

    ``head``: the ``[r_h; 1]`` of all sentences' words, unpadded ``(T, d+1)``; ``dep``: the
    padded ``[r_m; 1]`` ``(B, N+1, d+1)``; ``weight``: ``U`` ``(L, d+1, d+1)``; ``sizes``: n_b+1.
    The head side (L (d+1)² per word, the costly part) is one matrix product for the batch,
    laid out ``(T, d+1, L)`` so that each sentence's pairs come out ``(h, m, l)`` without a
    copy; on CPU it goes through numpy's BLAS (on the development machine, an AMD EPYC, 3x
    faster than torch's for this shape)."""
    n_labels, width = weight.shape[0], weight.shape[1]
    flat = weight.permute(1, 2, 0).reshape(width, width * n_labels)  # [i, (j, l)]
    if head.device.type == "cpu" and not torch.is_grad_enabled():
        by_head = torch.from_numpy(head.contiguous().numpy() @ flat.contiguous().numpy())
    else:
        by_head = head @ flat
    by_head = by_head.view(-1, width, n_labels)
    rels: List[Union[None, torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]] = []
    for b, (head_part, size) in enumerate(zip(by_head.split(sizes), sizes)):
        if size * n_labels <= (n_labels + 1) * width:
            pairs = torch.matmul(dep[b, :size], head_part)  # (h, m, l)
            rels.append((pairs if temperature == 1.0 else pairs.div_(temperature)).log_softmax(dim=-1))
        else:
            rels.append((head_part.transpose(1, 2), dep[b, :size]))
    return rels


def _mlp(n_in: int, n_out: int, dropout: float) -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(n_in, n_out), torch.nn.LeakyReLU(0.1), torch.nn.Dropout(dropout))
