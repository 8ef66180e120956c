"""Noun chunks (base noun phrases) from a Universal Dependencies tree.

spaCy's English ``noun_chunks`` reads ClearNLP relations (``dobj``, ``pobj``, ``attr``...);
on a UD tree (``obj``, ``obl``, ``nmod``; prepositions hang from their noun as ``case``) it
drops most chunks. This module defines base noun phrases on UD trees, once, and installs the
definition as the pipeline's noun-chunk iterator.

**The definition** (applied alike to a predicted tree and to a treebank's gold tree; the
EWT evaluation in ``benchmarks/bench_shipped_pipeline.py`` scores one against the other):

* A *chunk head* is a nominal word, UPOS ``NOUN``, ``PROPN`` or ``PRON`` (without UPOS: PTB
  tag ``NN``, ``NNS``, ``NNP``, ``NNPS``, ``PRP`` or ``WP``), whose relation, without its
  subtype, is one of :data:`CHUNK_RELATIONS` (``nsubj``, ``obj``, ``iobj``, ``obl``,
  ``nmod``, ``appos``, ``root``, ``xcomp``, ``dislocated``, ``vocative``), except
  ``nmod:poss`` (a possessor stays inside the chunk of what it possesses, as in spaCy's
  English chunks) and ``nmod:desc`` (a title or description before a name, ``[Dr. Smith]``,
  ``[President Bush]``: English EWT's relation for it); or a nominal ``conj`` whose first conjunct (following ``conj`` up the
  tree) has one of those relations.
* The chunk runs from the leftmost word of the subtrees of the head's *left* dependents
  whose relation is a pre-modifier (:data:`LEFT_MODIFIERS`: ``det``, ``det:predet``,
  ``amod``, ``nummod``, ``compound``, ``nmod:poss``, ``nmod:desc``, ``flat``, ``fixed``) through the head,
  then on through the subtrees of right dependents ``flat``, ``fixed`` and ``goeswith``
  that follow without a gap (``Barack Obama``: UD makes ``Obama`` a ``flat`` dependent of
  ``Barack``). Case markers, conjunctions, punctuation and adverbs at the left edge stay
  out (``with [the telescope]``, ``and [the dog]``, ``only [the man]``); prepositional
  modifiers and relative clauses on the right stay out (``[the man] with [the telescope]``).
* Chunks do not overlap: reading heads left to right, a chunk that would start at or
  before the end of the previous one is dropped (spaCy's rule).

Every chunk is labelled ``NP``. In a pipeline, :func:`install_ud_noun_chunks` (the
``spacy_treexp.ud_noun_chunks.v1`` callback, named in ``[nlp] after_creation``) sets
``nlp.vocab.get_noun_chunks``; it is saved in the config, so it survives
``nlp.to_disk`` / ``spacy.load`` and pickled vocabularies. A tree in ClearNLP's relations
(:data:`CLEAR_RELATIONS` and none of :data:`UD_RELATIONS`: a stock English parser placed
after ours has replaced its tree) is chunked by the language's own iterator instead.
"""

from typing import Any, Callable, Iterator, List, Optional, Protocol, Sequence, Tuple, TypeVar, Union

from spacy.errors import Errors
from spacy.language import Language
from spacy.tokens import Doc, Span
from spacy.util import get_lang_class, registry

#: Relations (without subtype) of a nominal that heads a chunk.
CHUNK_RELATIONS = frozenset({"nsubj", "obj", "iobj", "obl", "nmod", "appos", "root", "xcomp", "dislocated", "vocative"})
#: Full relations excluded although their base is in :data:`CHUNK_RELATIONS`.
EXCLUDED_RELATIONS = frozenset({"nmod:poss", "nmod:desc"})
#: Left dependents (full relation, or its base) whose subtrees belong to the chunk.
LEFT_MODIFIERS = frozenset(
    {"det", "det:predet", "amod", "nummod", "compound", "nmod:poss", "nmod:desc", "flat", "fixed"}
)
#: Right dependents (base relation) whose subtrees extend the chunk when adjacent.
RIGHT_MODIFIERS = frozenset({"flat", "fixed", "goeswith"})
NOMINAL_UPOS = frozenset({"NOUN", "PROPN", "PRON"})
NOMINAL_TAGS = frozenset({"NN", "NNS", "NNP", "NNPS", "PRP", "WP"})
LABEL = "NP"

#: Relations that only Universal Dependencies uses: a parser with them writes UD trees.
UD_RELATIONS = frozenset({"obj", "obl", "case", "nmod"})
#: Relations that only ClearNLP's scheme (spaCy's English parsers) uses: a tree with them and
#: none of :data:`UD_RELATIONS` is chunked by the language's own iterator instead.
CLEAR_RELATIONS = frozenset({"dobj", "pobj", "prep", "nsubjpass", "attr", "pcomp", "dative", "poss", "npadvmod"})


class _Vocabulary(Protocol):
    @property
    def vocab(self) -> Any: ...


_HasVocab = TypeVar("_HasVocab", bound=_Vocabulary)


def is_ud_label_set(labels: Sequence[str]) -> bool:
    """Whether a parser with the relation labels ``labels`` writes UD trees (it has every one
    of :data:`UD_RELATIONS`)."""
    return UD_RELATIONS <= set(labels)


def _base(relation: str) -> str:
    return relation.lower().split(":", 1)[0]


def _is_nominal(upos: str, tag: str) -> bool:
    return upos in NOMINAL_UPOS if upos else tag in NOMINAL_TAGS


def _is_head_relation(relation: str) -> bool:
    return _base(relation) in CHUNK_RELATIONS and relation.lower() not in EXCLUDED_RELATIONS


def chunk_spans(
    heads: Sequence[int], relations: Sequence[str], upos: Sequence[str], tags: Sequence[str] = ()
) -> List[Tuple[int, int]]:
    """The chunks of one or more trees as ``(start, end)`` word offsets (end exclusive).

    ``heads[i]`` is the offset of word ``i``'s head, ``i`` itself for a root (spaCy's
    convention, so several sentences can be passed at once); ``relations`` are UD relations
    (``ROOT`` or ``root`` for the root); ``upos`` UPOS tags (``""`` when unknown, then
    ``tags``, PTB tags, decide whether a word is nominal).
    """
    n = len(heads)
    tags = list(tags) if len(tags) else [""] * n
    if not (len(relations) == len(upos) == len(tags) == n):
        raise ValueError("chunk_spans: heads, relations, upos and tags must have one entry per word")
    children: List[List[int]] = [[] for _ in range(n)]
    for i, h in enumerate(heads):
        if h != i:
            children[h].append(i)
    left_edge = list(range(n))
    right_edge = list(range(n))
    # subtree edges, children before parents (a tree has no cycles: depth-first order)
    order: List[int] = []
    stack = [i for i in range(n) if heads[i] == i]
    while stack:
        i = stack.pop()
        order.append(i)
        stack.extend(children[i])
    for i in reversed(order):
        for c in children[i]:
            left_edge[i] = min(left_edge[i], left_edge[c])
            right_edge[i] = max(right_edge[i], right_edge[c])

    def is_chunk_head(i: int) -> bool:
        if not _is_nominal(upos[i], tags[i]):
            return False
        if _is_head_relation(relations[i]):
            return True
        if _base(relations[i]) != "conj":
            return False
        first = heads[i]
        while _base(relations[first]) == "conj" and heads[first] != first:
            first = heads[first]
        return _is_head_relation(relations[first])

    spans: List[Tuple[int, int]] = []
    prev_end = -1
    for i in range(n):
        if not is_chunk_head(i):
            continue
        start = i
        for c in children[i]:
            rel = relations[c].lower()
            if c < i and (rel in LEFT_MODIFIERS or _base(rel) in LEFT_MODIFIERS):
                start = min(start, left_edge[c])
        end = i
        for c in sorted(c for c in children[i] if c > i):
            if _base(relations[c]) in RIGHT_MODIFIERS and left_edge[c] == end + 1:
                end = right_edge[c]
            else:
                break
        if start <= prev_end:
            continue
        spans.append((start, end + 1))
        prev_end = end
    return spans


def ud_noun_chunks(doclike: Union[Doc, Span]) -> Iterator[Tuple[int, int, int]]:
    """spaCy syntax iterator: ``(start, end, label)`` of each chunk of ``doclike``'s trees
    (token offsets in the Doc), as :func:`chunk_spans` defines them."""
    doc = doclike.doc
    if not doc.has_annotation("DEP"):
        raise ValueError(Errors.E029)
    if len(doclike) and not (doc.has_annotation("POS") or doc.has_annotation("TAG")):  # a chunk's head is nominal
        raise ValueError(
            "noun_chunks of a UD tree need each word's part of speech (token.pos_, or a PTB token.tag_), and this "
            "Doc has neither: add a component that sets it (a morphologizer or a tagger) to the pipeline"
        )
    first, last = doclike[0].sent.start if len(doclike) else 0, doclike[-1].sent.end if len(doclike) else 0
    words = doc[first:last]
    relations = [t.dep_ for t in words]
    native = _language_iterator(doc) if _is_clear_tree(relations) else None
    if native is not None:  # a ClearNLP tree on the Doc (a stock parser ran after ours): its own chunks
        yield from native(doclike)
        return
    spans = chunk_spans([t.head.i - first for t in words], relations, [t.pos_ for t in words], [t.tag_ for t in words])
    label = doc.vocab.strings.add(LABEL)
    lo, hi = doclike.start if isinstance(doclike, Span) else 0, doclike.end if isinstance(doclike, Span) else len(doc)
    for start, end in spans:
        if start + first >= lo and end + first <= hi:
            yield start + first, end + first, label


def _is_clear_tree(relations: Sequence[str]) -> bool:
    """Whether the relations are ClearNLP's (spaCy's English parsers), not UD's."""
    bases = {_base(r) for r in relations}
    return bool(bases & CLEAR_RELATIONS) and not bases & UD_RELATIONS


def _language_iterator(doc: Doc) -> Optional[Callable[[Union[Doc, Span]], Iterator[Tuple[int, int, int]]]]:
    """The noun-chunk iterator spaCy's language class of ``doc`` defines, if any."""
    try:
        defaults = get_lang_class(doc.vocab.lang).Defaults
    except ImportError:
        return None
    return defaults.syntax_iterators.get("noun_chunks")


def install_ud_noun_chunks(nlp: _HasVocab) -> _HasVocab:
    """Make :func:`ud_noun_chunks` the noun-chunk iterator of ``nlp``'s vocabulary (a pipeline's,
    or a Doc's), and so of every Doc it makes from now on (syntax iterators yield
    ``(start, end, label)``)."""
    nlp.vocab.get_noun_chunks = ud_noun_chunks
    return nlp


def use_ud_noun_chunks(doc: Doc) -> None:
    """Chunk ``doc`` (a Doc with a UD tree) with :func:`ud_noun_chunks`, and every Doc its vocabulary
    makes from now on: its copies, pickles, ``Doc.from_docs`` and the ``DocBin`` Docs read back into it."""
    setattr(doc, "noun_chunks_iterator", ud_noun_chunks)  # a public cdef attribute
    if doc.vocab.get_noun_chunks is not ud_noun_chunks:
        install_ud_noun_chunks(doc)


def install_for_ud_writers(nlp: Language, writers: Sequence[Any]) -> None:
    """:func:`install_ud_noun_chunks` on ``nlp`` when one of its score ``writers`` puts a UD tree
    on ``token.head`` / ``dep_`` (a ``biaffine_parser`` with ``overwrite`` and UD labels,
    :attr:`~spacy_treexp.pipeline.biaffine_parser.BiaffineParser.writes_ud_tree`): a parser sourced
    by hand into a stock pipeline then gives the host's vocabulary the UD iterator before any
    Doc is parsed, so Docs parsed in worker processes (``nlp.pipe(n_process=2)``) and read back
    into it are chunked on their UD tree too."""
    if any(getattr(writer, "writes_ud_tree", False) for writer in writers):
        install_ud_noun_chunks(nlp)


@registry.callbacks("spacy_treexp.ud_noun_chunks.v1")
def make_ud_noun_chunks() -> Callable[[Language], Language]:
    """``[nlp] after_creation = {"@callbacks": "spacy_treexp.ud_noun_chunks.v1"}``."""
    return install_ud_noun_chunks
