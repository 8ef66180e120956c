"""``spacy-treexp parse TEXT``: a table per sentence and, with ``--samples K``, alternative parses."""

from __future__ import annotations

import sys
from typing import Annotated, Any, TextIO

import numpy
import typer
from spacy.tokens import Doc, Span

from spacy_treexp.calibration.domain import check_prior
from spacy_treexp.calibration.map import CalibrationError
from spacy_treexp.cli.common import STDIO, BatchSize, Code, Gpu, Model, Stanza, UserError
from spacy_treexp.cli.outputs import escape_spaces
from spacy_treexp.cli.pipelines import make_runner
from spacy_treexp.pipeline.attributes import described_tree


def parse(
    text: Annotated[
        str, typer.Argument(metavar="TEXT", help="The text to parse ('-': read it from stdin).", show_default=False)
    ],
    samples: Annotated[int, typer.Option("--samples", min=0, help="Alternative parses to sample per sentence.")] = 0,
    ood_prior: Annotated[
        float,
        typer.Option(
            "--ood-prior",
            help=(
                "The share of out-of-domain text you expect, strictly between 0 and 1: P(out of domain) is given "
                "under it (0.5: even odds, the domain model as fitted)."
            ),
        ),
    ] = 0.5,
    model: Model = None,
    code: Code = None,
    stanza: Stanza = None,
    batch_size: BatchSize = 64,
    gpu: Gpu = -1,
) -> int:
    """Parse a text and print the uncertainty table of each sentence.

    Per word: head, relation, head probability and head entropy; per sentence: tree
    entropy, expected attachment and log Z, then the probability that the parse has a wrong
    head and, where the pipeline gives them, the members' mixture's, the mutual information
    and the probability that the sentence is out of domain; with --samples K, K sampled trees.
    """
    if text == STDIO:
        try:
            text = sys.stdin.buffer.read().decode("utf-8").removeprefix("\ufeff").rstrip("\r\n")
        except UnicodeDecodeError as e:
            raise UserError(f"TEXT -: standard input is not valid UTF-8 ({e.reason} at byte {e.start})") from e
    else:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:  # bytes the locale could not decode, kept as surrogates
            raise UserError("TEXT: not valid UTF-8 text") from e
    if not text.strip():
        raise UserError("TEXT is empty (or only whitespace): nothing to parse")

    try:
        check_prior(ood_prior, "--ood-prior")
    except CalibrationError as e:
        raise UserError(str(e)) from e

    def fail(context: dict[str, Any], e: Exception) -> None:
        raise UserError(f"{type(e).__name__}: {e}")

    run = make_runner(
        model=model,
        stanza=stanza,
        gpu=gpu,
        batch_size=batch_size,
        n_samples=samples,
        gold_sentences=False,
        n_process=1,
        on_error=fail,
        settings={"out_of_domain_prior": ood_prior},
    )
    for doc, _ in run([(text, {"line": 1})]):
        write_table(doc, sys.stdout, ood_prior=ood_prior)
    return 0


def risk_line(sent: Span, ood_prior: float = 0.5) -> str:
    """The sentence's risk and epistemic values that it has, in one line ('' if none):
    P(the parse has a wrong head), the members' mixture's, the mutual information between
    tree and member, and P(out of domain), labelled with the prior ``ood_prior`` it is under
    (the domain model is fitted under even prior odds of in and out of domain, so there an
    ordinary sentence may read above 50%)."""
    parts = []
    if sent._.error_probability is not None:
        parts.append(f"P(a wrong head) {100 * sent._.error_probability:.1f}%")
    if sent._.mixture_error_probability is not None:
        parts.append(f"under the members' mixture {100 * sent._.mixture_error_probability:.1f}%")
    if sent._.mutual_information is not None:
        parts.append(f"mutual information {sent._.mutual_information:.3f} nats")
    if sent._.out_of_domain is not None:
        prior = "even prior odds" if ood_prior == 0.5 else f"prior {100 * ood_prior:g}%"
        parts.append(f"P(out of domain, {prior}) {100 * sent._.out_of_domain:.1f}%")
    return "; ".join(parts)


def write_table(doc: Doc, out: TextIO, ood_prior: float = 0.5) -> None:
    """The uncertainty table of each sentence of an annotated Doc, and its samples
    (heads in CoNLL-U numbering, with how many differ from the predicted tree); the
    out-of-domain probability is labelled with the prior ``ood_prior`` it was given under."""
    for k, sent in enumerate(doc.sents, start=1):
        out.write(
            f"Sentence {k}: tree entropy {sent._.tree_entropy:.3f} nats "
            f"({sent._.entropy_per_word:.3f} per word), expected attachment "
            f"{100 * sent._.expected_attachment:.1f}%, log Z {sent._.log_partition:.2f}\n"
        )
        risk = risk_line(sent, ood_prior)
        if risk:
            out.write(f"  {risk}\n")
        shown = {t.i: escape_spaces(t.text) if t.is_space else t.text for t in sent}  # "\n" visible
        width = max(4, max(len(text) for text in shown.values()))
        heads, deps = described_tree(sent)
        dep_width = max([10, *(len(dep) for dep in deps)])  # obl:unmarked, nmod:unmarked...
        out.write(
            f"  {'#':>3}  {'word':<{width}}  {'head':>4}  {'head word':<{width + 5}}  "
            f"{'dep':<{dep_width}}  {'P(head)':>7}  {'H(head)':>7}\n"
        )
        for m, (token, head, dep) in enumerate(zip(sent, heads, deps), start=1):
            head_word = "ROOT" if head == 0 else shown[sent.start + head - 1]
            out.write(
                f"  {m:>3}  {shown[token.i]:<{width}}  {head:>4}  {head_word:<{width + 5}}  "
                f"{dep:<{dep_width}}  {token._.head_prob:>7.3f}  {token._.head_entropy:>7.3f}\n"
            )
        predicted = numpy.array(heads)
        for s, (row, lp) in enumerate(zip(sent._.sampled_heads, sent._.sample_log_probs), start=1):
            if (row < 0).any():
                out.write(f"  sample {s}: none (fewer distinct trees than samples)\n")
                continue
            differ = int((row != predicted).sum())
            row_text = " ".join(str(int(h)) for h in row)
            out.write(f"  sample {s}: log p {lp:8.3f}  heads {row_text}  ({differ} differ)\n")
        out.write("\n")
