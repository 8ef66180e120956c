"""Extension attributes written by the ``tree_expectations`` component.

Everything is stored once per Doc, in ``doc._.tree_expectations``: a list with one
:class:`~spacy_treexp.annotate.SentenceAnnotation` per sentence (in ``doc.sents`` order),
a typed record of numpy and plain Python values that survives ``DocBin(store_user_data=True)``,
pickle, ``Doc.to_bytes`` and ``nlp.pipe(n_process=...)``. Every other attribute is a
read-only view computed from those records by a module-level getter (lambdas would break
multiprocessing).

Conventions (README.md: "spaCy: the tree_expectations component" has the full table):

* Sentence-level head arrays (``mbr_heads``, ``sampled_heads``, the record's ``heads``)
  use the CoNLL-U convention: word ``i`` (1-based) of the sentence is token
  ``sent.start + i - 1``, and head ``0`` is ROOT.
* Token-level heads follow spaCy: a Token, and the root's head is the token itself.
* ``arc_marginals[h, d]`` is the marginal probability of the arc h -> d
  (Koo et al. 2007, Prop. 1), index 0 = ROOT; each column d >= 1 sums to 1.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from typing import Any, List, Optional, Sequence, Tuple, Union, cast

import numpy
from spacy.attrs import DEP, HEAD, IDX, LENGTH
from spacy.tokens import Doc, Span, Token
from thinc.types import Ints2d

from spacy_treexp.annotate import SentenceAnnotation, mbr_heads
from spacy_treexp.pipeline.noun_chunks import is_ud_label_set, ud_noun_chunks

#: Name of the Doc extension holding the per-sentence records.
STORE = "tree_expectations"

#: Dependency label given to sampled arcs when the parser has no relation scores.
UNLABELLED_DEP = "dep"
ROOT_DEP = "ROOT"


def token_offsets(doc: Doc) -> numpy.ndarray:
    """int64 (len(doc), 2): the character offsets where each token starts and ends."""
    return _offsets(doc)


def _offsets(tokens: Union[Doc, Span]) -> numpy.ndarray:
    """:func:`token_offsets` of a Doc or of a Span alone (O(len(tokens)))."""
    array = cast(Any, tokens).to_array([IDX, LENGTH])  # Span.to_array is missing from spaCy's stubs only
    offsets = numpy.asarray(array).astype("int64").reshape(len(tokens), 2)
    offsets[:, 1] += offsets[:, 0]
    return offsets


def moved(token: Token, offsets: numpy.ndarray) -> bool:
    """Whether ``token`` is not where the row ``offsets`` of :func:`token_offsets` says the
    token of its index was (a retokenization moved it)."""
    start, end = offsets.tolist()  # Python ints: faster to compare
    idx = token.idx
    return start != idx or end != idx + len(token)


def mark_tokens(doc: Doc, records: Sequence[SentenceAnnotation]) -> None:
    """Record in each of ``doc``'s sentence records where its tokens start and end in the
    text (``SentenceAnnotation.token_offsets``), so that the getters refuse the records once
    the Doc is retokenized, also where the number of tokens stays the same (a merge and a
    split)."""
    if not records:
        return
    offsets = token_offsets(doc)
    for record in records:
        record.token_offsets = offsets[record.start : record.end].copy()


def _retokenized(detail: str) -> ValueError:
    return ValueError(
        f"{detail}: the Doc was retokenized (doc.retokenize()) after 'tree_expectations' ran, so its "
        "tree_expectations annotations no longer belong to its tokens. Retokenize before the parser, "
        "or run the pipeline again on the new tokens (nlp(doc))."
    )


def _moved(token: Token) -> ValueError:
    return _retokenized(f"Token {token.i} ({token.text[:40]!r}) is not the token that was annotated there")


def _check_words(doc: Doc, record: SentenceAnnotation, offsets: numpy.ndarray) -> None:
    """Raise unless the tokens of ``record``'s sentence are at ``offsets`` (theirs now)."""
    if record.token_offsets is not None and not numpy.array_equal(record.token_offsets, offsets):
        k = int(numpy.flatnonzero((record.token_offsets != offsets).any(axis=1))[0])
        raise _moved(doc[record.start + k])


def _check_token(token: Token, record: SentenceAnnotation) -> None:
    """Raise unless ``token`` (a word of ``record``'s sentence) is where the annotated word was."""
    if record.token_offsets is not None and moved(token, record.token_offsets[token.i - record.start]):
        raise _moved(token)


def _records(doc: Doc) -> Optional[Sequence[SentenceAnnotation]]:
    """The Doc's sentence records; raises if the Doc no longer has as many tokens as they
    describe (each getter checks the words it reads: :func:`_check_words`)."""
    records = doc._.get(STORE)
    if records and records[-1].end != len(doc):
        raise _retokenized(f"The Doc has {len(doc)} tokens, but its annotations describe {records[-1].end}")
    return records


def doc_records(doc: Doc) -> Optional[Sequence[SentenceAnnotation]]:
    """The Doc's sentence records (``doc._.tree_expectations``), or None; raises
    ``ValueError`` if the Doc was retokenized after they were made."""
    records = _records(doc)
    marked = [record for record in records or () if record.token_offsets is not None]
    if marked:
        offsets = token_offsets(doc)
        now = [offsets[record.start : record.end] for record in marked]
        if not numpy.array_equal(numpy.concatenate(now), numpy.concatenate([r.token_offsets for r in marked])):
            for record, words in zip(marked, now):  # one comparison for the usual case; this names the token
                _check_words(doc, record, words)
    return records


def _start(record: SentenceAnnotation) -> int:
    return record.start


def sentence_record(span: Span) -> Optional[SentenceAnnotation]:
    """The record of the annotated sentence ``span`` (one of ``doc.sents``), or None when its
    Doc has no annotation; raises ``ValueError`` if ``span`` is not an annotated sentence or
    its words moved since. Checks only the sentence's own words (O(len(span)), not
    O(len(doc)) as :func:`doc_records`), so a writer can read every sentence of a long Doc."""
    records = _records(span.doc)
    if records is None:
        return None
    k = bisect_right(records, span.start, key=_start) - 1
    if k >= 0 and records[k].start == span.start and records[k].end == span.end:
        _check_words(span.doc, records[k], _offsets(span))  # its own words: O(len(span)), not O(len(doc))
        return records[k]
    doc_records(span.doc)  # sentences moved by a retokenization are named as such
    raise ValueError(
        f"Span {span.start}:{span.end} ({span.text[:40]!r}) is not a sentence "
        "annotated by 'tree_expectations': use the spans of doc.sents."
    )


def _record_for_token(token: Token) -> Optional[SentenceAnnotation]:
    records = _records(token.doc)
    if not records:
        return None
    k = bisect_right(records, token.i, key=_start) - 1
    if k < 0 or token.i >= records[k].end:
        return None
    record = records[k]
    _check_token(token, record)
    return record


def _parse(sent: Span) -> List[int]:
    """The sentence's heads, CoNLL-U numbering over its tokens (whitespace included)."""
    return [0 if t.head.i == t.i else t.head.i - sent.start + 1 for t in sent]


def described_tree(sent: Span) -> Tuple[List[int], List[str]]:
    """The tree a sentence's ``head_prob``, ``dep_prob`` and ``expected_attachment`` describe,
    heads in CoNLL-U numbering over its tokens, with its relations: the Doc's parse, unless
    the annotation describes another tree (a parser with ``overwrite = false`` keeps a stock
    tree on the Doc: the UD tree of ``token._.ud_head``; a score source on a Doc without a
    parse: the MAP tree, whose relations the Doc lacks, ``dep`` / ``ROOT``). The writers of
    ``spacy-treexp parse`` / ``annotate`` and :func:`~spacy_treexp.pipeline.render.render` show it."""
    parse = _parse(sent)
    record = sentence_record(sent)  # its own words only: the Doc's, read per sentence, was quadratic
    if record is None:
        return parse, [token.dep_ for token in sent]
    heads = [int(h) for h in record.heads]
    deps = []
    for token, head, own in zip(sent, heads, parse):
        if token._.ud_dep is not None:
            deps.append(token._.ud_dep)
        elif head == own and token.dep_:
            deps.append(token.dep_)
        else:
            deps.append("ROOT" if head == 0 else "dep")
    return heads, deps


# --- Doc getters -----------------------------------------------------------------


def get_doc_arc_marginals(doc: Doc) -> Optional[List[Optional[numpy.ndarray]]]:
    """Per-sentence arc marginal matrices (n+1, n+1), ``[h, d]``, index 0 = ROOT (None for a
    sentence whose record has none, e.g. one read back from CoNLL-U)."""
    records = doc_records(doc)
    if records is None:
        return None
    return [record.marginals for record in records]


def get_doc_tree_entropy(doc: Doc) -> Optional[float]:
    """Entropy (nats) of the Doc's parse: the sum of its sentences' tree entropies."""
    records = doc_records(doc)
    if records is None:
        return None
    entropies = [record.entropy for record in records if record.entropy is not None]
    if len(entropies) < len(records):  # a record without entropy (e.g. read back from CoNLL-U)
        return None
    return float(sum(entropies))


def sampled_doc(doc: Doc, i: int) -> Doc:
    """A copy of ``doc`` whose parse is the ``i``-th sampled tree of every sentence.

    Labels are the most probable relation for each sampled arc (the parser's relation
    scores are conditionally independent given the tree); without relation scores
    they are ``"dep"`` (and ``"ROOT"`` for the root). The copy carries no
    ``tree_expectations`` records: they describe the original parse. A copy with Universal
    Dependencies relations gets the UD noun-chunk iterator (``noun_chunks.py``).
    """
    records = doc_records(doc)
    if records is None:
        raise ValueError("Doc has no tree_expectations annotation: run the component first.")
    if not records:
        raise ValueError("Doc has no sentences, so it has no sampled parses.")
    k = min(len(record.sampled_heads) for record in records)
    if isinstance(i, bool) or not isinstance(i, (int, numpy.integer)):
        raise ValueError(f"Sample index must be an integer, got {i!r}")
    if not 0 <= i < k:
        raise ValueError(
            f"Sample index {i} out of range: the Doc has {k} samples per sentence "
            "(set n_samples in the tree_expectations config)."
        )
    heads = numpy.zeros(len(doc), dtype="int64")
    deps = [doc.vocab.strings.add(UNLABELLED_DEP)] * len(doc)
    for record in records:
        start = record.start
        row = record.sampled_heads[i]
        if (row < 0).any():
            raise ValueError(
                f"Sample {i} of the sentence at token {start} does not exist (the "
                "sentence has fewer distinct trees than samples drawn without replacement, or its "
                "other trees are less probable than about e^-745, which the samplers cannot reach)."
            )
        for m, h in enumerate(row, start=1):
            token_i = start + m - 1
            if h == 0:
                heads[token_i] = 0
                label = ROOT_DEP
            else:
                heads[token_i] = (start + int(h) - 1) - token_i
                label = UNLABELLED_DEP
            if record.sampled_labels is not None and record.labels is not None:
                label = record.labels[int(record.sampled_labels[i][m - 1])]
            deps[token_i] = doc.vocab.strings.add(label)
    copy = doc.copy()
    copy._.set(STORE, None)
    array = numpy.stack([heads.astype("uint64"), numpy.asarray(deps, dtype="uint64")], axis=1)
    copy.from_array([HEAD, DEP], cast(Ints2d, array))  # thinc's Ints2d: the numpy array spaCy takes
    if any(record.labels is not None and is_ud_label_set(record.labels) for record in records):
        # a UD tree, also where the Doc kept a stock parse (and its noun chunks) beside the parser's
        setattr(copy, "noun_chunks_iterator", ud_noun_chunks)
    return copy


# --- sentence Span getters --------------------------------------------------------


def _span_value(span: Span, key: str) -> Any:
    record = sentence_record(span)
    return None if record is None else getattr(record, key)


def get_span_arc_marginals(span: Span) -> Optional[numpy.ndarray]:
    """The sentence's arc marginals (n+1, n+1), ``[h, d]``, index 0 = ROOT."""
    return _span_value(span, "marginals")


def get_span_tree_entropy(span: Span) -> Optional[float]:
    """Entropy H(p) of the sentence's tree distribution, nats (Zmigrod et al. 2021, §5)."""
    return _span_value(span, "entropy")


def get_span_log_partition(span: Span) -> Optional[float]:
    """log Z of the sentence's tree distribution (Koo et al. 2007, Prop. 1)."""
    return _span_value(span, "log_partition")


def get_span_expected_attachment(span: Span) -> Optional[float]:
    """Expected attachment score (fraction of words, 0-1) of the predicted tree."""
    return _span_value(span, "expected_attachment")


def get_span_mbr_heads(span: Span) -> Optional[numpy.ndarray]:
    """Heads (n,) of the minimum-Bayes-risk tree (max expected attachment), 0 = ROOT,
    computed on first use (:func:`spacy_treexp.annotate.mbr_heads`)."""
    record = sentence_record(span)
    return None if record is None else mbr_heads(record)


def get_span_sampled_heads(span: Span) -> Optional[numpy.ndarray]:
    """Sampled trees (k, n), sentence-relative heads, 0 = ROOT (Stanojević 2022)."""
    return _span_value(span, "sampled_heads")


def get_span_sample_log_probs(span: Span) -> Optional[numpy.ndarray]:
    """Exact log-probabilities (k,) of the sampled trees."""
    return _span_value(span, "sample_log_probs")


def get_span_entropy_per_word(span: Span) -> Optional[float]:
    """Tree entropy divided by the number of words (nats per word)."""
    record = sentence_record(span)
    return None if record is None else record.entropy_per_word


def get_span_parse_log_prob(span: Span) -> Optional[float]:
    """log p of the Doc's parse of the sentence as a whole tree (exact)."""
    return _span_value(span, "parse_log_prob")


def get_span_error_probability(span: Span) -> Optional[float]:
    """Probability that the Doc's parse of the sentence has at least one wrong head,
    1 − p(parse) (exact; a sentence-level risk score)."""
    record = sentence_record(span)
    return None if record is None else record.error_probability


def get_span_expected_errors(span: Span) -> Optional[float]:
    """Expected number of wrong heads in the Doc's parse of the sentence, n (1 − expected
    attachment) (exact)."""
    record = sentence_record(span)
    return None if record is None else record.expected_errors


def get_span_mutual_information(span: Span) -> Optional[float]:
    """I(tree; member), nats: the epistemic part of the tree entropy, from the parser's
    ensemble members (unbiased estimate; ``spacy_treexp.engine.TreeMixture``); None without
    members."""
    return _span_value(span, "mutual_information")


def get_span_expected_entropy(span: Span) -> Optional[float]:
    """The members' mean tree entropy Σ_k w_k H(p_k), nats (the aleatoric part); None
    without members."""
    return _span_value(span, "expected_entropy")


def get_span_mixture_error_probability(span: Span) -> Optional[float]:
    """Probability, under the members' mixture, that the Doc's parse of the sentence has at
    least one wrong head, 1 − Σ_k w_k p_k(parse) (exact); None without members. With two
    parsers as members (``spacy_treexp.load(ensemble="mixture")``), the package's strongest
    sentence-risk score (README, "Epistemic uncertainty and sentence risk")."""
    record = sentence_record(span)
    return None if record is None else record.mixture_error_probability


def get_span_mixture_arc_marginals(span: Span) -> Optional[numpy.ndarray]:
    """The arc marginals (n+1, n+1) of the members' mixture, Σ_k w_k μ_k[h, d], index 0 =
    ROOT (exact); None without members or without the option ``mixture_marginals``."""
    return _span_value(span, "mixture_marginals")


def get_span_mixture_sampled_heads(span: Span) -> Optional[numpy.ndarray]:
    """Trees (k, n) drawn from the members' mixture (a member ~ its weight, then a tree of
    it), sentence-relative heads, 0 = ROOT; None without members or with ``mixture_samples`` 0."""
    return _span_value(span, "mixture_sampled_heads")


def get_span_novelty(span: Span) -> Optional[float]:
    """How unfamiliar the sentence is to the pipeline's encoder: the mean cosine distance of
    its ``doc.tensor`` rows from the training data's (``spacy_treexp.calibration.novelty``);
    None unless the calibration map carries a novelty reference of ``doc.tensor``'s width."""
    return _span_value(span, "novelty")


def get_span_out_of_domain(span: Span) -> Optional[float]:
    """p(the sentence is out of the parser's domain) from its novelty, words, parts of speech
    and tree entropy (``spacy_treexp.calibration.domain``); None unless the novelty reference
    carries a domain model and the novelty is known."""
    return _span_value(span, "out_of_domain")


# --- Token getters ----------------------------------------------------------------


def _token_value(token: Token, key: str) -> Any:
    record = _record_for_token(token)
    values = None if record is None else getattr(record, key)
    if record is None or values is None:
        return None
    return float(values[token.i - record.start])


def get_token_head_prob(token: Token) -> Optional[float]:
    """Marginal probability of the token's predicted head (ROOT for the root)."""
    return _token_value(token, "head_prob")


def get_token_head_entropy(token: Token) -> Optional[float]:
    """Entropy (nats) of the token's marginal head distribution, -Σ_h μ(h,d) log μ(h,d)."""
    return _token_value(token, "head_entropy")


def get_token_dep_prob(token: Token) -> Optional[float]:
    """Marginal probability μ(h, d)·p(label | h, d) of the predicted head and relation.

    None when the parser gives no relation scores, or does not score the token's label.
    """
    value = _token_value(token, "dep_prob")
    return None if value is None or math.isnan(value) else value


def get_token_head_mutual_information(token: Token) -> Optional[float]:
    """I(head; member), nats: how much the parser's ensemble members disagree about the
    token's head (exact); None without members."""
    return _token_value(token, "head_mutual_information")


def get_token_mixture_head_prob(token: Token) -> Optional[float]:
    """The members' mixture's marginal probability of the token's head, Σ_k w_k μ_k(h, d)
    (exact); None without members."""
    return _token_value(token, "mixture_head_prob")


def get_token_head_distribution(token: Token) -> Optional[List[Tuple[Token, float]]]:
    """The ``top_k_heads`` most probable heads with their marginals, best first.

    Heads are Tokens; as in spaCy, ROOT is represented by the token itself.
    """
    record = _record_for_token(token)
    heads = None if record is None else record.top_heads(token.i - record.start + 1)
    if record is None or heads is None:
        return None
    doc = token.doc
    candidates = [(token if h == 0 else doc[record.start + h - 1], p) for h, p in heads]
    for head, _ in candidates:  # the heads are tokens of the Doc too
        _check_token(head, record)
    return candidates


DOC_GETTERS = {
    "arc_marginals": get_doc_arc_marginals,
    "tree_entropy": get_doc_tree_entropy,
}
DOC_METHODS = {"sampled_doc": sampled_doc}
SPAN_GETTERS = {
    "arc_marginals": get_span_arc_marginals,
    "tree_entropy": get_span_tree_entropy,
    "log_partition": get_span_log_partition,
    "expected_attachment": get_span_expected_attachment,
    "mbr_heads": get_span_mbr_heads,
    "sampled_heads": get_span_sampled_heads,
    "sample_log_probs": get_span_sample_log_probs,
    "entropy_per_word": get_span_entropy_per_word,
    "parse_log_prob": get_span_parse_log_prob,
    "error_probability": get_span_error_probability,
    "expected_errors": get_span_expected_errors,
    "mutual_information": get_span_mutual_information,
    "expected_entropy": get_span_expected_entropy,
    "mixture_error_probability": get_span_mixture_error_probability,
    "mixture_arc_marginals": get_span_mixture_arc_marginals,
    "mixture_sampled_heads": get_span_mixture_sampled_heads,
    "novelty": get_span_novelty,
    "out_of_domain": get_span_out_of_domain,
}
TOKEN_GETTERS = {
    "head_prob": get_token_head_prob,
    "head_entropy": get_token_head_entropy,
    "head_distribution": get_token_head_distribution,
    "dep_prob": get_token_dep_prob,
    "head_mutual_information": get_token_head_mutual_information,
    "mixture_head_prob": get_token_mixture_head_prob,
}

#: Attribute names, in the form spaCy's ``assigns`` declarations use.
ASSIGNS = (
    [f"doc._.{STORE}"]
    + [f"doc._.{name}" for name in DOC_GETTERS]
    + [f"span._.{name}" for name in SPAN_GETTERS]
    + [f"token._.{name}" for name in TOKEN_GETTERS]
)


def register_extensions() -> None:
    """Register the extensions (idempotent; never ``force=True``), with the parser's own UD
    tree beside a kept parse (``token._.ud_head``, ``ud_dep``: ``spacy_treexp.pipeline.stock``),
    so that importing this module is all a fresh process needs to read annotated Docs."""
    from spacy_treexp.pipeline.stock import register_ud_extensions

    register_ud_extensions()
    if not Doc.has_extension(STORE):
        Doc.set_extension(STORE, default=None)
    for name, doc_getter in DOC_GETTERS.items():
        if not Doc.has_extension(name):
            Doc.set_extension(name, getter=doc_getter)
    for name, method in DOC_METHODS.items():
        if not Doc.has_extension(name):
            Doc.set_extension(name, method=method)
    for name, span_getter in SPAN_GETTERS.items():
        if not Span.has_extension(name):
            Span.set_extension(name, getter=span_getter)
    for name, token_getter in TOKEN_GETTERS.items():
        if not Token.has_extension(name):
            Token.set_extension(name, getter=token_getter)


register_extensions()
