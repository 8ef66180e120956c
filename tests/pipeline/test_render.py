"""spacy_treexp.render: standalone HTML, checked as markup and in headless Chromium."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from html import escape

import numpy
import pytest
import spacy
from helpers.scorer import make_nlp

import spacy_treexp

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def docs():
    nlp = make_nlp({}, {"scale": 3.0})
    return [nlp("The quick brown fox jumps over the lazy dog. It was fun."), nlp("A <b>&amp; test.")]


def attrs(html, cls):
    """data-* attributes of the elements of a class, as dicts of floats/ints."""
    out = []
    for tag in re.findall(rf'<(?:path|rect) class="{cls}"[^>]*>', html):
        out.append({k: float(v) for k, v in re.findall(r'data-(\w+)="([-\d.]+)"', tag)} | {"tag": tag})
    return out


def test_markup_follows_the_marginals(docs):
    html = spacy_treexp.render(docs[0], alt_threshold=0.1)
    record = docs[0]._.tree_expectations[0]
    mu, heads = record.marginals, record.heads
    n = len(heads)
    section = html.split('data-sentence="2"')[0]
    arcs = attrs(section, "treexp-arc")
    assert sorted(int(a["dep"]) for a in arcs) == list(range(1, n + 1))
    for a in arcs:
        h, d = int(a["head"]), int(a["dep"])
        assert h == heads[d - 1] and a["prob"] == pytest.approx(mu[h, d], abs=1e-4)
        width = float(re.search(r'stroke-width="([\d.]+)"', a["tag"]).group(1))
        assert width == pytest.approx(0.8 + 4.2 * mu[h, d], abs=0.01)
    alts = attrs(section, "treexp-alt")
    expected = {(h, d) for d in range(1, n + 1) for h in range(n + 1) if mu[h, d] >= 0.1 and h != heads[d - 1]}
    assert {(int(a["head"]), int(a["dep"])) for a in alts} == expected and expected
    tokens = attrs(section, "treexp-token")
    assert [t["entropy"] for t in tokens] == pytest.approx(record.head_entropy.tolist(), abs=1e-4)
    surest = min(tokens, key=lambda t: t["entropy"])["tag"]
    least = max(tokens, key=lambda t: t["entropy"])["tag"]
    green = lambda tag: int(re.search(r'fill="rgb\(\d+,(\d+),', tag).group(1))  # noqa: E731
    assert green(surest) > green(least)  # more uncertain = redder
    cells = attrs(section, "treexp-cell")
    drawn = {(h, d) for h in range(n + 1) for d in range(1, n + 1) if mu[h, d] >= 0.005 or heads[d - 1] == h}
    assert {(int(c["head"]), int(c["dep"])) for c in cells} == drawn
    for c in cells:
        assert c["prob"] == pytest.approx(mu[int(c["head"]), int(c["dep"])], abs=1e-4)
    outlined = {(int(c["head"]), int(c["dep"])) for c in cells if 'stroke="#000"' in c["tag"]}
    assert outlined == {(int(heads[d - 1]), d) for d in range(1, n + 1)}


def test_page_is_standalone_and_escapes_text(docs):
    html = spacy_treexp.render(docs)
    assert html.startswith("<!DOCTYPE html>")
    assert html.count('class="treexp-sentence"') == sum(len(list(d.sents)) for d in docs) == 3
    without_ns = html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    for external in ("src=", "href=", "url(", "@import", "http:", "https:", "<script"):
        assert external not in without_ns
    assert "b>&amp<" not in html and "</text><text" in html
    for token in docs[1]:
        assert f">{escape(token.text)}</text>" in html
    fragment = spacy_treexp.render(docs[1], page=False, heatmap=False)
    assert "<html" not in fragment and "treexp-heatmap" not in fragment


def test_long_sentence_page_stays_small():
    nlp = make_nlp({}, {"scale": 6.0})
    doc = nlp(" ".join(f"w{i}" for i in range(300)))
    html = spacy_treexp.render(doc)
    assert html.count('class="treexp-arc"') == 300
    assert len(html) < 2_000_000  # a dense 301 x 300 heat map alone would be ~18 MB


def test_bad_input():
    with pytest.raises(ValueError, match="no tree_expectations annotation"):
        spacy_treexp.render(spacy.blank("en")("Not parsed."))
    with pytest.raises(ValueError, match="alt_threshold"):
        spacy_treexp.render([], alt_threshold=0.0)


def _chromium(tmp_path, page, *args):
    command = [CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", *args, page.as_uri()]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium not installed (CI installs it)")
def test_page_in_headless_chromium(docs, tmp_path):
    from PIL import Image

    html = spacy_treexp.render(docs[0])
    page = tmp_path / "page.html"
    page.write_text(html, encoding="utf8")
    shot = tmp_path / "shot.png"
    result = _chromium(tmp_path, page, f"--screenshot={shot}", "--window-size=1000,900")
    assert shot.exists(), result.stderr[-2000:]
    pixels = numpy.asarray(Image.open(shot).convert("RGB")).astype(int)
    not_white = (pixels.sum(axis=-1) < 740).mean()
    assert 0.02 < not_white < 0.6, not_white
    r, g, b = pixels[..., 0], pixels[..., 1], pixels[..., 2]
    assert ((abs(r - 31) < 25) & (abs(g - 59) < 25) & (abs(b - 92) < 25)).sum() > 500  # confident arcs
    assert ((r > 200) & (g < 150) & (b < 130)).sum() > 500  # uncertain words shaded red
    assert ((b > 150) & (r < 120)).sum() > 200  # heat map

    # Layout in the real browser: every arc has a length, every word a box.
    probe = html.replace(
        "</body>",
        "<script>const q = s => [...document.querySelectorAll(s)];"
        "document.body.setAttribute('data-check', JSON.stringify({"
        "arcs: q('path.treexp-arc').map(p => p.getTotalLength()),"
        "words: q('rect.treexp-token').map(r => r.getBBox().width),"
        "cells: q('rect.treexp-cell').length}));</script></body>",
    )
    page.write_text(probe, encoding="utf8")
    result = _chromium(tmp_path, page, "--dump-dom")
    found = re.search(r"data-check=\"([^\"]+)\"", result.stdout)
    assert found, result.stderr[-2000:]
    check = json.loads(found.group(1).replace("&quot;", '"'))
    n = len(docs[0]._.tree_expectations[0].heads)
    assert len(check["arcs"]) == len(docs[0]) and min(check["arcs"]) > 5
    assert len(check["words"]) == len(docs[0]) and min(check["words"]) > 20
    assert check["cells"] == html.count('class="treexp-cell"') > n
