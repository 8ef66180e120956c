"""The writers of ``annotate``: CoNLL-U from text, with whitespace tokens."""

from __future__ import annotations

import io
import json

import numpy
import spacy

from spacy_treexp.cli.outputs import ConlluWriter, StdoutSink, described_tree, doc_to_json, word_heads
from spacy_treexp.cli.parse import write_table


def test_word_heads_drop_whitespace_tokens():
    # tokens: 1 a, 2 "\n", 3 b, 4 " ", 5 c; b hangs from the "\n" token, which hangs from a
    assert word_heads([0, 1, 2, 3, 3], [False, True, False, True, False]) == [0, 1, 2]
    assert word_heads([-1, -1, -1], [False, True, False]) == [-1, -1]  # padding rows stay -1
    assert word_heads([0, 1], [True, False]) == [0]  # under a whitespace root: the root


def test_conllu_output_has_no_whitespace_tokens(paragraph_model, tmp_path, run_cli):
    """Line breaks, tabs and double spaces become SpacesAfter; the file stays valid CoNLL-U."""
    source = tmp_path / "in.jsonl"
    source.write_text(json.dumps({"text": "The cat\tsat.\n\nA  dog|barked"}) + "\n")
    target = tmp_path / "out.conllu"
    args = ["annotate", str(source), "-o", str(target), "--model", paragraph_model, "--samples", "3"]
    assert run_cli(*args)[0] == 0
    blocks = [b.splitlines() for b in target.read_text().strip().split("\n\n")]
    assert len(blocks) == 2
    assert "# text = The cat\tsat." in blocks[0] and "# text = A  dog|barked" in blocks[1]
    for block in blocks:
        rows = [line.split("\t") for line in block if not line.startswith("#")]
        assert all(len(row) == 10 and row[1].strip() == row[1] != "" for row in rows)
        n = len(rows)
        assert [int(row[0]) for row in rows] == list(range(1, n + 1))
        assert all(0 <= int(row[6]) <= n for row in rows)
        for line in block:
            if line.startswith("# sample_"):
                assert len(line.split("heads ")[1].split()) == n
    first = [row.split("\t") for row in blocks[0] if not row.startswith("#")]
    second = [row.split("\t") for row in blocks[1] if not row.startswith("#")]
    assert [row[1] for row in first] == ["The", "cat", "sat", "."]
    assert "SpacesAfter=\\t" in first[1][9] and "SpacesAfter=\\n\\n" in first[3][9]
    assert "SpaceAfter=No" in first[2][9]
    assert [row[1] for row in second] == ["A", "dog|barked"]
    assert "SpacesAfter=\\s\\s" in second[0][9]


@spacy.registry.misc("test_outputs.no_parse_scores.v1")
def make_no_parse_scores():
    """Arc scores whose MAP tree is 2 <- 3 -> 1 (0-based tokens: 1 <- 2 -> 0), on a Doc no parser set a tree on."""

    def get_scores(doc):
        arc = numpy.zeros((4, 4), dtype="float32")
        arc[0, 2], arc[2, 1], arc[2, 3] = 4.0, 3.0, 3.0
        return [{"start": 0, "end": 3, "arc": arc, "rel": None, "labels": None}]

    return get_scores


def test_writers_print_the_tree_the_probabilities_describe():
    """A score source on a Doc without a parse is annotated with the MAP tree; parse, JSONL and
    CoNLL-U wrote the Doc's (absent) tree instead, every word under ROOT, beside head
    probabilities of the MAP tree's heads."""
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("tree_expectations", config={"scores": {"@misc": "test_outputs.no_parse_scores.v1"}})
    doc = nlp("a b c")
    assert not doc.has_annotation("DEP")
    heads, deps = described_tree(doc[:])
    assert heads == [2, 0, 2] and deps == ["dep", "ROOT", "dep"]
    marginals = doc._.arc_marginals[0]
    assert [round(t._.head_prob, 6) for t in doc] == [round(float(marginals[h, m]), 6) for m, h in enumerate(heads, 1)]
    tokens = doc_to_json(doc)["sentences"][0]["tokens"]
    assert [t["head"] for t in tokens] == [1, 1, 1] and [t["dep"] for t in tokens] == deps
    (sentence,) = ConlluWriter(StdoutSink()).sentences(doc, {"line": 1})
    assert list(sentence.heads[1:]) == heads and list(sentence.deprels) == ["dep", "root", "dep"]
    table = io.StringIO()
    write_table(doc, table)
    rows = [line.split() for line in table.getvalue().splitlines() if line.strip()[:1].isdigit()]
    assert [(row[1], row[2], row[3]) for row in rows] == [("a", "2", "b"), ("b", "0", "ROOT"), ("c", "2", "b")]


def test_writing_a_long_doc_checks_each_word_a_bounded_number_of_times(monkeypatch):
    """The writers look a sentence's record up by its own words: described_tree read the whole
    Doc's records (every token's offsets) for each sentence, quadratic in a many-sentence Doc
    (2,000 sentences: 9 s for doc_to_json, 1.4 s before)."""
    from helpers.scorer import make_nlp

    from spacy_treexp.pipeline import attributes

    doc = make_nlp()(" ".join(["The cat sat on the mat."] * 20))
    seen = []
    whole_doc = attributes.token_offsets
    monkeypatch.setattr(attributes, "token_offsets", lambda d: seen.append(len(d)) or whole_doc(d))
    doc_to_json(doc)
    ConlluWriter(StdoutSink()).sentences(doc, {"line": 1})
    assert sum(seen) <= 2 * len(doc)


def test_a_relation_the_parser_does_not_score_has_no_depprob_in_misc():
    """A word whose relation the parser has no label for has no dep_prob: CoNLL-U MISC leaves
    DepProb out, as the JSONL writes null; the other words' DepProb are their dep_prob."""
    import helpers.scorer  # noqa: F401  (LABELS)
    from helpers.scorer import LABELS, random_scores
    from spacy.tokens import Doc

    from spacy_treexp.cli.outputs import _uncertainty

    nlp = spacy.blank("en")
    nlp.add_pipe("tree_expectations")
    arc, rel = random_scores(3, 0)
    doc = Doc(nlp.vocab, words=["a", "b", "c"], heads=[1, 1, 1], deps=["xcomp", "ROOT", "obj"])
    doc._.parser_scores = [{"start": 0, "end": 3, "arc": arc, "rel": rel, "labels": LABELS}]
    doc = nlp.get_pipe("tree_expectations")(doc)
    items = [_uncertainty(token) for token in doc]
    assert doc[0]._.dep_prob is None and items[0]["DepProb"] is None
    assert all(float(item["DepProb"]) == round(token._.dep_prob, 4) for item, token in zip(items[1:], doc[1:]))
    assert doc_to_json(doc)["sentences"][0]["tokens"][0]["dep_prob"] is None
