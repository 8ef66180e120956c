"""What an audit writes: the ranked arcs as JSONL or CSV, and a standalone HTML report.

The HTML report (inline SVG and CSS, nothing external) shows each flagged sentence with its
gold tree above the words: a suspicious arc in red, its width following its score; the words
that make an invalid tree invalid outlined in orange; under the words, dashed, the head the
model prefers for each flagged word, with its marginal. A table under each sentence gives the
flagged arcs' numbers.
"""

from __future__ import annotations

import csv
import html
import io
import json
import math
from typing import Dict, Iterable, List, Optional, Sequence

from spacy_treexp.audit.arcs import ARC_FIELDS, ArcAudit, SentenceAudit
from spacy_treexp.pipeline.render import _levels as arc_levels
from spacy_treexp.pipeline.render import _mix

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 24px; color: #222; }
h1 { font-size: 20px; margin: 0 0 6px 0; }
.audit-legend { font-size: 13px; color: #555; margin-bottom: 18px; }
.audit-sentence { border-top: 1px solid #ddd; padding: 12px 0 18px 0; }
.audit-summary { font-size: 14px; margin-bottom: 6px; }
.audit-problem { color: #b34700; font-weight: 600; }
.audit-scroll { overflow-x: auto; }
.audit-word { font-size: 15px; }
.audit-label { font-size: 11px; fill: #333; }
.audit-flag { font-size: 11px; fill: #c0392b; font-weight: 600; }
.audit-model-label { font-size: 11px; fill: #1e7b45; }
table.audit-arcs { border-collapse: collapse; font-size: 12px; margin-top: 6px; }
table.audit-arcs td, table.audit-arcs th { border: 1px solid #ddd; padding: 2px 6px; text-align: left; }
"""

_GOLD = (120, 120, 120)
_FLAG = (192, 57, 43)
_PROBLEM = (230, 126, 34)
_MODEL = (30, 123, 69)
_LEVEL = 24.0


def _value(value: object) -> object:
    """A JSON/CSV value: floats rounded to 6 digits, NaN as None."""
    if isinstance(value, float):
        return None if math.isnan(value) else round(value, 6)
    return value


def arcs_jsonl(arcs: Iterable[ArcAudit]) -> str:
    """One JSON object per arc, in :data:`ARC_FIELDS` order."""
    lines = [json.dumps({k: _value(v) for k, v in arc.to_dict().items()}, ensure_ascii=False) for arc in arcs]
    return "".join(line + "\n" for line in lines)


def arcs_csv(arcs: Iterable[ArcAudit]) -> str:
    """CSV with a header of :data:`ARC_FIELDS`; None is an empty cell."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(ARC_FIELDS)
    for arc in arcs:
        writer.writerow(["" if v is None else _value(v) for v in arc.to_dict().values()])
    return buffer.getvalue()


def flagged_sentences(
    sentences: Sequence[SentenceAudit], ranked: Sequence[ArcAudit], threshold: float, limit: int
) -> List[tuple]:
    """``(sentence, its flagged arcs)`` for the sentences with an arc whose score is at least
    ``threshold`` or a tree problem, ordered by their best-ranked arc; at most ``limit``."""
    by_id: Dict[int, SentenceAudit] = {}
    flags: Dict[int, List[ArcAudit]] = {}
    order: List[int] = []
    keys = {id(arc): s for s in sentences for arc in s.arcs}
    for arc in ranked:
        sentence = keys[id(arc)]
        if arc.score < threshold and not arc.in_problem:
            continue
        key = id(sentence)
        if key not in flags:
            if len(order) >= limit:
                continue
            by_id[key] = sentence
            flags[key] = []
            order.append(key)
        flags[key].append(arc)
    return [(by_id[key], flags[key]) for key in order]


def audit_html(
    sentences: Sequence[SentenceAudit],
    ranked: Sequence[ArcAudit],
    *,
    threshold: float = 0.9,
    limit: int = 100,
    title: str = "Treebank audit",
    note: str = "",
) -> str:
    """The standalone report of the flagged sentences (see the module doc)."""
    every = flagged_sentences(sentences, ranked, threshold, len(sentences))
    flagged = every[:limit]  # the same sentences and arcs as flagged_sentences(..., limit)
    parts = [_sentence_html(s, arcs, threshold) for s, arcs in flagged]
    invalid = sum(s.tree_problem is not None for s in sentences)
    legend = (
        '<div class="audit-legend">Gold tree above the words (grey); <span style="color:#c0392b">red</span>: '
        f"a flagged arc (score &ge; {threshold:g}, width = score); "
        '<span style="color:#e67e22">orange</span> outline: a word that makes the gold tree invalid; '
        '<span style="color:#1e7b45">green, dashed, below</span>: the head the model prefers for a flagged '
        f"word, with its marginal. {len(sentences)} sentences, {sum(s.n for s in sentences)} words, "
        f"{invalid} invalid gold tree(s); {len(flagged)} of {len(every)} flagged sentence(s) shown"
        f"{' (the limit)' if len(flagged) < len(every) else ''}."
        f"{(' ' + html.escape(note)) if note else ''}</div>"
    )
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{html.escape(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
        f"<h1>{html.escape(title)}</h1>\n{legend}\n" + "\n".join(parts) + "\n</body>\n</html>\n"
    )


def _fmt(value: Optional[float], digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _sentence_html(sentence: SentenceAudit, flagged: Sequence[ArcAudit], threshold: float) -> str:
    problem = (
        f' &middot; <span class="audit-problem">invalid tree: {html.escape(sentence.tree_problem)}</span>'
        if sentence.tree_problem
        else ""
    )
    below = (
        ""
        if sentence.nats_below_best is None
        else f" &middot; gold tree {sentence.nats_below_best:.2f} nats below the model's best"
    )
    summary = (
        f'<div class="audit-summary"><b>{html.escape(sentence.sent_id)}</b> (line {sentence.line}) &middot; '
        f"{sentence.n} words &middot; expected disagreements with the gold heads "
        f"<b>{sentence.expected_errors:.2f}</b>{below}{problem}</div>"
    )
    rows = "".join(
        f"<tr><td>{a.rank}</td><td>{a.id}</td><td>{html.escape(a.form)}</td><td>{a.head}</td>"
        f"<td>{html.escape(a.deprel)}</td><td>{a.score:.3f}</td><td>{_fmt(a.conditional_head_prob)}</td>"
        f"<td>{a.head_prob:.3f}</td><td>{_fmt(a.label_prob)}</td><td>{a.best_head} "
        f"({html.escape(a.best_head_form)}) {a.best_head_prob:.3f}</td>"
        f"<td>{html.escape(a.best_label or '–')} {_fmt(a.best_label_prob)}</td></tr>"
        for a in flagged
    )
    table = (
        '<table class="audit-arcs"><tr><th>rank</th><th>id</th><th>form</th><th>head</th><th>deprel</th>'
        "<th>score</th><th>p(head | rest)</th><th>&mu;(head)</th><th>p(label | head)</th>"
        f"<th>model's head</th><th>model's label</th></tr>{rows}</table>"
    )
    return (
        f'<section class="audit-sentence" data-sent-id="{html.escape(sentence.sent_id)}">{summary}'
        f'<div class="audit-scroll">{_tree_svg(sentence, flagged, threshold)}</div>{table}</section>'
    )


def _tree_svg(sentence: SentenceAudit, flagged: Sequence[ArcAudit], threshold: float) -> str:
    n = sentence.n
    words = sentence.forms
    widths = [max(58.0, 8.0 * len(word) + 22.0) for word in words]
    centers = [30.0 + sum(widths[:i]) + widths[i] / 2 for i in range(n)]
    flags = {a.id: a for a in flagged}
    gold = [(h, m) for m, h in enumerate(sentence.heads, start=1) if h is not None and 1 <= h <= n and h != m]
    up = dict(zip(gold, arc_levels(gold)))
    model = [(a.best_head, a.id) for a in flagged if a.best_head != a.head and a.best_head != 0]
    down = dict(zip(model, arc_levels(model)))
    top = _LEVEL * max(up.values(), default=0) + 36.0
    box_top, box_height = top + 6.0, 30.0
    below = box_top + box_height + 8.0
    height = below + 22.0 * max(down.values(), default=0) + 40.0
    width = 60.0 + sum(widths)
    out: List[str] = []
    labels: List[str] = []

    def x(m: int) -> float:
        return centers[m - 1]

    for m, h in enumerate(sentence.heads, start=1):
        arc = flags.get(m)
        color, stroke, opacity = _GOLD, 1.2, 0.7
        if arc is not None:  # flagged: for its score (red) or for the tree's problem only (orange)
            color = _FLAG if arc.score >= threshold else _PROBLEM
            stroke, opacity = 1.5 + 3.5 * arc.score, 0.95
        label = html.escape(sentence.deprels[m - 1])
        css = "audit-label" if color == _GOLD else "audit-flag"
        common = f'class="audit-gold" data-head="{h}" data-dep="{m}" stroke="{_mix(color, 1.0)}" '
        common += f'stroke-opacity="{opacity}" stroke-width="{stroke:.2f}" fill="none"'
        title = f"<title>{html.escape(words[m - 1])}: gold head {h}, {label}</title>"
        if h == 0:
            out.append(f'<path {common} d="M{x(m):.1f},20 L{x(m):.1f},{top:.1f}">{title}</path>')
            labels.append(f'<text class="{css}" x="{x(m) + 4:.1f}" y="14">{label}</text>')
        elif h is None or not 1 <= h <= n or h == m:
            labels.append(
                f'<text class="audit-flag" x="{x(m):.1f}" y="{top - 6:.1f}" text-anchor="middle">'
                f"head {html.escape(str(h))}?</text>"
            )
        else:
            rise = _LEVEL * up[(h, m)] / 0.75
            out.append(
                f'<path {common} d="M{x(h):.1f},{top:.1f} C{x(h):.1f},{top - rise:.1f} {x(m):.1f},'
                f'{top - rise:.1f} {x(m):.1f},{top - 2:.1f}">{title}</path>'
            )
            labels.append(
                f'<text class="{css}" x="{(x(h) + x(m)) / 2:.1f}" y="{top - 0.75 * rise + 4:.1f}" '
                f'text-anchor="middle" paint-order="stroke" stroke="#fff" stroke-width="4">{label}</text>'
            )
    for h, m in model:
        arc = flags[m]
        rise = 22.0 * down[(h, m)] / 0.75
        out.append(
            f'<path class="audit-model" d="M{x(h):.1f},{below:.1f} C{x(h):.1f},{below + rise:.1f} {x(m):.1f},'
            f'{below + rise:.1f} {x(m):.1f},{below:.1f}" stroke="{_mix(_MODEL, 1.0)}" stroke-width="1.5" '
            f'stroke-dasharray="5,3" fill="none"><title>model: {html.escape(words[h - 1])} &#8594; '
            f"{html.escape(words[m - 1])} {arc.best_head_prob:.3f}</title></path>"
        )
        labels.append(
            f'<text class="audit-model-label" x="{(x(h) + x(m)) / 2:.1f}" y="{below + 0.75 * rise + 4:.1f}" '
            f'text-anchor="middle" paint-order="stroke" stroke="#fff" stroke-width="4">'
            f"{arc.best_head_prob:.2f}</text>"
        )
    for arc in flagged:
        if arc.best_head == 0 and arc.head != 0:
            labels.append(
                f'<text class="audit-model-label" x="{x(arc.id):.1f}" y="{below + 14:.1f}" text-anchor="middle">'
                f"model: root {arc.best_head_prob:.2f}</text>"
            )
    problem = set(sentence.problem_words)
    for m in range(1, n + 1):
        border = (
            f'stroke="{_mix(_PROBLEM, 1.0)}" stroke-width="2.5"' if m in problem else 'stroke="#bbb" stroke-width="1"'
        )
        fill = _mix(_FLAG, 0.25) if m in flags else "#fff"
        out.append(
            f'<rect class="audit-token" data-id="{m}" x="{x(m) - widths[m - 1] / 2 + 3:.1f}" y="{box_top:.1f}" '
            f'width="{widths[m - 1] - 6:.1f}" height="{box_height:.1f}" rx="5" fill="{fill}" {border}/>'
            f'<text class="audit-word" x="{x(m):.1f}" y="{box_top + 20:.1f}" text-anchor="middle">'
            f"{html.escape(words[m - 1])}</text>"
        )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}">' + "".join(out + labels) + "</svg>"
    )
