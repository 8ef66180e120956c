"""Annotated Docs out: JSONL, CoNLL-U (through :mod:`spacy_treexp.io.conllu`) or DocBin shards.

A writer takes each ``(Doc, context)`` pair as soon as it is done (the context is the
reader's, see :mod:`spacy_treexp.io.inputs`). To standard output a record is written and
flushed at once; to a file or a ``.spacy`` directory, everything goes to
``OUTPUT.partial`` with a manifest, and ``finish`` renames it to OUTPUT when the run is
complete (the layout and the resume rule: :mod:`spacy_treexp.cli.partial`). ``close``
after an interrupt or an error leaves the partial holding complete records only.
"""

from __future__ import annotations

import io
import json
import math
import os
import re
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Optional, Protocol, Union, cast

import numpy
from spacy.tokens import Doc, DocBin, Span, Token
from spacy.vocab import Vocab

from spacy_treexp.annotate.records import CONLLU_COMMENTS, CONLLU_MISC
from spacy_treexp.cli.common import UserError, is_stdio
from spacy_treexp.cli.partial import Kept, Manifest, OutputPaths, PartialFile, clear_unlisted_shards, settle
from spacy_treexp.io.conllu import ConlluSentence, format_misc, write_conllu
from spacy_treexp.io.inputs import Context
from spacy_treexp.pipeline.attributes import described_tree

FORMATS = ("jsonl", "conllu", "spacy")
SHARD_SIZE = 1000

#: Sentence comments the CoNLL-U writer adds, each a ``Span`` extension (a re-annotated file gets
#: them replaced, and those the new run has no value for removed).
SENTENCE_COMMENTS = tuple(CONLLU_COMMENTS)
#: Sentence values of the JSONL output (and the Parquet columns) besides the tree's; None
#: (null) where the pipeline gives none (no members, no novelty reference).
SENTENCE_VALUES = (
    "error_probability",
    "expected_errors",
    "mixture_error_probability",
    "mutual_information",
    "expected_entropy",
    "novelty",
    "out_of_domain",
)
#: Word values of the JSONL output besides ``head_prob``, ``head_entropy`` and ``dep_prob``.
WORD_VALUES = ("head_mutual_information", "mixture_head_prob")
_SAMPLE_COMMENT = re.compile(r"#\s*sample_[0-9]+\s*=")


def format_of(path: Path) -> Optional[str]:
    """The output format a path implies by its suffix (None if none does)."""
    suffix = path.suffix.lower().lstrip(".")
    return suffix if suffix in FORMATS else None


def check_docbin_target(path: Path) -> None:
    """A .spacy target is a directory of shards: new, or empty."""
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise UserError(f"--output {path} exists and is not an empty directory; delete it or give a new path")


# --- where records go ---------------------------------------------------------------


class Sink(Protocol):
    """Where a record writer's text goes: standard output or a :class:`PartialFile`."""

    docs: int
    where: str

    def add(self, text: str, line: int) -> None: ...

    def finish(self) -> None: ...

    def close(self) -> None: ...


class StdoutSink:
    """Standard output: each record written and flushed at once (no partial, no resume)."""

    where = "<stdout>"

    def __init__(self) -> None:
        self.docs = 0

    def add(self, text: str, line: int) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()
        self.docs += 1

    def finish(self) -> None:
        sys.stdout.flush()

    def close(self) -> None:
        sys.stdout.flush()


class RecordWriter:
    """One text record per document (:meth:`record`), written whole to ``sink``."""

    def __init__(self, sink: Sink) -> None:
        self.sink = sink

    @property
    def docs(self) -> int:
        """Documents in the output so far, those a resumed run kept included."""
        return self.sink.docs

    @property
    def where(self) -> str:
        return self.sink.where

    def record(self, doc: Doc, context: Context) -> str:
        raise NotImplementedError

    def write(self, doc: Doc, context: Context) -> None:
        self.sink.add(self.record(doc, context), context["line"])

    def finish(self) -> None:
        """The run is complete: the output goes into place."""
        self.sink.finish()

    def close(self) -> None:
        """Release the output; after ``finish`` a no-op, else the partial stays."""
        self.sink.close()


# --- JSONL --------------------------------------------------------------------------


def _float(value: Optional[float]) -> Optional[float]:
    return None if value is None or math.isnan(value) else round(float(value), 6)


def doc_to_json(doc: Doc) -> dict[str, Any]:
    """Plain JSON of a Doc's parse and uncertainty; a token's heads are Doc token indices,
    the root's head is the root itself (as in spaCy's ``Doc.to_json``); a sentence's
    ``mbr_heads`` and samples number its words 1..n, 0 = ROOT (CoNLL-U)."""
    sentences = []
    for sent in doc.sents:
        heads, deps = described_tree(sent)
        tokens = [
            {
                "i": token.i,
                "text": token.text,
                "head": token.i if head == 0 else sent.start + head - 1,
                "dep": dep,
                "head_prob": _float(token._.head_prob),
                "head_entropy": _float(token._.head_entropy),
                "dep_prob": _float(token._.dep_prob),
                "head_distribution": [[h.i, _float(p)] for h, p in token._.head_distribution or []],
                **{name: _float(token._.get(name)) for name in WORD_VALUES},
            }
            for token, head, dep in zip(sent, heads, deps)
        ]
        sentences.append(
            {
                "start": sent.start,
                "end": sent.end,
                "text": sent.text,
                "tree_entropy": _float(sent._.tree_entropy),
                "entropy_per_word": _float(sent._.entropy_per_word),
                "log_partition": _float(sent._.log_partition),
                "expected_attachment": _float(sent._.expected_attachment),
                **{name: _float(sent._.get(name)) for name in SENTENCE_VALUES},
                "mbr_heads": [int(h) for h in sent._.mbr_heads],
                "samples": [
                    {"heads": [int(h) for h in row], "log_prob": _float(lp)}
                    for row, lp in zip(sent._.sampled_heads, sent._.sample_log_probs)
                ],
                "tokens": tokens,
            }
        )
    return {"text": doc.text, "tree_entropy": _float(doc._.tree_entropy), "sentences": sentences}


class JsonlWriter(RecordWriter):
    """One JSON object per document and line: the input's metadata, ``line``, then
    :func:`doc_to_json`."""

    def record(self, doc: Doc, context: Context) -> str:
        record = dict(context.get("meta", {}))
        record["line"] = context["line"]
        record.update(doc_to_json(doc))
        return json.dumps(record, ensure_ascii=False) + "\n"


# --- CoNLL-U ------------------------------------------------------------------------

_SPACE_ESCAPES = {"\\": "\\\\", " ": "\\s", "\t": "\\t", "\r": "\\r", "\n": "\\n", "|": "\\p"}


def escape_spaces(text: str) -> str:
    """Whitespace as UD writes it in ``SpacesAfter`` (\\s, \\t, \\r, \\n; \\p for |)."""
    return "".join(_SPACE_ESCAPES.get(c, c) for c in text)


def word_heads(heads: Sequence[int], space: Sequence[bool]) -> list[int]:
    """A sentence's heads (CoNLL-U convention: 1-based, 0 = ROOT, -1 = none) once its
    whitespace tokens (``space``) are dropped and the words renumbered. A word that hangs
    from a whitespace token takes that token's head, and so on up (``biaffine_parser``
    never makes a whitespace token a head; other score sources may)."""
    number = numpy.cumsum([not is_space for is_space in space])  # new index of each token
    out = []
    for i, head in enumerate(heads):
        if space[i]:
            continue
        steps = 0
        while head > 0 and space[head - 1] and steps < len(heads):
            head, steps = heads[head - 1], steps + 1
        if head > 0 and space[head - 1]:  # whitespace tokens heading each other: no word head
            head = 0
        out.append(int(number[head - 1]) if head > 0 else int(head))
    return out


class ConlluWriter(RecordWriter):
    """CoNLL-U with HeadProb, HeadEntropy and DepProb in MISC; sentence values in comments.

    From CoNLL-U input, each sentence is the input's :class:`ConlluSentence` with only the
    predicted columns (HEAD, DEPREL, and LEMMA, UPOS, XPOS, FEATS when the pipeline sets
    them) replaced, two MISC items and the comments added: other comments, multiword
    tokens, empty nodes and columns come back verbatim. From text, the other columns are
    ``_``. CoNLL-U has no whitespace tokens: each one (a line break, a tab, extra spaces)
    becomes ``SpacesAfter`` of the word before it, heads and sampled heads are renumbered
    over the words (see :func:`word_heads`), a sentence of whitespace only is not written,
    and line breaks in ``# text`` become spaces."""

    def record(self, doc: Doc, context: Context) -> str:
        out = io.StringIO(newline="")
        write_conllu(self.sentences(doc, context), out)
        return out.getvalue()

    def sentences(self, doc: Doc, context: Context) -> Iterator[ConlluSentence]:
        """The CoNLL-U sentences of an annotated Doc."""
        predicted = {
            column: doc.has_annotation(attr)
            for column, attr in (("lemma", "LEMMA"), ("upos", "POS"), ("xpos", "TAG"), ("feats", "MORPH"))
        }
        source: Optional[ConlluSentence] = context.get("sentence")
        if source is not None:
            sents = list(doc.sents)
            if len(sents) != 1 or len(doc) != source.n:
                raise RuntimeError(
                    f"line {context['line']}: the pipeline changed the gold tokens or sentence "
                    f"({len(doc)} tokens in {len(sents)} sentences for {source.n} words)"
                )
            yield _annotated(_with_parse(source, sents[0], predicted), sents[0], [False] * len(doc))
            return
        written = 0
        for sent in doc.sents:
            space = [token.is_space for token in sent]
            if all(space):
                continue
            written += 1
            yield _annotated(_from_text(sent, space, context, written, predicted), sent, space)


def _deprel(dep: str, head: int, default: str = "_") -> str:
    if head == 0 and dep == "ROOT":
        return "root"
    return dep or default


def _predicted_columns(token: Token, predicted: dict[str, bool]) -> dict[str, str]:
    values = {
        "lemma": token.lemma_,
        "upos": token.pos_,
        "xpos": token.tag_,
        "feats": str(token.morph),
    }
    return {column: values[column] or "_" for column, on in predicted.items() if on}


def _uncertainty(token: Token) -> dict[str, Optional[str]]:
    """The word's MISC items, :data:`CONLLU_MISC` (as the Stanza export's: HeadProb and HeadEntropy
    always, DepProb where the scores carry relation scores, HeadMI and MixtureHeadProb where the
    sentence has members; None, which removes an earlier run's, where it has no value)."""
    values = {key: token._.get(name) for key, name in CONLLU_MISC.items()}
    return {key: None if value is None else f"{value:.4f}" for key, value in values.items()}


def _with_parse(source: ConlluSentence, sent: Span, predicted: dict[str, bool]) -> ConlluSentence:
    """The input sentence with the Doc's predicted columns and uncertainty in MISC."""
    heads, deps = described_tree(sent)
    out = source
    for m, (token, head, dep, misc) in enumerate(zip(sent, heads, deps, source.misc), start=1):
        out = out.with_word(
            m,
            head=head,
            deprel=_deprel(dep, head, source.deprels[m - 1]),
            misc=format_misc(misc, _uncertainty(token)),
            **_predicted_columns(token, predicted),
        )
    return out


def _from_text(
    sent: Span, space: list[bool], context: Context, number: int, predicted: dict[str, bool]
) -> ConlluSentence:
    """A new sentence of the Doc's words; whitespace tokens become ``SpacesAfter``."""
    doc = sent.doc
    words = [token for token in sent if not token.is_space]
    tree, deps = described_tree(sent)
    heads = word_heads(tree, space)
    word_deps = [dep for dep, is_space in zip(deps, space) if not is_space]
    misc = []
    for token in words:
        after, i = token.whitespace_, token.i + 1
        while i < len(doc) and doc[i].is_space:
            after += doc[i].text_with_ws
            i += 1
        items: dict[str, Optional[str]] = {}
        if not after and i < len(doc):
            items["SpaceAfter"] = "No"
        elif after and after != " ":
            items["SpacesAfter"] = escape_spaces(after)
        items.update(_uncertainty(token))
        misc.append(format_misc("_", items))
    columns: dict[str, list[str]] = {column: [] for column, on in predicted.items() if on}
    for token in words:
        for column, value in _predicted_columns(token, predicted).items():
            columns[column].append(value)
    text = re.sub(r"\s*[\r\n]+\s*", " ", sent.text).strip()
    return ConlluSentence.from_words(
        [token.text for token in words],
        heads=[-1, *heads],
        deprels=[_deprel(dep, head) for dep, head in zip(word_deps, heads)],
        misc=misc,
        comments=[f"# sent_id = line{context['line']}-{number}", f"# text = {text}"],
        **cast("dict[str, Any]", columns),
    )


def _annotated(sentence: ConlluSentence, sent: Span, space: list[bool]) -> ConlluSentence:
    """The sentence with its tree entropy, log Z, expected attachment and samples as
    comments (replacing those of an earlier run)."""
    out = ConlluSentence(
        [line for line in sentence.comments if not _SAMPLE_COMMENT.match(line)], sentence.rows, sentence.line
    )
    for key in SENTENCE_COMMENTS:
        value = sent._.get(key)
        out = out.with_comment(key, None if value is None else f"{value:.6f}")
    for s, (row, lp) in enumerate(zip(sent._.sampled_heads, sent._.sample_log_probs), start=1):
        heads = " ".join(str(h) for h in word_heads([int(h) for h in row], space))
        out = out.with_comment(f"sample_{s}", f"log_prob {lp:.6f} heads {heads}")
    return out


# --- DocBin -------------------------------------------------------------------------


class DocBinWriter:
    """A directory of DocBin shards (``00000.spacy``, ...), ``store_user_data=True``,
    made as ``OUTPUT.partial`` and renamed to OUTPUT by ``finish``.

    Shards keep memory constant; spaCy's ``Corpus`` and ``spacy train`` read such a
    directory directly. Each shard is written under a temporary name, renamed, and then
    listed in the manifest; ``close`` after an interrupt writes the documents held as one
    more shard. The parser's raw scores (``Doc._.parser_scores``) are left out to keep
    files small; the tree_expectations records are kept."""

    def __init__(
        self, paths: OutputPaths, header: dict[str, Any], kept: Optional[Kept], shard_size: int = SHARD_SIZE
    ) -> None:
        self.paths = paths
        if kept is None:
            paths.partial.mkdir()
        else:
            clear_unlisted_shards(paths.partial, kept)
        self.manifest = Manifest(paths.manifest, header, kept)
        self.shard_size = shard_size
        self.shard = len(kept.shards) if kept else 0
        self.docs = kept.docs if kept else 0
        self.pending: list[tuple[Doc, int]] = []  # finished Docs, not yet in a shard
        self.where = str(paths.partial)
        self.done = False

    def write(self, doc: Doc, context: Context) -> None:
        if doc.has_extension("parser_scores"):
            doc._.parser_scores = None
        self.pending.append((doc, context["line"]))
        if len(self.pending) >= self.shard_size:
            self._flush()

    def _flush(self) -> None:
        """Write the Docs held as the next shard; they are let go only once it is listed,
        so a flush cut short by an interrupt is simply done again by ``close``."""
        if not self.pending:
            return
        name, count = f"{self.shard:05d}.spacy", len(self.pending)
        temporary = self.paths.partial / f"{name}.tmp"
        DocBin(store_user_data=True, docs=[doc for doc, _ in self.pending]).to_disk(temporary)
        os.replace(temporary, self.paths.partial / name)
        self.manifest.append({"shard": name, "docs": count, "line": self.pending[-1][1]})
        self.shard, self.docs, self.pending = self.shard + 1, self.docs + count, []

    def finish(self) -> None:
        self._flush()
        self.manifest.close()
        self.done = True
        os.replace(self.paths.partial, self.paths.target)
        self.manifest.remove()
        self.where = str(self.paths.target)

    def close(self) -> None:
        if self.done:
            return
        self.done = True
        try:
            self._flush()
        except OSError:  # the error being reported (a full disk): --resume makes these Docs again
            pass
        finally:
            self.manifest.close()
            kept = settle(self.paths, folder=True)
            if kept is not None:
                self.docs = kept.docs


Writer = Union[JsonlWriter, ConlluWriter, DocBinWriter]


def make_writer(
    path: Path,
    fmt: str,
    *,
    header: Optional[dict[str, Any]] = None,
    kept: Optional[Kept] = None,
    shard_size: int = SHARD_SIZE,
) -> Writer:
    """The writer of ``fmt`` to ``path`` (``-``: stdout, not for ``spacy``), after every
    check (``check_output_path``, :func:`~spacy_treexp.cli.partial.prepare`): this
    creates ``OUTPUT.partial`` and its manifest with ``header``, or takes up ``kept``."""
    if is_stdio(path):
        sink: Sink = StdoutSink()
    else:
        paths = OutputPaths.of(path)
        if header is None:
            raise ValueError("a file output needs the run's header")
        try:
            if fmt == "spacy":
                return DocBinWriter(paths, header, kept, shard_size)
            sink = PartialFile(paths, header, kept)
        except OSError as e:
            raise UserError(f"--output {path}: cannot write {paths.partial} ({e.strerror or e})") from e
    if fmt == "jsonl":
        return JsonlWriter(sink)
    return ConlluWriter(sink)


def read_docbin(path: Path, vocab: Vocab) -> Iterator[Doc]:
    """Docs of a .spacy file or of a directory of shards written by ``annotate``."""
    files = sorted(path.glob("*.spacy")) if path.is_dir() else [path]
    for file in files:
        yield from DocBin(store_user_data=True).from_disk(file).get_docs(vocab)
