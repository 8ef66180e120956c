"""Property tests: any well-formed CoNLL-U text reads and writes back byte for byte, and a
malformed line is reported with its line number, never accepted silently."""

from __future__ import annotations

import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spacy_treexp.io import ConlluError, read_conllu, write_conllu

# Field text: any printable text without tabs or line breaks, never empty.
FIELD = st.text(
    alphabet=st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp"), blacklist_characters="\t\n\r"),
    min_size=1,
    max_size=8,
).filter(lambda s: s.strip() == s and s != "")
MISC = st.lists(st.sampled_from(["SpaceAfter=No", "SpacesAfter=\\n", "Cxn=a=b", "Gloss=x|y", "_"]), max_size=2)


@st.composite
def sentences(draw) -> str:
    n = draw(st.integers(1, 8))
    comments = [f"# sent_id = s{draw(st.integers(0, 999))}"]
    if draw(st.booleans()):
        comments.append(f"# text = {draw(FIELD)}")
    if draw(st.booleans()):
        comments.insert(0, "# newpar")
    lines = list(comments)
    ranges = {}
    m = 1
    while m < n and draw(st.booleans()):
        ranges[m] = m + 1
        m += 2
    for word in range(1, n + 1):
        if word in ranges:
            lines.append("\t".join([f"{word}-{ranges[word]}", draw(FIELD)] + ["_"] * 8))
        misc = "|".join(x for x in draw(MISC) if x != "_") or "_"
        head = str(draw(st.integers(0, n))) if draw(st.integers(0, 9)) else "_"
        lines.append("\t".join([str(word), draw(FIELD), draw(FIELD), "NOUN", "_", "_", head, "dep", "_", misc]))
        if draw(st.integers(0, 6)) == 0:
            lines.append("\t".join([f"{word}.1", draw(FIELD), "_", "_", "_", "_", "_", "_", f"{word}:dep", "_"]))
    return "\n".join(lines) + "\n"


@settings(derandomize=True, deadline=None, max_examples=300)
@given(st.lists(sentences(), min_size=1, max_size=4))
def test_read_then_write_is_the_identity(blocks):
    text = "\n".join(blocks) + "\n"
    parsed = list(read_conllu(io.BytesIO(text.encode("utf8"))))
    assert len(parsed) == len(blocks)
    out = io.StringIO()
    write_conllu(parsed, out)
    assert out.getvalue() == text
    for sentence, block in zip(parsed, blocks):
        words = [line for line in block.splitlines() if line[:1].isdigit() and "\t" in line]
        assert sentence.n == sum(1 for line in words if line.split("\t")[0].isdigit())


@settings(derandomize=True, deadline=None, max_examples=200)
@given(sentences(), st.integers(0, 3), st.data())
def test_a_broken_line_is_reported_with_its_number(block, kind, data):
    lines = block.rstrip("\n").split("\n")
    tokens = [i for i, line in enumerate(lines) if not line.startswith("#")]
    target = data.draw(st.sampled_from(tokens))
    cols = lines[target].split("\t")
    if kind == 0:
        lines[target] = "\t".join(cols[:9])  # 9 columns
    elif kind == 1:
        lines[target] = "\t".join(["x" + cols[0]] + cols[1:])  # a bad id
    elif kind == 2:
        lines[target] = "\t".join(cols + ["extra"])  # 11 columns
    else:
        lines.insert(target + 1, "# a comment among the words")
        target += 1
    text = "\n".join(lines) + "\n"
    with pytest.raises(ConlluError) as error:
        list(read_conllu(io.BytesIO(text.encode("utf8"))))
    assert error.value.line == target + 1
    reported = []
    assert list(read_conllu(io.BytesIO(text.encode("utf8")), on_error=reported.append)) == []
    assert len(reported) == 1
