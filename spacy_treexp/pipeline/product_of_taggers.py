"""``spacy_treexp.ProductOfTaggers.v1``: two trained taggers multiplied into one.

A product of experts (Hinton 2002, eq. 1) over the same tag set: per token,
``log p(tag) = log p_first(tag) + weight * log p_second(tag) + const``. The layer returns these
scores (logits), so spaCy's ``tagger`` component takes its argmax and sets ``token.tag_`` as
with one tagger. The shipped English pipeline multiplies its own tagger (on ``tagger_tok2vec``)
with a second one on a frozen copy of en_core_web_sm's encoder (``configs/add_second_tagger.py``).

``weight = 0`` tags with the first tagger alone and does not run the second (its speed, its
tags). The members are trained apart; the product is for prediction only and refuses to be trained
(list its component in ``[training] frozen_components``). Both members must score the same
labels in the same order: the component's ``labels``, which the assembly script checks.

With ``storage = "float16"`` the weights are saved at half precision (thinc parameters and
PyTorch state alike) and read back into float32, halving the file; prediction runs in float32.
"""

from __future__ import annotations

from io import BytesIO
from typing import Any, Dict, List, Optional, Tuple

import numpy
import srsly
import torch
from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import Model, get_array_module
from thinc.shims import PyTorchShim
from thinc.types import Floats2d

#: The architecture's registered name.
PRODUCT_OF_TAGGERS = "spacy_treexp.ProductOfTaggers.v1"
#: The name of the layers it builds.
LAYER_NAME = "spacy_treexp.product_of_taggers"
#: How the weights may be saved.
STORAGES = ("float32", "float16")
#: The settings the config gives (loading keeps them, whatever the saved model holds).
SETTINGS = ("weight", "storage")


class ProductOfTaggers(Model):
    """The product layer; a thinc Model that saves its weights at ``attrs["storage"]``."""

    def to_dict(self) -> Dict:
        msg = super().to_dict()
        if self.attrs["storage"] == "float16":
            msg["params"] = [{name: _half(value) for name, value in params.items()} for params in msg["params"]]
            msg["shims"] = [
                [
                    _half_torch_state(data) if isinstance(shim, PyTorchShim) else data
                    for shim, data in zip(node.shims, shims)
                ]
                for node, shims in zip(self.walk(), msg["shims"])
            ]
        return msg

    def from_dict(self, msg: Dict) -> ProductOfTaggers:
        # the settings are the config's (``weight = 0`` in a config override takes effect), not
        # the saved copies; float16 parameters back to float32 (PyTorch's load_state_dict casts)
        own = {name: value for name, value in msg["attrs"][0].items() if name not in SETTINGS}
        msg = {
            **msg,
            "attrs": [own, *msg["attrs"][1:]],
            "params": [{name: _full(value) for name, value in params.items()} for params in msg["params"]],
        }
        super().from_dict(msg)
        return self


@registry.architectures(PRODUCT_OF_TAGGERS)
def build_product_of_taggers(
    first: Model[List[Doc], List[Floats2d]],
    second: Model[List[Doc], List[Floats2d]],
    weight: float = 1.0,
    storage: str = "float32",
) -> Model[List[Doc], List[Floats2d]]:
    """Per token ``log_softmax(first) + weight * log_softmax(second)`` (a product of experts,
    Hinton 2002), for a ``tagger`` component; ``first`` and ``second`` are tagger models
    (``spacy.Tagger.v2``) over the same labels. ``storage``: ``"float32"`` or ``"float16"``
    (weights saved at half precision, predicted with in float32)."""
    if not weight >= 0:
        raise ValueError(f"spacy_treexp.ProductOfTaggers.v1: weight must be 0 or more, not {weight!r}")
    if storage not in STORAGES:
        raise ValueError(f"spacy_treexp.ProductOfTaggers.v1: storage must be one of {STORAGES}, not {storage!r}")
    return ProductOfTaggers(
        LAYER_NAME,
        _forward,
        init=_init,
        layers=[first, second],
        dims={"nO": _tag_count([first, second])},
        attrs={"weight": float(weight), "storage": storage},
    )


def _init(model: Model, X: Optional[List[Doc]] = None, Y: Any = None) -> None:
    for layer in model.layers:
        layer.initialize(X=X, Y=Y)
    count = _tag_count(model.layers)
    if count is None:
        raise ValueError(f"{PRODUCT_OF_TAGGERS}: the taggers know no number of tags after initialization")
    model.set_dim("nO", count, force=True)


def _tag_count(taggers: List[Model]) -> Optional[int]:
    """The number of tags the taggers score (None while none knows it); refused if they differ."""
    widths = {layer.get_dim("nO") for layer in taggers if layer.has_dim("nO") is True}
    if len(widths) > 1:
        raise ValueError(f"{PRODUCT_OF_TAGGERS}: the taggers score different numbers of tags {sorted(widths)}")
    return widths.pop() if widths else None


def _forward(model: Model, docs: List[Doc], is_train: bool) -> Tuple[List[Floats2d], Any]:
    if is_train:
        raise ValueError(
            "spacy_treexp.ProductOfTaggers.v1 is for prediction only: train its two taggers apart and "
            "list this component in [training] frozen_components"
        )
    first, second = model.layers
    weight = model.attrs["weight"]
    first_normalizes = normalizes(first)
    if weight == 0:  # the first tagger alone: the second is not run
        return [log_probabilities(a, first_normalizes) for a in first.predict(docs)], _no_backprop
    second_normalizes = normalizes(second)
    scores = [
        log_probabilities(a, first_normalizes) + weight * log_probabilities(b, second_normalizes)
        for a, b in zip(first.predict(docs), second.predict(docs))
    ]
    return scores, _no_backprop


def _no_backprop(d_scores: List[Floats2d]) -> List[Doc]:
    raise ValueError("spacy_treexp.ProductOfTaggers.v1 passes no gradient (it is for prediction only)")


def log_probabilities(outputs: Floats2d, normalized: bool) -> Floats2d:
    """Log-probabilities of a tagger's outputs for one Doc: probabilities where its softmax
    normalizes (:func:`normalizes`), logits otherwise."""
    xp = get_array_module(outputs)
    if normalized:
        return xp.log(xp.maximum(outputs, numpy.finfo(numpy.float32).tiny))
    shifted = outputs - xp.max(outputs, axis=1, keepdims=True)
    return shifted - xp.log(xp.exp(shifted).sum(axis=1, keepdims=True))


def normalizes(tagger: Model) -> bool:
    """Whether a tagger's last softmax layer gives probabilities (spaCy's ``normalize = true``)."""
    softmaxes = [node for node in tagger.walk() if "softmax_normalize" in node.attrs]
    return bool(softmaxes and softmaxes[-1].attrs["softmax_normalize"])


def _half(value: Any) -> Any:
    if value is not None and getattr(value, "dtype", None) == numpy.float32:
        return value.astype(numpy.float16)
    return value


def _full(value: Any) -> Any:
    if value is not None and getattr(value, "dtype", None) == numpy.float16:
        return value.astype(numpy.float32)
    return value


def _half_torch_state(data: bytes) -> bytes:
    """A thinc PyTorch shim's bytes with its float32 tensors at half precision."""
    msg = srsly.msgpack_loads(data)
    state = torch.load(BytesIO(msg["state"]), map_location="cpu", weights_only=True)
    half = {name: tensor.half() if tensor.dtype == torch.float32 else tensor for name, tensor in state.items()}
    buffer = BytesIO()
    torch.save(half, buffer)
    return srsly.msgpack_dumps({**msg, "state": buffer.getvalue()})
