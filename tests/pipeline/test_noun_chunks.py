"""The UD noun-chunk iterator: hand-built trees with the chunks a reader expects, a
brute-force reimplementation of the definition on random trees, and its installation in a
pipeline (to_disk / spacy.load, pickle, the shipped model)."""

import pickle
import random

import pytest
import spacy
from spacy.tokens import Doc

from spacy_treexp.pipeline.noun_chunks import (
    CHUNK_RELATIONS,
    EXCLUDED_RELATIONS,
    LEFT_MODIFIERS,
    RIGHT_MODIFIERS,
    chunk_spans,
    install_ud_noun_chunks,
    ud_noun_chunks,
)


@pytest.fixture(scope="module")
def nlp():
    return install_ud_noun_chunks(spacy.blank("en"))


def make_doc(nlp, rows, **extra):
    """rows: (word, 1-based head or 0 for root, relation, UPOS) as in CoNLL-U."""
    words = [r[0] for r in rows]
    heads = [r[1] - 1 if r[1] else i for i, r in enumerate(rows)]
    deps = [r[2] for r in rows]
    pos = [r[3] for r in rows]
    return Doc(nlp.vocab, words=words, heads=heads, deps=deps, pos=pos, **extra)


def chunks(doc):
    return [chunk.text for chunk in doc.noun_chunks]


def test_prepositions_stay_out_of_the_chunk(nlp):
    rows = [
        ("I", 2, "nsubj", "PRON"),
        ("saw", 0, "root", "VERB"),
        ("the", 4, "det", "DET"),
        ("man", 2, "obj", "NOUN"),
        ("with", 7, "case", "ADP"),
        ("the", 7, "det", "DET"),
        ("telescope", 2, "obl", "NOUN"),
        (".", 2, "punct", "PUNCT"),
    ]
    doc = make_doc(nlp, rows)
    assert chunks(doc) == ["I", "the man", "the telescope"]
    assert {chunk.label_ for chunk in doc.noun_chunks} == {"NP"}


def test_a_clearnlp_tree_is_chunked_by_the_languages_own_iterator(nlp):
    """A stock English parser run after ours leaves ClearNLP relations on the Doc: they are
    chunked as spaCy's English iterator chunks them (the UD rules found only "I")."""
    rows = [
        ("I", 2, "nsubj", "PRON"),
        ("saw", 0, "ROOT", "VERB"),
        ("the", 4, "det", "DET"),
        ("man", 2, "dobj", "NOUN"),
        ("with", 2, "prep", "ADP"),
        ("the", 7, "det", "DET"),
        ("telescope", 5, "pobj", "NOUN"),
        (".", 2, "punct", "PUNCT"),
    ]
    english = make_doc(spacy.blank("en"), rows)
    assert chunks(make_doc(nlp, rows)) == chunks(english) == ["I", "the man", "the telescope"]
    ud_rows = [(w, h, {"dobj": "obj", "prep": "case", "pobj": "obl"}.get(r, r), p) for w, h, r, p in rows]
    ud_rows[4], ud_rows[6] = ("with", 7, "case", "ADP"), ("telescope", 2, "obl", "NOUN")
    assert chunks(make_doc(nlp, ud_rows)) == ["I", "the man", "the telescope"]  # UD trees keep the UD rules


def test_possessor_inside_and_nmod_apart(nlp):
    # The old man's dog of the neighbours barked
    rows = [
        ("The", 3, "det", "DET"),
        ("old", 3, "amod", "ADJ"),
        ("man", 5, "nmod:poss", "NOUN"),
        ("'s", 3, "case", "PART"),
        ("dog", 10, "nsubj", "NOUN"),
        ("of", 8, "case", "ADP"),
        ("the", 8, "det", "DET"),
        ("neighbours", 5, "nmod", "NOUN"),
        ("next", 8, "amod", "ADJ"),
        ("barked", 0, "root", "VERB"),
    ]
    assert chunks(make_doc(nlp, rows)) == ["The old man 's dog", "the neighbours"]


def test_coordination_copula_and_names(nlp):
    # Barack Obama and his wife are lawyers and only the best writers
    rows = [
        ("Barack", 7, "nsubj", "PROPN"),
        ("Obama", 1, "flat", "PROPN"),
        ("and", 5, "cc", "CCONJ"),
        ("his", 5, "nmod:poss", "PRON"),
        ("wife", 1, "conj", "NOUN"),
        ("are", 7, "cop", "AUX"),
        ("lawyers", 0, "root", "NOUN"),
        ("and", 12, "cc", "CCONJ"),
        ("only", 12, "advmod", "ADV"),
        ("the", 12, "det", "DET"),
        ("best", 12, "amod", "ADJ"),
        ("writers", 7, "conj", "NOUN"),
    ]
    assert chunks(make_doc(nlp, rows)) == ["Barack Obama", "his wife", "lawyers", "the best writers"]


def test_a_title_before_a_name_is_inside_its_chunk(nlp):
    # Dr. Smith met President Bush: EWT makes the title an nmod:desc of the name
    rows = [
        ("Dr.", 2, "nmod:desc", "PROPN"),
        ("Smith", 3, "nsubj", "PROPN"),
        ("met", 0, "root", "VERB"),
        ("President", 5, "nmod:desc", "PROPN"),
        ("Bush", 3, "obj", "PROPN"),
    ]
    assert chunks(make_doc(nlp, rows)) == ["Dr. Smith", "President Bush"]


def test_conjunct_of_a_non_chunk_is_not_a_chunk(nlp):
    # New York and Boston offices closed: "York"/"Boston" are compounds, not chunk heads
    rows = [
        ("New", 2, "compound", "PROPN"),
        ("York", 5, "compound", "PROPN"),
        ("and", 4, "cc", "CCONJ"),
        ("Boston", 2, "conj", "PROPN"),
        ("offices", 6, "nsubj", "NOUN"),
        ("closed", 0, "root", "VERB"),
    ]
    assert chunks(make_doc(nlp, rows)) == ["New York and Boston offices"]


def test_chunks_never_overlap(nlp):
    # a Paris based company: "Paris" (obl of "based") is a chunk, so "company"'s would overlap it
    rows = [
        ("a", 4, "det", "DET"),
        ("Paris", 3, "obl", "PROPN"),
        ("based", 4, "amod", "VERB"),
        ("company", 0, "root", "NOUN"),
    ]
    assert chunks(make_doc(nlp, rows)) == ["Paris"]


def test_ptb_tags_decide_without_upos(nlp):
    rows = [("Dogs", 2, "nsubj", ""), ("bark", 0, "root", ""), ("it", 2, "obj", "")]
    doc = make_doc(nlp, rows, tags=["NNS", "VBP", "PRP"])
    assert chunks(doc) == ["Dogs", "it"]
    doc = make_doc(nlp, rows, tags=["NNS", "VBP", "DT"])
    assert chunks(doc) == ["Dogs"]


def test_spans_and_sentences(nlp):
    rows = [
        ("Cats", 2, "nsubj", "NOUN"),
        ("sleep", 0, "root", "VERB"),
        ("Dogs", 4, "nsubj", "NOUN"),
        ("bark", 0, "root", "VERB"),
    ]
    doc = make_doc(nlp, rows)
    assert chunks(doc) == ["Cats", "Dogs"]
    second = list(doc.sents)[1]
    assert [c.text for c in second.noun_chunks] == ["Dogs"]
    assert [(s, e) for s, e, _ in ud_noun_chunks(second)] == [(2, 3)]


def test_needs_a_part_of_speech(nlp):
    """A UD tree without UPOS or PTB tags (spacy.blank + add_uncertainty) gave no chunk at all, silently."""
    doc = make_doc(nlp, [("Dogs", 2, "nsubj", ""), ("bark", 0, "root", "")])
    with pytest.raises(ValueError, match=r"need each word's part of speech \(token.pos_, or a PTB token.tag_\)"):
        list(doc.noun_chunks)


def test_needs_a_parse(nlp):
    doc = Doc(nlp.vocab, words=["a", "dog"], pos=["DET", "NOUN"])
    with pytest.raises(ValueError, match="E029"):
        list(doc.noun_chunks)


def test_bad_lengths_are_refused():
    with pytest.raises(ValueError, match="one entry per word"):
        chunk_spans([0, 0], ["root"], ["NOUN", "NOUN"])


# --- brute force -------------------------------------------------------------------------

RELATIONS = sorted(CHUNK_RELATIONS | LEFT_MODIFIERS | RIGHT_MODIFIERS | {"case", "cc", "conj", "punct"})
UPOS = ["NOUN", "PROPN", "PRON", "DET", "ADJ", "VERB", "ADP"]


def brute_force(heads, relations, upos):
    """The definition read literally: subtrees as sets of descendants (ancestor walks)."""
    n = len(heads)

    def ancestors(i):
        out = []
        while heads[i] != i:
            i = heads[i]
            out.append(i)
        return out

    subtree = [{j for j in range(n) if j == i or i in ancestors(j)} for i in range(n)]
    base = [r.split(":")[0].lower() for r in relations]

    def head_relation(i):
        return base[i] in CHUNK_RELATIONS and relations[i].lower() not in EXCLUDED_RELATIONS

    result, prev_end = [], -1
    for i in range(n):
        if upos[i] not in ("NOUN", "PROPN", "PRON"):
            continue
        ok = head_relation(i)
        if not ok and base[i] == "conj":
            first = [a for a in [i] + ancestors(i) if base[a] != "conj" or heads[a] == a]
            ok = head_relation(first[0])
        if not ok:
            continue
        kids = [c for c in range(n) if heads[c] == i and c != i]
        left = [c for c in kids if c < i and (relations[c].lower() in LEFT_MODIFIERS or base[c] in LEFT_MODIFIERS)]
        start = min([i] + [min(subtree[c]) for c in left])
        end = i
        for c in sorted(c for c in kids if c > i):
            if base[c] in RIGHT_MODIFIERS and min(subtree[c]) == end + 1:
                end = max(subtree[c])
            else:
                break
        if start > prev_end:
            result.append((start, end + 1))
            prev_end = end
    return result


def random_tree(rng, n):
    order = list(range(n))
    rng.shuffle(order)
    heads = [0] * n
    heads[order[0]] = order[0]
    for k in range(1, n):
        heads[order[k]] = order[rng.randrange(k)]
    return heads


def test_random_trees_match_brute_force(nlp):
    rng = random.Random(7)
    for _ in range(400):
        n = rng.randint(1, 8)
        heads = random_tree(rng, n)
        relations = ["ROOT" if heads[i] == i else rng.choice(RELATIONS) for i in range(n)]
        upos = [rng.choice(UPOS) for _ in range(n)]
        expected = brute_force(heads, relations, upos)
        assert chunk_spans(heads, relations, upos) == expected
        doc = Doc(nlp.vocab, words=[f"w{i}" for i in range(n)], heads=heads, deps=relations, pos=upos)
        assert [(c.start, c.end) for c in doc.noun_chunks] == expected


# --- installation ------------------------------------------------------------------------


def test_survives_to_disk_and_pickle(tmp_path):
    nlp = spacy.blank("en", config={"nlp": {"after_creation": {"@callbacks": "spacy_treexp.ud_noun_chunks.v1"}}})
    assert nlp.vocab.get_noun_chunks is ud_noun_chunks
    nlp.to_disk(tmp_path / "p")
    loaded = spacy.load(tmp_path / "p")
    assert loaded.vocab.get_noun_chunks is ud_noun_chunks
    assert pickle.loads(pickle.dumps(loaded.vocab)).get_noun_chunks is ud_noun_chunks
    doc = make_doc(loaded, [("Dogs", 2, "nsubj", "NOUN"), ("bark", 0, "root", "VERB")])
    assert chunks(pickle.loads(pickle.dumps(doc))) == ["Dogs"]


def test_the_shipped_pipeline_uses_it():
    import spacy_treexp

    nlp = spacy_treexp.load()
    assert nlp.vocab.get_noun_chunks is ud_noun_chunks
    doc = nlp("The old man saw the dog with the telescope.")
    assert [c.text for c in doc.noun_chunks] == ["The old man", "the dog", "the telescope"]


def test_the_callback_has_an_entry_point():
    from importlib.metadata import entry_points

    assert "spacy_treexp.ud_noun_chunks.v1" in {point.name for point in entry_points(group="spacy_callbacks")}
