"""Two parsers' scores of one sentence as a product of experts.

The product of two edge-factored tree distributions, ``p(t) ∝ p_a(t) p_b(t)``, is the
edge-factored distribution of the summed arc scores ``s_a + s_b`` (every factor of
``p(t) = exp(Σ s(h, m)) / Z`` multiplies; Koo et al. 2007, eq. 1): exact, and what Stanza's
ensemble parsers decode (they sum their members' scores). Relations likewise:
``p(l | h, m) ∝ p_a(l | h, m) p_b(l | h, m)``, the log-softmax of the summed
log-probabilities (Hinton 2002, products of experts). Members (for the epistemic mixture)
pair up: member k of the product is ``a_k + b_k``, or ``a_k + s_b`` when only one parser
has members.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy

from spacy_treexp.annotate.relation_scores import BiaffineRelationScores, RelationScores, log_softmax


class ProductError(ValueError):
    """The two parsers' scores cannot be multiplied (other sentences, labels or members)."""


def label_order(labels: Sequence[str], other: Sequence[str]) -> numpy.ndarray:
    """Indices into ``other`` of each of ``labels`` (both parsers must know the same set)."""
    position = {label: i for i, label in enumerate(other)}
    missing = sorted(set(labels) ^ set(other))
    if missing or len(position) != len(other):
        raise ProductError(f"the two parsers' relation labels differ: {missing[:8]} are known to only one of them")
    return numpy.array([position[label] for label in labels], dtype=numpy.int64)


def product_relations(first: RelationScores, second: RelationScores, order: numpy.ndarray) -> RelationScores:
    """``log p(l | h, m)`` of the product; ``second``'s labels are taken in ``order`` (indices
    into its labels, in ``first``'s order). Two factored classifiers stay factored (their
    logits add, so their factors concatenate); otherwise the dense ``(n+1, n+1, L)`` array."""
    if isinstance(first, BiaffineRelationScores) and isinstance(second, BiaffineRelationScores):
        head = numpy.concatenate(
            [
                first.head_part / numpy.float32(first.temperature),
                second.head_part[:, order] / numpy.float32(second.temperature),
            ],
            axis=-1,
        )
        dep = numpy.concatenate([first.dep_part, second.dep_part], axis=-1)
        # Both parsers fix the same (whitespace) dependents to the same label: ``first``'s indices.
        return BiaffineRelationScores(head.astype(numpy.float32), dep.astype(numpy.float32), 1.0, first.fixed)
    summed = numpy.asarray(first, dtype=numpy.float32) + numpy.asarray(second, dtype=numpy.float32)[..., order]
    return log_softmax(summed).astype(numpy.float32)


def product_members(
    first: Optional[numpy.ndarray], first_arc: numpy.ndarray, second: Optional[numpy.ndarray], second_arc: numpy.ndarray
) -> Optional[numpy.ndarray]:
    """Members ``(K, n+1, n+1)`` of the product: ``a_k + b_k`` when both parsers have K
    members, ``a_k + s_b`` (or ``s_a + b_k``) when one has, None when neither has."""
    if first is None and second is None:
        return None
    if first is None:
        return first_arc[None] + second
    if second is None:
        return first + second_arc[None]
    if len(first) != len(second):
        raise ProductError(
            f"this parser has {len(first)} members and the earlier one {len(second)}: give both the same members setting"
        )
    return first + second
