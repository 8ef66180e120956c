"""The ``spacy-treexp`` command line (also ``python -m spacy_treexp``).

Commands:

* ``parse TEXT``: a table per sentence (head, relation, head probability, head
  entropy), the sentence's tree entropy and, with ``--samples K``, alternative parses.
* ``annotate INPUT -o OUTPUT``: .txt (one document per line), .jsonl (``{"text": ...}``)
  or .conllu (gold tokens and sentences kept) in; .jsonl, .conllu (HeadProb and
  HeadEntropy in MISC) or .spacy out. Streams, writes each finished document at once,
  reports bad lines with their line number and goes on (``--strict`` stops).
* ``render INPUT -o page.html``: the standalone HTML view (``spacy_treexp.render``).

The pipeline is the shipped default model (``spacy_treexp.load()``) unless ``--model``
names another spaCy pipeline (package name or directory); a ``tree_expectations``
component is added when the pipeline has none. ``--stanza DIR`` runs a Stanza pipeline
directory instead and converts its parses to spaCy Docs with the same attributes.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import signal
import sys
from functools import partial
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, TextIO, Tuple, Union

import numpy
import spacy
from spacy.language import Language
from spacy.tokens import Doc, DocBin
from spacy.util import raise_error

from spacy_treexp.pipeline import attributes  # noqa: F401  (registers the extensions)

INPUT_SUFFIXES = (".txt", ".jsonl", ".conllu")
OUTPUT_SUFFIXES = (".jsonl", ".conllu", ".spacy")
SENTENCE_SETTERS = ("senter", "sentencizer")
SHARD_SIZE = 1000

# An input item: raw text, or (words, spaces) from CoNLL-U (gold tokens, one sentence).
Item = Union[str, Tuple[List[str], List[bool]]]


class BadInputError(ValueError):
    """A line of the input file that cannot be read."""


# --- the pipeline -------------------------------------------------------------------


def load_pipeline(model: Optional[str], n_samples: int = 0, gpu: int = -1) -> Language:
    """The pipeline to run, with a ``tree_expectations`` drawing ``n_samples`` samples."""
    if gpu >= 0:
        try:
            spacy.require_gpu(gpu)
        except ValueError as e:
            raise SystemExit(
                f"spacy-treexp: --gpu {gpu}: {e} (spaCy on GPU needs CUDA and cupy, "
                "e.g. pip install cupy-cuda12x)."
            ) from e
    if model is None:
        import spacy_treexp

        try:
            nlp = spacy_treexp.load()
        except (ImportError, OSError) as e:
            raise SystemExit(
                f"spacy-treexp: the default model is not available ({e}); pass --model "
                "with a spaCy pipeline that has a parser writing arc scores."
            ) from e
    else:
        nlp = spacy.load(model)
    settings: Dict[str, Any] = {"n_samples": n_samples, "device": "cuda" if gpu >= 0 else "cpu"}
    if "tree_expectations" in nlp.pipe_names:
        config = dict(nlp.get_pipe_config("tree_expectations"))
        config.pop("factory", None)
        config.update(settings)
        nlp.replace_pipe("tree_expectations", "tree_expectations", config=config)
    else:
        nlp.add_pipe("tree_expectations", config=settings)
    _check_scores_upstream(nlp)
    return nlp


def _check_scores_upstream(nlp: Language) -> None:
    """Fail at once, not on every document, when nothing writes the default scores."""
    config = nlp.get_pipe_config("tree_expectations")
    if config["scores"] != {"@misc": "spacy_treexp.parser_scores.v1"}:
        return
    before = nlp.pipe_names[: nlp.pipe_names.index("tree_expectations")]
    if not any("doc._.parser_scores" in nlp.get_pipe_meta(name).assigns for name in before):
        raise SystemExit(
            f"spacy-treexp: no component of the pipeline {before} writes arc scores "
            "(Doc._.parser_scores); use a pipeline with 'biaffine_parser'."
        )


def make_doc(nlp: Language, item: Item) -> Doc:
    """A Doc for an input item; CoNLL-U items keep their tokens as one sentence."""
    if isinstance(item, str):
        return nlp.make_doc(item)
    words, spaces = item
    return Doc(nlp.vocab, words=words, spaces=spaces, sent_starts=[True] + [False] * (len(words) - 1))


def _ignore_error(proc_name: str, proc: Any, docs: List[Doc], e: Exception) -> None:
    """Error handler for streaming: failed docs are dropped, then retried one by one."""


def annotate_stream(
    nlp: Language,
    items: Iterable[Tuple[Item, Dict[str, Any]]],
    *,
    batch_size: int,
    n_process: int,
    gold_sentences: bool,
    on_error: Callable[[Dict[str, Any], Exception], None],
) -> Iterator[Tuple[Doc, Dict[str, Any]]]:
    """Run ``nlp`` over items in input order. A document whose batch failed is
    re-run alone so the error names its line; ``on_error`` decides to go on or stop.
    With ``gold_sentences`` (CoNLL-U), the sentence-setting components do not run."""
    gold = [n for n, p in nlp.pipeline if _factory(nlp, n) in SENTENCE_SETTERS]
    pending: Dict[int, Tuple[Item, Dict[str, Any]]] = {}

    def feed() -> Iterator[Tuple[Doc, int]]:
        for seq, (item, context) in enumerate(items):
            pending[seq] = (item, context)
            yield make_doc(nlp, item), seq

    def retry(seq: int) -> Iterator[Tuple[Doc, Dict[str, Any]]]:
        item, context = pending.pop(seq)
        nlp.set_error_handler(raise_error)
        try:
            doc = nlp(make_doc(nlp, item))
        except Exception as e:  # reported with its line number
            on_error(context, e)
            return
        finally:
            nlp.set_error_handler(_ignore_error)
        yield doc, context

    nlp.set_error_handler(_ignore_error)
    with nlp.select_pipes(disable=gold if gold_sentences else []):
        for doc, seq in nlp.pipe(feed(), as_tuples=True, batch_size=batch_size, n_process=n_process):
            for earlier in sorted(s for s in pending if s < seq):
                yield from retry(earlier)
            yield doc, pending.pop(seq)[1]
        for earlier in sorted(pending):
            yield from retry(earlier)


def _factory(nlp: Language, name: str) -> str:
    return nlp.get_pipe_meta(name).factory


def load_stanza(path: str, gpu: int, pretokenized: bool) -> Any:
    """A Stanza pipeline directory (see ``spacy_treexp.stanza.pipeline_from_dir``)."""
    from spacy_treexp.stanza.convert import pipeline_from_dir

    options: Dict[str, Any] = {"use_gpu": gpu >= 0, "logging_level": "WARN"}
    if pretokenized:  # CoNLL-U: gold words, one sentence per document
        options["tokenize_pretokenized"] = True
    try:
        return pipeline_from_dir(path, **options)
    except ValueError as e:
        raise SystemExit(f"spacy-treexp: {e}") from e


def stanza_stream(
    pipeline: Any,
    items: Iterable[Tuple[Item, Dict[str, Any]]],
    *,
    n_samples: int,
    on_error: Callable[[Dict[str, Any], Exception], None],
) -> Iterator[Tuple[Doc, Dict[str, Any]]]:
    """Parse with Stanza, then convert to spaCy Docs carrying the same attributes."""
    from spacy_treexp.stanza.convert import to_spacy

    vocab = spacy.blank(pipeline.lang).vocab
    for item, context in items:
        try:
            parsed = pipeline(item if isinstance(item, str) else [item[0]])
            doc = to_spacy(parsed, vocab, n_samples=n_samples)
        except Exception as e:  # reported with its line number
            on_error(context, e)
            continue
        yield doc, context


def make_runner(
    args: argparse.Namespace,
    *,
    n_samples: int,
    gold_sentences: bool,
    n_process: int,
    on_error: Callable[[Dict[str, Any], Exception], None],
) -> Callable[[Iterable[Tuple[Item, Dict[str, Any]]]], Iterator[Tuple[Doc, Dict[str, Any]]]]:
    """A function from ``(item, context)`` pairs to ``(Doc, context)`` pairs, in input
    order, running the spaCy pipeline (``--model``) or a Stanza one (``--stanza``)."""
    if args.stanza is not None:
        if args.model is not None:
            raise SystemExit("spacy-treexp: use either --model or --stanza.")
        if n_process > 1:
            raise SystemExit("spacy-treexp: --n-process works with spaCy pipelines only.")
        pipeline = load_stanza(args.stanza, args.gpu, pretokenized=gold_sentences)
        return partial(stanza_stream, pipeline, n_samples=n_samples, on_error=on_error)
    nlp = load_pipeline(args.model, n_samples=n_samples, gpu=args.gpu)
    return partial(
        annotate_stream,
        nlp,
        batch_size=args.batch_size,
        n_process=n_process,
        gold_sentences=gold_sentences,
        on_error=on_error,
    )


# --- readers ------------------------------------------------------------------------


class Reader:
    """Iterates ``(item, context)`` over an input file; bad lines go to ``on_bad``."""

    def __init__(self, path: Path, on_bad: Callable[[int, str], None]) -> None:
        suffix = path.suffix.lower()
        if suffix not in INPUT_SUFFIXES:
            raise SystemExit(f"spacy-treexp: input must end in one of {INPUT_SUFFIXES}: {path}")
        if not path.is_file():
            raise SystemExit(f"spacy-treexp: no such input file: {path}")
        self.path = path
        self.suffix = suffix
        self.on_bad = on_bad
        self.gold_sentences = suffix == ".conllu"

    def count(self) -> int:
        """Number of documents (for the progress bar), by one cheap pass."""
        with self.path.open("rb") as f:
            if self.suffix == ".conllu":
                total, inside = 0, False
                for line in f:
                    blank = not line.strip()
                    if not blank and not line.startswith(b"#") and not inside:
                        total, inside = total + 1, True
                    elif blank:
                        inside = False
                return total
            return sum(1 for line in f if line.strip())

    def __iter__(self) -> Iterator[Tuple[Item, Dict[str, Any]]]:
        if self.suffix == ".conllu":
            yield from self._conllu()
            return
        with self.path.open("rb") as f:
            for number, raw in enumerate(f, start=1):
                try:
                    line = raw.decode("utf8").rstrip("\r\n")
                except UnicodeDecodeError as e:
                    self.on_bad(number, f"not valid UTF-8 ({e.reason})")
                    continue
                if not line.strip():
                    continue
                if self.suffix == ".txt":
                    yield line, {"line": number}
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as e:
                    self.on_bad(number, f"invalid JSON ({e.msg})")
                    continue
                if not isinstance(record, dict) or not isinstance(record.get("text"), str):
                    self.on_bad(number, 'expected an object with a string "text" field')
                    continue
                meta = {key: value for key, value in record.items() if key != "text"}
                yield record["text"], {"line": number, "meta": meta}

    def _conllu(self) -> Iterator[Tuple[Item, Dict[str, Any]]]:
        block: List[Tuple[int, str]] = []
        with self.path.open("rb") as f:
            for number, raw in enumerate(f, start=1):
                try:
                    line = raw.decode("utf8").rstrip("\r\n")
                except UnicodeDecodeError as e:
                    self.on_bad(number, f"not valid UTF-8 ({e.reason})")
                    line = "\x00bad"
                if line.strip():
                    block.append((number, line))
                    continue
                if block:
                    yield from self._sentence(block)
                block = []
        if block:
            yield from self._sentence(block)

    def _sentence(self, block: List[Tuple[int, str]]) -> Iterator[Tuple[Item, Dict[str, Any]]]:
        try:
            yield parse_conllu_sentence(block)
        except BadInputError as e:
            line, message = e.args
            self.on_bad(line, message)


def parse_conllu_sentence(block: Sequence[Tuple[int, str]]) -> Tuple[Item, Dict[str, Any]]:
    """(words, spaces) and the context needed to write the sentence back."""
    comments: List[str] = []
    words: List[str] = []
    spaces: List[bool] = []
    rows: List[List[str]] = []
    ranges: Dict[int, Tuple[str, int]] = {}  # first word id -> (range line, last id)
    for number, line in block:
        if line == "\x00bad":
            raise BadInputError(number, "not valid UTF-8")
        if line.startswith("#"):
            if not words:
                comments.append(line)
                continue
            raise BadInputError(number, "comment inside a sentence")
        cols = line.split("\t")
        if len(cols) != 10:
            raise BadInputError(number, f"expected 10 tab-separated columns, got {len(cols)}")
        token_id = cols[0]
        if "." in token_id:  # empty node of the enhanced graph: not a word
            continue
        if "-" in token_id:
            first, _, last = token_id.partition("-")
            if not (first.isdigit() and last.isdigit()):
                raise BadInputError(number, f"bad multiword token id {token_id!r}")
            ranges[int(first)] = (line, int(last))
            continue
        if not token_id.isdigit() or int(token_id) != len(words) + 1:
            raise BadInputError(number, f"word id {token_id!r} where {len(words) + 1} was expected")
        words.append(cols[1])
        rows.append(cols)
        spaces.append("SpaceAfter=No" not in cols[9].split("|"))
    if not words:
        raise BadInputError(block[0][0], "sentence without words")
    # Inside a multiword token there is no space; its last word takes the token's MISC.
    for first, (line, last) in ranges.items():
        misc = line.split("\t")[9].split("|")
        for i in range(first, min(last, len(words)) + 1):
            spaces[i - 1] = i == last and "SpaceAfter=No" not in misc
    context = {"line": block[0][0], "comments": comments, "rows": rows, "ranges": {k: v[0] for k, v in ranges.items()}}
    return (words, spaces), context


# --- writers ------------------------------------------------------------------------


def _float(value: Optional[float]) -> Optional[float]:
    return None if value is None or math.isnan(value) else round(float(value), 6)


def doc_to_json(doc: Doc) -> Dict[str, Any]:
    """Plain JSON of a Doc's parse and uncertainty; heads are Doc token indices, the
    root's head is the root itself (as in spaCy's ``Doc.to_json``)."""
    sentences = []
    for sent in doc.sents:
        tokens = []
        for token in sent:
            tokens.append(
                {
                    "i": token.i,
                    "text": token.text,
                    "head": token.head.i,
                    "dep": token.dep_,
                    "head_prob": _float(token._.head_prob),
                    "head_entropy": _float(token._.head_entropy),
                    "dep_prob": _float(token._.dep_prob),
                    "head_distribution": [[h.i, _float(p)] for h, p in token._.head_distribution or []],
                }
            )
        samples = sent._.sampled_heads
        log_probs = sent._.sample_log_probs
        sentences.append(
            {
                "start": sent.start,
                "end": sent.end,
                "text": sent.text,
                "tree_entropy": _float(sent._.tree_entropy),
                "entropy_per_word": _float(sent._.entropy_per_word),
                "log_partition": _float(sent._.log_partition),
                "expected_attachment": _float(sent._.expected_attachment),
                "mbr_heads": [int(h) for h in sent._.mbr_heads],
                "samples": [
                    {"heads": [int(h) for h in row], "log_prob": _float(lp)}
                    for row, lp in zip(samples, log_probs)
                ],
                "tokens": tokens,
            }
        )
    return {"text": doc.text, "tree_entropy": _float(doc._.tree_entropy), "sentences": sentences}


class JsonlWriter:
    """One JSON object per document and line, flushed as soon as it is written."""

    def __init__(self, path: Path) -> None:
        self.file: TextIO = path.open("w", encoding="utf8")

    def write(self, doc: Doc, context: Dict[str, Any]) -> None:
        record = dict(context.get("meta", {}))
        record["line"] = context["line"]
        record.update(doc_to_json(doc))
        self.file.write(json.dumps(record, ensure_ascii=False) + "\n")
        self.file.flush()

    def close(self) -> None:
        self.file.close()


_SPACE_ESCAPES = {"\\": "\\\\", " ": "\\s", "\t": "\\t", "\r": "\\r", "\n": "\\n", "|": "\\p"}


def _escape_spaces(text: str) -> str:
    """Whitespace as UD writes it in ``SpacesAfter`` (\\s, \\t, \\r, \\n; \\p for |)."""
    return "".join(_SPACE_ESCAPES.get(c, c) for c in text)


def word_heads(heads: Sequence[int], space: Sequence[bool]) -> List[int]:
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


class ConlluWriter:
    """CoNLL-U with HeadProb and HeadEntropy in MISC; sentence values in comments.

    Columns the pipeline predicts are written from the Doc; the others keep the input's
    values (CoNLL-U input) or ``_``. CoNLL-U has no whitespace tokens: each one (a line
    break, a tab, extra spaces) becomes ``SpacesAfter`` of the word before it, heads and
    sampled heads are renumbered over the words (see ``word_heads``), a sentence of
    whitespace only is not written, and line breaks in ``# text`` become spaces."""

    def __init__(self, path: Path) -> None:
        self.file: TextIO = path.open("w", encoding="utf8")

    def write(self, doc: Doc, context: Dict[str, Any]) -> None:
        predicted = {attr: doc.has_annotation(attr) for attr in ("LEMMA", "POS", "TAG", "MORPH")}
        written = 0
        for sent in doc.sents:
            space = [token.is_space for token in sent]
            if all(space):
                continue
            written += 1
            words = [token for token in sent if not token.is_space]
            tree = [0 if t.head.i == t.i else t.head.i - sent.start + 1 for t in sent]
            heads = word_heads(tree, space)
            lines = list(context.get("comments", []))
            if "rows" not in context:
                text = re.sub(r"\s*[\r\n]+\s*", " ", sent.text).strip()
                lines += [f"# sent_id = line{context['line']}-{written}", f"# text = {text}"]
            lines += [
                f"# tree_entropy = {sent._.tree_entropy:.6f}",
                f"# log_partition = {sent._.log_partition:.6f}",
                f"# expected_attachment = {sent._.expected_attachment:.6f}",
            ]
            for s, (row, lp) in enumerate(zip(sent._.sampled_heads, sent._.sample_log_probs), 1):
                sample = " ".join(str(h) for h in word_heads([int(h) for h in row], space))
                lines.append(f"# sample_{s} = log_prob {lp:.6f} heads {sample}")
            rows = context.get("rows")
            ranges = context.get("ranges", {})
            for m, (token, head) in enumerate(zip(words, heads), start=1):
                if m in ranges:
                    lines.append(ranges[m])
                old = rows[m - 1] if rows else ["_"] * 10
                misc = [] if old[9] == "_" else [
                    x for x in old[9].split("|") if not x.startswith(("HeadProb=", "HeadEntropy="))
                ]
                if not rows:
                    after, i = token.whitespace_, token.i + 1
                    while i < len(doc) and doc[i].is_space:
                        after += doc[i].text_with_ws
                        i += 1
                    if not after and i < len(doc):
                        misc.append("SpaceAfter=No")
                    elif after and after != " ":
                        misc.append(f"SpacesAfter={_escape_spaces(after)}")
                misc.append(f"HeadProb={token._.head_prob:.4f}")
                misc.append(f"HeadEntropy={token._.head_entropy:.4f}")
                dep = token.dep_ or old[7]
                if head == 0 and dep == "ROOT":
                    dep = "root"
                cols = [
                    str(m),
                    token.text,
                    token.lemma_ if predicted["LEMMA"] else old[2],
                    token.pos_ if predicted["POS"] else old[3],
                    token.tag_ if predicted["TAG"] else old[4],
                    str(token.morph) or "_" if predicted["MORPH"] else old[5],
                    str(head),
                    dep,
                    old[8],
                    "|".join(misc),
                ]
                lines.append("\t".join(cols))
            self.file.write("\n".join(lines) + "\n\n")
        self.file.flush()

    def close(self) -> None:
        self.file.close()


class DocBinWriter:
    """A directory of DocBin shards (``00000.spacy``, ...), ``store_user_data=True``.

    Shards keep memory constant; spaCy's ``Corpus`` and ``spacy train`` read such a
    directory directly. The parser's raw scores (``Doc._.parser_scores``) are left out
    to keep files small; the tree_expectations records are kept."""

    def __init__(self, path: Path) -> None:
        if path.exists() and (not path.is_dir() or any(path.iterdir())):
            raise SystemExit(f"spacy-treexp: {path} exists and is not an empty directory.")
        path.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.shard = 0
        self.docbin = DocBin(store_user_data=True)

    def write(self, doc: Doc, context: Dict[str, Any]) -> None:
        if doc.has_extension("parser_scores"):
            doc._.parser_scores = None
        self.docbin.add(doc)
        if len(self.docbin) >= SHARD_SIZE:
            self._flush()

    def _flush(self) -> None:
        if len(self.docbin):
            target = self.path / f"{self.shard:05d}.spacy"
            partial = target.with_suffix(".partial")
            self.docbin.to_disk(partial)
            partial.replace(target)
            self.shard += 1
            self.docbin = DocBin(store_user_data=True)

    def close(self) -> None:
        self._flush()


def make_writer(path: Path) -> Union[JsonlWriter, ConlluWriter, DocBinWriter]:
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        return JsonlWriter(path)
    if suffix == ".conllu":
        return ConlluWriter(path)
    if suffix == ".spacy":
        return DocBinWriter(path)
    raise SystemExit(f"spacy-treexp: output must end in one of {OUTPUT_SUFFIXES}: {path}")


def read_docbin(path: Path, nlp_vocab: Any) -> Iterator[Doc]:
    """Docs of a .spacy file or of a directory of shards written by ``annotate``."""
    files = sorted(path.glob("*.spacy")) if path.is_dir() else [path]
    for file in files:
        yield from DocBin(store_user_data=True).from_disk(file).get_docs(nlp_vocab)


# --- commands -----------------------------------------------------------------------


def cmd_parse(args: argparse.Namespace) -> int:
    def fail(context: Dict[str, Any], e: Exception) -> None:
        raise SystemExit(f"spacy-treexp: {type(e).__name__}: {e}")

    run = make_runner(args, n_samples=args.samples, gold_sentences=False, n_process=1, on_error=fail)
    doc = next(run([(args.text, {"line": 1})]))[0]
    out = sys.stdout
    for k, sent in enumerate(doc.sents, start=1):
        out.write(
            f"Sentence {k}: tree entropy {sent._.tree_entropy:.3f} nats "
            f"({sent._.entropy_per_word:.3f} per word), expected attachment "
            f"{100 * sent._.expected_attachment:.1f}%, log Z {sent._.log_partition:.2f}\n"
        )
        shown = {t.i: _escape_spaces(t.text) if t.is_space else t.text for t in sent}  # "\n" visible
        width = max(4, max(len(text) for text in shown.values()))
        out.write(f"  {'#':>3}  {'word':<{width}}  {'head':>4}  {'head word':<{width + 5}}  "
                  f"{'dep':<10}  {'P(head)':>7}  {'H(head)':>7}\n")
        for m, token in enumerate(sent, start=1):
            root = token.head.i == token.i
            head = 0 if root else token.head.i - sent.start + 1
            head_word = "ROOT" if root else shown.get(token.head.i, token.head.text)
            out.write(
                f"  {m:>3}  {shown[token.i]:<{width}}  {head:>4}  {head_word:<{width + 5}}  "
                f"{token.dep_:<10}  {token._.head_prob:>7.3f}  {token._.head_entropy:>7.3f}\n"
            )
        predicted = numpy.array(
            [0 if t.head.i == t.i else t.head.i - sent.start + 1 for t in sent]
        )
        for s, (row, lp) in enumerate(zip(sent._.sampled_heads, sent._.sample_log_probs), 1):
            if (row < 0).any():
                out.write(f"  sample {s}: none (fewer distinct trees than samples)\n")
                continue
            differ = int((row != predicted).sum())
            heads = " ".join(str(int(h)) for h in row)
            out.write(f"  sample {s}: log p {lp:8.3f}  heads {heads}  ({differ} differ)\n")
        out.write("\n")
    return 0


def cmd_annotate(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    if args.n_process > 1 and args.gpu >= 0:
        raise SystemExit("spacy-treexp: use --n-process 1 with --gpu.")
    input_path, output_path = Path(args.input), Path(args.output)
    problems = {"count": 0}

    def report(line: int, message: str) -> None:
        problems["count"] += 1
        print(f"{input_path}:{line}: {message}", file=sys.stderr)
        if args.strict:
            raise SystemExit(1)

    reader = Reader(input_path, report)
    total = reader.count()
    writer = make_writer(output_path)  # after the input checks: never clobber on error
    run = make_runner(
        args,
        n_samples=args.samples,
        gold_sentences=reader.gold_sentences,
        n_process=args.n_process,
        on_error=lambda context, e: report(context["line"], f"{type(e).__name__}: {e}"),
    )
    written = 0
    progress = tqdm(total=total, unit="doc", disable=args.quiet or None, file=sys.stderr)
    try:
        for doc, context in run(reader):
            writer.write(doc, context)
            written += 1
            progress.update(1)
    except KeyboardInterrupt:
        print(f"interrupted: {written} documents written to {output_path}", file=sys.stderr)
        return 130
    finally:
        progress.close()
        writer.close()
    if problems["count"]:
        print(f"{problems['count']} bad input(s) skipped; {written} documents written.", file=sys.stderr)
    return 0


def cmd_render(args: argparse.Namespace) -> int:
    from spacy_treexp.pipeline.render import render

    path = Path(args.input)
    if path.suffix.lower() == ".spacy":
        docs = list(_take(read_docbin(path, spacy.blank("xx").vocab), args.limit))
    else:
        def report(line: int, message: str) -> None:
            print(f"{path}:{line}: {message}", file=sys.stderr)

        reader = Reader(path, report)
        run = make_runner(
            args, n_samples=0, gold_sentences=reader.gold_sentences, n_process=1,
            on_error=lambda context, e: report(context["line"], f"{type(e).__name__}: {e}"),
        )
        docs = [doc for doc, _ in run(_take(iter(reader), args.limit))]
    Path(args.output).write_text(render(docs, alt_threshold=args.alt_threshold), encoding="utf8")
    print(f"wrote {len(docs)} document(s) to {args.output}", file=sys.stderr)
    return 0


def _take(iterable: Iterable[Any], limit: int) -> Iterator[Any]:
    for k, value in enumerate(iterable):
        if k >= limit:
            return
        yield value


def _terminate(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="spacy-treexp",
        description="Dependency parses with exact arc marginals, tree entropy and sampled alternatives.",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    def common(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--model", default=None, help="spaCy pipeline name or path (default: the shipped model)")
        sub.add_argument("--stanza", default=None, metavar="DIR", help="a Stanza pipeline directory instead")
        sub.add_argument("--batch-size", type=int, default=64, help="documents per batch")
        sub.add_argument("--gpu", type=int, default=-1, help="GPU id (default: -1, CPU)")

    sub = commands.add_parser("parse", help="parse a text and print the uncertainty table")
    sub.add_argument("text")
    sub.add_argument("--samples", type=int, default=0, help="alternative parses to sample per sentence")
    common(sub)
    sub.set_defaults(func=cmd_parse)

    sub = commands.add_parser("annotate", help="annotate a .txt/.jsonl/.conllu file")
    sub.add_argument("input")
    sub.add_argument("-o", "--output", required=True, help=".jsonl, .conllu or .spacy (directory of shards)")
    sub.add_argument("--samples", type=int, default=0)
    sub.add_argument("--n-process", type=int, default=1)
    sub.add_argument("--strict", action="store_true", help="stop at the first bad input")
    sub.add_argument("--quiet", action="store_true", help="no progress bar")
    common(sub)
    sub.set_defaults(func=cmd_annotate)

    sub = commands.add_parser("render", help="write the HTML view of a file's parses")
    sub.add_argument("input", help=".txt, .jsonl, .conllu, or .spacy written by annotate")
    sub.add_argument("-o", "--output", required=True)
    sub.add_argument("--limit", type=int, default=20, help="documents to render (default 20)")
    sub.add_argument("--alt-threshold", type=float, default=0.1)
    common(sub)
    sub.set_defaults(func=cmd_render)

    from spacy_treexp.evaluation.run import add_arguments as add_evaluate_arguments

    sub = commands.add_parser(
        "evaluate", help="calibration, error detection and samples on a gold CoNLL-U treebank"
    )
    add_evaluate_arguments(sub)
    sub.set_defaults(func=None)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``spacy-treexp`` console script."""
    args = build_parser().parse_args(argv)
    if args.command == "evaluate":
        from spacy_treexp.evaluation.run import run_from_args

        return run_from_args(args, argv)
    for name in ("samples", "batch_size", "n_process", "limit"):
        value = getattr(args, name, None)
        if value is not None and value < (0 if name == "samples" else 1):
            raise SystemExit(f"spacy-treexp: --{name.replace('_', '-')} must be >= {0 if name == 'samples' else 1}")
    signal.signal(signal.SIGTERM, _terminate)
    return args.func(args)
