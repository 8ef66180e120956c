"""Standalone HTML view of parse uncertainty (inline SVG and CSS, no external resources).

For every sentence of Docs annotated by ``tree_expectations``:

* the predicted tree above the words, each arc's width and opacity following its
  marginal probability μ(h, d) and labelled with relation and probability;
* strong alternative heads (μ ≥ ``alt_threshold``) drawn lightly, dashed, below the words;
* words shaded by the entropy of their head distribution (white = sure, red = ≥ 1 nat);
* a heat map of the arc marginals, heads (rows, ROOT first) × dependents (columns),
  with the predicted arcs outlined.
"""

from __future__ import annotations

import html
from typing import Iterable, List, Sequence, Tuple, Union

import numpy
from spacy.tokens import Doc

from spacy_treexp.annotate import SentenceAnnotation
from spacy_treexp.pipeline import attributes

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 24px;
       color: #222; background: #fff; }
h1 { font-size: 20px; margin: 0 0 6px 0; }
.treexp-legend { font-size: 13px; color: #555; margin-bottom: 18px; }
.treexp-legend svg { vertical-align: middle; margin: 0 6px; }
.treexp-sentence { border-top: 1px solid #ddd; padding: 12px 0 18px 0; }
.treexp-summary { font-size: 14px; margin-bottom: 6px; }
.treexp-summary b { font-weight: 600; }
.treexp-scroll { overflow-x: auto; }
.treexp-word { font-size: 15px; }
.treexp-small { font-size: 11px; fill: #555; }
.treexp-label { font-size: 11px; fill: #1f3b5c; }
.treexp-altlabel { font-size: 10px; fill: #3566a8; }
.treexp-hm-label { font-size: 11px; fill: #333; }
details { margin-top: 8px; }
summary { cursor: pointer; font-size: 13px; color: #444; }
"""

_ARC = (31, 59, 92)
_ALT = (53, 102, 168)
_ENTROPY_HOT = (235, 87, 60)
_HEAT = (33, 102, 172)
_HEAT_MIN = 0.005  # heat-map cells below this marginal are left white (not drawn)


def render(
    docs: Union[Doc, Iterable[Doc]],
    *,
    page: bool = True,
    alt_threshold: float = 0.1,
    heatmap: bool = True,
    title: str = "Parse uncertainty",
) -> str:
    """Return HTML for one Doc or several (like ``displacy.render(..., page=True)``).

    Args:
        docs: Doc(s) processed by ``tree_expectations``.
        page: a complete standalone page (``True``) or a fragment to embed.
        alt_threshold: draw alternative heads whose marginal is at least this.
        heatmap: include each sentence's marginal heat map (collapsible).
        title: the page title.
    """
    if isinstance(docs, Doc):
        docs = [docs]
    if not 0.0 < alt_threshold <= 1.0:
        raise ValueError(f"alt_threshold must be in (0, 1], got {alt_threshold!r}.")
    parts: List[str] = []
    number = 0
    for doc in docs:
        records = attributes.doc_records(doc)  # refused if retokenized since
        if records is None:
            raise ValueError(
                "render: the Doc has no tree_expectations annotation; run a pipeline with "
                "'tree_expectations' (after a parser writing arc scores) first."
            )
        for record in records:
            number += 1
            parts.append(_sentence_html(doc, record, number, alt_threshold, heatmap))
    body = "\n".join(parts)
    if not page:
        return f'<div class="treexp">{_legend()}{body}</div>'
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{html.escape(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
        f"<h1>{html.escape(title)}</h1>\n{_legend()}\n{body}\n</body>\n</html>\n"
    )


def _rgb(color: Tuple[int, int, int]) -> str:
    return "rgb({},{},{})".format(*color)


def _mix(color: Tuple[int, int, int], amount: float) -> str:
    """White blended towards ``color`` by ``amount`` in [0, 1]."""
    amount = min(max(amount, 0.0), 1.0)
    red, green, blue = (round(255 + (c - 255) * amount) for c in color)
    return _rgb((red, green, blue))


def _legend() -> str:
    ramp = "".join(
        f'<rect x="{i * 12}" y="0" width="12" height="12" fill="{_mix(_ENTROPY_HOT, i / 9)}"/>' for i in range(10)
    )
    heat = "".join(f'<rect x="{i * 12}" y="0" width="12" height="12" fill="{_mix(_HEAT, i / 9)}"/>' for i in range(10))
    return (
        '<div class="treexp-legend">Arcs above the words: the predicted tree, width and '
        "opacity = marginal probability. Dashed arcs below: alternative heads. "
        f'Word shading: head entropy 0 <svg width="120" height="12">{ramp}</svg> &ge; 1 nat. '
        f'Heat map: marginal 0 <svg width="120" height="12">{heat}</svg> 1.</div>'
    )


def _sentence_html(doc: Doc, record: SentenceAnnotation, number: int, alt_threshold: float, heatmap: bool) -> str:
    if (
        record.entropy is None
        or record.expected_attachment is None
        or record.log_partition is None
        or record.marginals is None
        or record.head_entropy is None
    ):
        raise ValueError(
            f"render: sentence {number} has no marginals or entropies to draw (e.g. a record read "
            "back from CoNLL-U); run 'tree_expectations' on the Doc first."
        )
    start, end = record.start, record.end
    words = [token.text for token in doc[start:end]]
    deps = attributes.described_tree(doc[start:end])[1]  # the relations of record.heads' tree
    n = len(words)
    summary = (
        f'<div class="treexp-summary"><b>Sentence {number}</b> &middot; {n} words &middot; '
        f"tree entropy <b>{record.entropy:.3f}</b> nats "
        f"({record.entropy / max(n, 1):.3f} per word) &middot; expected attachment "
        f"<b>{100 * record.expected_attachment:.1f}%</b> &middot; log Z "
        f"{record.log_partition:.2f}</div>"
    )
    tree = _tree_svg(words, deps, record, alt_threshold)
    out = [f'<section class="treexp-sentence" data-sentence="{number}">', summary]
    out.append(f'<div class="treexp-scroll">{tree}</div>')
    if heatmap:
        out.append(
            "<details open><summary>Arc marginals (rows: heads, columns: dependents)"
            f'</summary><div class="treexp-scroll">{_heatmap_svg(words, record)}</div></details>'
        )
    out.append("</section>")
    return "\n".join(out)


_LEVEL = 26.0  # vertical distance between nested arcs (px)
_HALO = 'paint-order="stroke" stroke="#fff" stroke-width="4" stroke-linejoin="round"'


def _levels(arcs: Sequence[Tuple[int, int]]) -> List[int]:
    """Nesting level of each arc (1 + the highest level of the arcs it spans), so
    arcs and their labels do not overlap (as in displaCy)."""
    spans = [(min(h, d), max(h, d)) for h, d in arcs]
    level: dict = {}
    for k in sorted(range(len(arcs)), key=lambda k: spans[k][1] - spans[k][0]):
        lo, hi = spans[k]
        inner = [level[j] for j in level if lo <= spans[j][0] and spans[j][1] <= hi]
        level[k] = 1 + max(inner, default=0)
    return [level[k] for k in range(len(arcs))]


def _tree_svg(words: Sequence[str], deps: Sequence[str], record: SentenceAnnotation, alt_threshold: float) -> str:
    mu = numpy.asarray(record.marginals)
    heads = [int(h) for h in record.heads]
    head_entropy = numpy.asarray(record.head_entropy)
    n = len(words)
    widths = [max(58.0, 8.0 * len(word) + 22.0) for word in words]
    centers = [30.0 + sum(widths[:i]) + widths[i] / 2 for i in range(n)]

    def x_of(index: int) -> float:  # sentence-relative index, 1-based
        return centers[index - 1]

    def x_start(h: int, d: int) -> float:  # leave the head beside its centre
        return x_of(h) + (1 if d > h else -1) * min(10.0, widths[h - 1] / 4)

    def name(h: int) -> str:
        return "ROOT" if h == 0 else html.escape(words[h - 1])

    predicted = [(heads[d - 1], d) for d in range(1, n + 1)]
    alternatives = [
        (int(h), d) for d in range(1, n + 1) for h in numpy.nonzero(mu[:, d] >= alt_threshold)[0] if h != heads[d - 1]
    ]
    up = dict(zip([a for a in predicted if a[0]], _levels([a for a in predicted if a[0]])))
    down = dict(zip([a for a in alternatives if a[0]], _levels([a for a in alternatives if a[0]])))
    top = _LEVEL * max(up.values(), default=0) + 36.0
    box_top, box_height = top + 6.0, 34.0
    info_y = box_top + box_height + 13.0
    alt_y = info_y + 28.0
    total_height = alt_y + 22.0 * max(down.values(), default=0) + (36.0 if alternatives else 6.0)
    total_width = 60.0 + sum(widths)

    arcs: List[str] = []
    labels: List[str] = []
    for h, d in predicted:
        p = float(mu[h, d])
        style = (
            f'stroke="{_rgb(_ARC)}" stroke-opacity="{0.2 + 0.8 * p:.3f}" stroke-width="{0.8 + 4.2 * p:.2f}" fill="none"'
        )
        common = f'class="treexp-arc" data-head="{h}" data-dep="{d}" data-prob="{p:.4f}"'
        title = f"<title>{name(h)} &#8594; {name(d)}: {p:.3f}</title>"
        label = f"{html.escape(deps[d - 1] or ('root' if h == 0 else 'dep'))} {p:.2f}"
        xd = x_of(d)
        if h == 0:
            arcs.append(f'<path {common} d="M{xd:.1f},20 L{xd:.1f},{top:.1f}" {style}>{title}</path>')
            labels.append(f'<text class="treexp-label" x="{xd + 5:.1f}" y="14" {_HALO}>{label}</text>')
            total_width = max(total_width, xd + 7.0 * len(label) + 70.0)
        else:
            xh, rise = x_start(h, d), _LEVEL * up[(h, d)] / 0.75
            arcs.append(
                f'<path {common} d="M{xh:.1f},{top:.1f} C{xh:.1f},{top - rise:.1f} '
                f'{xd:.1f},{top - rise:.1f} {xd:.1f},{top - 2:.1f}" {style}>{title}</path>'
            )
            cx, cy, half = (xh + xd) / 2, top - 0.75 * rise + 4, 3.1 * len(html.unescape(label)) + 3
            labels.append(  # a white plate keeps the arc from running through the label
                f'<rect x="{cx - half:.1f}" y="{cy - 10:.1f}" width="{2 * half:.1f}" height="13" rx="3" '
                f'fill="#fff" fill-opacity="0.9"/><text class="treexp-label" x="{cx:.1f}" y="{cy:.1f}" '
                f'text-anchor="middle">{label}</text>'
            )
        arcs.append(
            f'<path d="M{xd - 4.5:.1f},{top - 8:.1f} L{xd + 4.5:.1f},{top - 8:.1f} L{xd:.1f},{top:.1f} Z" '
            f'fill="{_rgb(_ARC)}" fill-opacity="{0.2 + 0.8 * p:.3f}"/>'
        )
    for h, d in alternatives:
        p = float(mu[h, d])
        style = (
            f'stroke="{_rgb(_ALT)}" stroke-opacity="{0.25 + 0.6 * p:.3f}" '
            f'stroke-width="{0.8 + 3.0 * p:.2f}" stroke-dasharray="5,3" fill="none"'
        )
        common = f'class="treexp-alt" data-head="{h}" data-dep="{d}" data-prob="{p:.4f}"'
        title = f"<title>alternative: {name(h)} &#8594; {name(d)}: {p:.3f}</title>"
        xd = x_of(d)
        if h == 0:
            arcs.append(f'<path {common} d="M{xd:.1f},{alt_y:.1f} L{xd:.1f},{alt_y + 20:.1f}" {style}>{title}</path>')
            labels.append(
                f'<text class="treexp-altlabel" x="{xd:.1f}" y="{alt_y + 31:.1f}" text-anchor="middle" '
                f"{_HALO}>ROOT {p:.2f}</text>"
            )
        else:
            xh, rise = x_start(h, d), 22.0 * down[(h, d)] / 0.75
            arcs.append(
                f'<path {common} d="M{xh:.1f},{alt_y:.1f} C{xh:.1f},{alt_y + rise:.1f} '
                f'{xd:.1f},{alt_y + rise:.1f} {xd:.1f},{alt_y:.1f}" {style}>{title}</path>'
            )
            labels.append(
                f'<text class="treexp-altlabel" x="{(xh + xd) / 2:.1f}" y="{alt_y + 0.75 * rise + 4:.1f}" '
                f'text-anchor="middle" {_HALO}>{p:.2f}</text>'
            )
    tokens: List[str] = []
    for d in range(1, n + 1):
        x0 = x_of(d) - widths[d - 1] / 2 + 3
        e = float(head_entropy[d - 1])
        p = float(mu[heads[d - 1], d])
        tokens.append(
            f'<rect class="treexp-token" data-index="{d}" data-entropy="{e:.4f}" x="{x0:.1f}" '
            f'y="{box_top:.1f}" width="{widths[d - 1] - 6:.1f}" height="{box_height:.1f}" rx="5" '
            f'fill="{_mix(_ENTROPY_HOT, e)}" stroke="#bbb"><title>{name(d)}: head entropy {e:.3f} '
            f"nats, head probability {p:.3f}</title></rect>"
            f'<text class="treexp-word" x="{x_of(d):.1f}" y="{box_top + 22:.1f}" '
            f'text-anchor="middle">{name(d)}</text>'
            f'<text class="treexp-small" x="{x_of(d):.1f}" y="{info_y:.1f}" text-anchor="middle">'
            f"p {p:.2f}</text>"
            f'<text class="treexp-small" x="{x_of(d):.1f}" y="{info_y + 12:.1f}" text-anchor="middle">'
            f"H {e:.2f}</text>"
        )
    return (
        f'<svg class="treexp-arcs" xmlns="http://www.w3.org/2000/svg" width="{total_width:.0f}" '
        f'height="{total_height:.0f}" viewBox="0 0 {total_width:.0f} {total_height:.0f}">'
        + "".join(arcs + tokens + labels)
        + "</svg>"
    )


def _heatmap_svg(words: Sequence[str], record: SentenceAnnotation) -> str:
    mu = numpy.asarray(record.marginals)
    heads = numpy.asarray(record.heads)
    n = len(words)
    cell = 20.0 if n <= 30 else max(6.0, 600.0 / n)
    show_text = cell >= 12.0
    names = ["ROOT"] + [w if len(w) <= 14 else w[:13] + "…" for w in words]
    left = 12.0 + (7.0 * max(len(name) for name in names) if show_text else 30.0)
    top = 12.0 + (6.0 * max(len(name) for name in names[1:]) if show_text else 20.0)
    width, height = left + cell * n + 10, top + cell * (n + 1) + 10
    out = [
        f'<svg class="treexp-heatmap" xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" '
        f'height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}">'
        f'<rect x="{left:.1f}" y="{top:.1f}" width="{cell * n:.1f}" height="{cell * (n + 1):.1f}" '
        'fill="#fff" stroke="#ccc"/>'
    ]
    if cell >= 8.0:  # grid lines, one per row and column
        out.extend(
            f'<path d="M{left:.1f},{top + cell * h:.1f} h{cell * n:.1f}" stroke="#eee"/>' for h in range(1, n + 1)
        )
        out.extend(
            f'<path d="M{left + cell * d:.1f},{top:.1f} v{cell * (n + 1):.1f}" stroke="#eee"/>' for d in range(1, n)
        )
    for h in range(n + 1):
        if show_text:
            out.append(
                f'<text class="treexp-hm-label" x="{left - 4:.1f}" y="{top + cell * (h + 0.7):.1f}" '
                f'text-anchor="end">{html.escape(names[h])}</text>'
            )
        for d in range(1, n + 1):
            p = float(mu[h, d])
            predicted = heads[d - 1] == h
            if p < _HEAT_MIN and not predicted:  # white anyway: keeps long sentences small
                continue
            x, y = left + cell * (d - 1), top + cell * h
            outline = ' stroke="#000" stroke-width="1.5"' if predicted else ' stroke="#eee" stroke-width="0.5"'
            out.append(
                f'<rect class="treexp-cell" data-head="{h}" data-dep="{d}" data-prob="{p:.4f}" '
                f'x="{x:.1f}" y="{y:.1f}" width="{cell:.1f}" height="{cell:.1f}" '
                f'fill="{_mix(_HEAT, p)}"{outline}><title>{html.escape(names[h])} &#8594; '
                f"{html.escape(names[d])}: {p:.3f}</title></rect>"
            )
    if show_text:
        for d in range(1, n + 1):
            x = left + cell * (d - 0.35)
            out.append(
                f'<text class="treexp-hm-label" x="{x:.1f}" y="{top - 4:.1f}" '
                f'transform="rotate(-60 {x:.1f} {top - 4:.1f})">{html.escape(names[d])}</text>'
            )
    out.append("</svg>")
    return "".join(out)
