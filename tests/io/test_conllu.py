"""spacy_treexp.io.conllu: lossless round trip, derived views, format errors, tree problems."""

from __future__ import annotations

import io
import pickle
from pathlib import Path

import numpy
import pytest
from helpers.paths import SHARED_DATA

from spacy_treexp.io import ConlluError, ConlluSentence, format_misc, parse_misc, read_conllu, write_conllu

EWT = SHARED_DATA / "ud_en_ewt"


def conllu(text: str) -> str:
    """Test data written with spaces between columns; token lines get tabs."""
    lines = [line if line.startswith("#") or not line else "\t".join(line.split()) for line in text.split("\n")]
    return "\n".join(lines)


# Three sentences: multiword tokens (one with SpaceAfter=No on its range line), an empty
# node with enhanced DEPS, SpacesAfter, a MISC value containing "=", comments of all kinds.
SAMPLE = conllu(
    """# newdoc id = doc1
# newpar
# sent_id = s1
# text = I don't know.
1 I I PRON PRP Case=Nom|Number=Sing 4 nsubj 4:nsubj _
2-3 don't _ _ _ _ _ _ _ _
2 do do AUX VBP Mood=Ind 4 aux 4:aux _
3 n't not PART RB _ 4 advmod 4:advmod _
4 know know VERB VB VerbForm=Inf 0 root 0:root SpaceAfter=No
5 . . PUNCT . _ 4 punct 4:punct _

# newpar id = doc1-p2
# sent_id = s2
# text = Mary likes tea and John coffee.
# note = a = b
1 Mary Mary PROPN NNP Number=Sing 2 nsubj 2:nsubj _
2 likes like VERB VBZ Number=Sing 0 root 0:root _
3 tea tea NOUN NN Number=Sing 2 obj 2:obj _
4 and and CCONJ CC _ 6 cc 5.1:cc _
5 John John PROPN NNP Number=Sing 3 conj 5.1:nsubj _
5.1 likes like VERB VBZ Number=Sing _ _ 2:conj:and CopyOf=2
6 coffee coffee NOUN NN Number=Sing 5 orphan 5.1:obj SpaceAfter=No|Cxn=free=rc-obj
7 . . PUNCT . _ 2 punct 2:punct SpacesAfter=\\n\\n

# sent_id = s3
# text = Vámonos al mar, sí.
1-2 Vámonos _ _ _ _ _ _ _ _
1 Vamos ir VERB _ _ 0 root 0:root _
2 nos nosotros PRON _ _ 1 obj 1:obj _
3-4 al _ _ _ _ _ _ _ SpaceAfter=No
3 a a ADP _ _ 5 case 5:case _
4 el el DET _ _ 5 det 5:det _
5 mar mar NOUN _ _ 1 obl 1:obl SpaceAfter=No
6 , , PUNCT _ _ 7 punct 7:punct _
7 sí sí ADV _ _ 1 advmod 1:advmod SpaceAfter=No
8 . . PUNCT _ _ 1 punct 1:punct _

"""
)

# A small valid sentence; its heads are edited by the tree tests.
TREE = conllu(
    """# sent_id = t
1 the the DET DT _ 2 det _ _
2 dog dog NOUN NN _ 3 nsubj _ _
3 barked bark VERB VBD _ 0 root _ _
4 . . PUNCT . _ 3 punct _ _
"""
)


def read_text(text: str, **kwargs) -> list[ConlluSentence]:
    return list(read_conllu(io.StringIO(text), **kwargs))


def with_heads(heads: list[str]) -> ConlluSentence:
    (sentence,) = read_text(TREE)
    for m, head in enumerate(heads, start=1):
        sentence = sentence.with_word(m, head=head)
    return sentence


# --- round trip and views -------------------------------------------------------------


def test_round_trip_is_byte_identical(tmp_path):
    source = tmp_path / "in.conllu"
    source.write_bytes(SAMPLE.encode("utf-8"))
    sentences = list(read_conllu(source))
    assert [s.sent_id for s in sentences] == ["s1", "s2", "s3"]
    target = tmp_path / "out.conllu"
    assert write_conllu(sentences, target) == 3
    assert target.read_bytes() == source.read_bytes()
    out = io.StringIO()
    write_conllu(read_conllu(str(source)), out)
    assert out.getvalue() == SAMPLE
    with source.open(encoding="utf-8", newline="") as handle:
        assert "".join(s.to_text() + "\n" for s in read_conllu(handle)) == SAMPLE


def test_rows_and_comments_are_verbatim():
    s1, s2, s3 = read_text(SAMPLE)
    assert s1.comments == ["# newdoc id = doc1", "# newpar", "# sent_id = s1", "# text = I don't know."]
    assert [row[0] for row in s1.rows] == ["1", "2-3", "2", "3", "4", "5"]
    assert s2.empty_nodes == [
        ("5.1", "likes", "like", "VERB", "VBZ", "Number=Sing", "_", "_", "2:conj:and", "CopyOf=2")
    ]
    assert [row[8] for row in s2.words] == [
        "2:nsubj",
        "0:root",
        "2:obj",
        "5.1:cc",
        "5.1:nsubj",
        "5.1:obj",
        "2:punct",
    ]
    assert s2.misc[5:] == ["SpaceAfter=No|Cxn=free=rc-obj", "SpacesAfter=\\n\\n"]
    assert s1.ranges == {2: ("2-3", "don't", "_", "_", "_", "_", "_", "_", "_", "_")}
    assert sorted(s3.ranges) == [1, 3]
    assert s1.to_text() == SAMPLE.split("\n\n")[0] + "\n"
    assert [s.line for s in (s1, s2, s3)] == [1, 12, 25]


def test_derived_columns():
    s1, s2, s3 = read_text(SAMPLE)
    assert s1.forms == ["I", "do", "n't", "know", "."] and s1.n == 5
    assert s2.forms == ["Mary", "likes", "tea", "and", "John", "coffee", "."]  # no empty node
    assert s2.heads.dtype == numpy.int64
    assert s2.heads.tolist() == [-1, 2, 0, 2, 6, 3, 5, 2]
    assert s3.heads.tolist() == [-1, 0, 1, 5, 5, 1, 7, 1, 1]
    assert s1.deprels == ["nsubj", "aux", "advmod", "root", "punct"]
    assert s1.upos == ["PRON", "AUX", "PART", "VERB", "PUNCT"]
    assert s1.xpos == ["PRP", "VBP", "RB", "VB", "."]
    assert s1.feats[:2] == ["Case=Nom|Number=Sing", "Mood=Ind"]
    assert s1.lemmas == ["I", "do", "not", "know", "."]
    assert (s1.sent_id, s1.text) == ("s1", "I don't know.")
    assert s2.comment("note") == "a = b" and s1.comment("newpar") == "" and s1.comment("missing") is None
    assert s2.misc_items(6) == {"SpaceAfter": "No", "Cxn": "free=rc-obj"}


def test_spaces_follow_multiword_tokens():
    s1, s2, s3 = read_text(SAMPLE)
    # "do" + "n't" inside "don't": no space between; the token line has no SpaceAfter=No.
    assert s1.spaces == [True, False, True, False, True]
    assert s2.spaces == [True, True, True, True, True, False, True]  # SpacesAfter is a space
    # Vámonos = Vamos+nos (space after), al = a+el with SpaceAfter=No on the range line.
    assert s3.spaces == [False, True, False, False, False, True, False, True]


def test_sent_id_and_text_absent():
    (sentence,) = read_text(conllu("# newpar\n1 a a X _ _ 0 root _ _\n"))
    assert sentence.sent_id is None and sentence.text is None


def test_blank_lines_crlf_and_bom(tmp_path):
    path = tmp_path / "crlf.conllu"
    text = "\n\n" + SAMPLE.replace("\n\n", "\n\n\n \n")
    path.write_bytes(("\ufeff" + text.replace("\n", "\r\n")).encode("utf-8"))
    sentences = list(read_conllu(path))
    out = io.StringIO()
    write_conllu(sentences, out)
    assert out.getvalue() == SAMPLE  # CRLF normalised to LF, BOM and extra blank lines dropped
    assert sentences[0].comments[0] == "# newdoc id = doc1"
    assert [s.line for s in sentences] == [3, 16, 31]


def test_missing_file_raises_at_call(tmp_path):
    missing = tmp_path / "nope.conllu"
    with pytest.raises(FileNotFoundError, match="nope.conllu"):
        read_conllu(missing)


# --- format errors --------------------------------------------------------------------

GOOD = conllu("# sent_id = g1\n1 ok ok X _ _ 0 root _ _\n")

FORMAT_ERRORS = [
    # (bad block, line of the error within the block, words of the message)
    ("1 a a X _ _ 0 root _\n", 1, "expected 10 tab-separated columns, got 9"),
    ("# sent_id = b\n1 a a X _ _ 0 root _ _\n3 b b X _ _ 1 dep _ _\n", 3, "token id '3' where word 2"),
    ("2 a a X _ _ 0 root _ _\n", 1, "token id '2' where word 1"),
    ("1 a a X _ _ 0 root _ _\nx b b X _ _ 1 dep _ _\n", 2, "token id 'x'"),
    ("1 a a X _ _ 0 root _ _\n01 b b X _ _ 1 dep _ _\n", 2, "token id '01'"),
    ("1-1 a _ _ _ _ _ _ _ _\n1 a a X _ _ 0 root _ _\n", 1, "first word must be before the last"),
    ("1 a a X _ _ 0 root _ _\n3-4 bc _ _ _ _ _ _ _ _\n2 b b X _ _ 1 dep _ _\n", 2, "where word 2 comes next"),
    ("1-3 abc _ _ _ _ _ _ _ _\n1 a a X _ _ 0 root _ _\n2-3 bc _ _ _ _ _ _ _ _\n", 3, "overlaps '1-3'"),
    (
        "1 a a X _ _ 0 root _ _\n2-3 bc _ _ _ _ _ _ _ _\n2 b b X _ _ 1 dep _ _\n",
        2,
        "goes past the last word 2",
    ),
    ("1 a a X _ _ 0 root _ _\n1.0 e _ _ _ _ _ _ 1:dep _\n", 2, "token id '1.0'"),
    ("1 a a X _ _ 0 root _ _\n1.2 e _ _ _ _ _ _ 1:dep _\n", 2, "where 1.1 comes next"),
    ("1 a a X _ _ 0 root _ _\n2.1 e _ _ _ _ _ _ 1:dep _\n", 2, "after word 1"),
    ("1 a a X _ _ 0 root _ _\n2 b b X _ _ 1 dep _ _\n1.1 e _ _ _ _ _ _ 1:dep _\n", 3, "after word 2"),
    ("1 a a X _ _ 0 root _ _\n# late\n2 b b X _ _ 1 dep _ _\n", 2, "comment after token lines"),
    ("# sent_id = empty\n# text = nothing\n", 1, "sentence without words"),
    ("0.1 e _ _ _ _ _ _ 0:root _\n", 1, "sentence without words"),
]


@pytest.mark.parametrize(("block", "line", "message"), FORMAT_ERRORS)
def test_format_error_raises_with_path_and_line(tmp_path: Path, block: str, line: int, message: str) -> None:
    path = tmp_path / "bad.conllu"
    path.write_text(GOOD + "\n" + conllu(block) + "\n" + GOOD, encoding="utf-8")
    expected_line = GOOD.count("\n") + 1 + line
    with pytest.raises(ConlluError) as caught:
        list(read_conllu(path))
    error = caught.value
    assert (error.path, error.line) == (str(path), expected_line)
    assert message in error.message
    assert str(error) == f"{path}:{expected_line}: {error.message}"


@pytest.mark.parametrize(("block", "line", "message"), FORMAT_ERRORS)
def test_format_error_with_on_error_skips_only_that_sentence(block: str, line: int, message: str) -> None:
    good2 = GOOD.replace("g1", "g2")
    errors: list[ConlluError] = []
    sentences = read_text(GOOD + "\n" + conllu(block) + "\n" + good2 + "\n", on_error=errors.append)
    assert [s.sent_id for s in sentences] == ["g1", "g2"]
    assert len(errors) == 1
    assert errors[0].line == GOOD.count("\n") + 1 + line and errors[0].path is None
    assert message in errors[0].message and str(errors[0]).startswith("<input>:")


def test_invalid_utf8_names_the_line(tmp_path):
    path = tmp_path / "latin1.conllu"
    bad = conllu("# sent_id = bad\n1 caf\xe9 _ X _ _ 0 root _ _\n").encode("latin-1")
    path.write_bytes(GOOD.encode() + b"\n" + bad + b"\n" + GOOD.replace("g1", "g2").encode())
    with pytest.raises(ConlluError, match="not valid UTF-8") as caught:
        list(read_conllu(path))
    assert caught.value.line == 5
    errors: list[ConlluError] = []
    assert [s.sent_id for s in read_conllu(path, on_error=errors.append)] == ["g1", "g2"]
    assert [e.line for e in errors] == [5]


def test_on_error_may_stop_reading():
    def stop(error: ConlluError) -> None:
        raise SystemExit(str(error))

    with pytest.raises(SystemExit, match="<input>:4: expected 10"):
        read_text(GOOD + "\n1 a\n\n" + GOOD, on_error=stop)


def test_conllu_error_pickles():
    error = pickle.loads(pickle.dumps(ConlluError("x.conllu", 7, "bad")))
    assert (error.path, error.line, error.message, str(error)) == ("x.conllu", 7, "bad", "x.conllu:7: bad")
    assert isinstance(error, ValueError)


def test_heads_not_checked_on_read_but_on_access():
    (sentence,) = read_text(TREE.replace("\t2\tdet", "\t_\tdet"))  # unparsed input is fine to read
    assert sentence.forms[0] == "the"
    with pytest.raises(ConlluError, match="word 1: head '_' is not an integer") as caught:
        _ = sentence.heads
    assert caught.value.line == 2


# --- tree problems --------------------------------------------------------------------


def test_valid_tree_has_no_problem():
    assert all(s.tree_problem() is None for s in read_text(SAMPLE))
    assert with_heads(["2", "3", "0", "3"]).tree_problem() is None


@pytest.mark.parametrize(
    ("heads", "problem"),
    [
        (["2", "_", "0", "3"], "word 2 ('dog') has head '_', not a number"),
        (["2", "3", "0", "x1"], "word 4 ('.') has head 'x1', not a number"),
        (["2", "3", "0", "5"], "word 4 ('.') has head 5, outside 0..4"),
        (["-1", "3", "0", "3"], "word 1 ('the') has head -1, outside 0..4"),
        (["2", "2", "0", "3"], "word 2 ('dog') is its own head"),
        (["2", "3", "1", "3"], "no root: no word has head 0"),
        (["2", "0", "0", "0"], "3 roots (words 2, 3, 4); a tree has one"),
        (["0", "3", "0", "3"], "2 roots (words 1, 3); a tree has one"),
        (["2", "0", "4", "3"], "cycle: 3 ('barked') -> 4 ('.') -> 3 ('barked')"),
        (["2", "1", "0", "3"], "cycle: 1 ('the') -> 2 ('dog') -> 1 ('the')"),
        (["2", "3", "2", "0"], "cycle: 2 ('dog') -> 3 ('barked') -> 2 ('dog')"),  # reached from word 1
    ],
)
def test_tree_problem(heads, problem):
    assert with_heads(heads).tree_problem() == problem


# --- building and editing -------------------------------------------------------------


def test_with_misc_replaces_in_place_and_keeps_the_rest():
    s1, s2, _ = read_text(SAMPLE)
    edited = s2.with_misc(6, {"Cxn": "x", "HeadProb": "0.9812"})
    assert edited.misc[5] == "SpaceAfter=No|Cxn=x|HeadProb=0.9812"
    again = edited.with_misc(6, {"HeadProb": "0.5000", "SpaceAfter": None})
    assert again.misc[5] == "Cxn=x|HeadProb=0.5000"
    assert s2.misc[5] == "SpaceAfter=No|Cxn=free=rc-obj"  # the original is unchanged
    assert s1.with_misc(1, {"HeadProb": "1.0000"}).misc[0] == "HeadProb=1.0000"
    assert s1.with_misc(4, {"SpaceAfter": None}).misc[3] == "_"
    assert s1.with_misc(4, {"SpaceAfter": None}).spaces[3] is True
    assert [row[0] for row in s1.with_misc(3, {"A": "b"}).rows] == ["1", "2-3", "2", "3", "4", "5"]
    with pytest.raises(IndexError):
        s1.with_misc(6, {"A": "b"})
    with pytest.raises(ValueError):
        s1.with_misc(1, {"A": "b|c"})


def test_misc_helpers():
    assert parse_misc("_") == {}
    assert parse_misc("SpaceAfter=No|Flag|Cxn=a=b") == {"SpaceAfter": "No", "Flag": "", "Cxn": "a=b"}
    assert format_misc("_", {"A": "1"}) == "A=1"
    assert format_misc("A=1|B=2|A=3", {"A": "9"}) == "A=9|B=2"
    assert format_misc("A=1", {"A": None}) == "_"


def test_with_comment_replaces_without_duplicates():
    (s1, *_) = read_text(SAMPLE)
    once = s1.with_comment("tree_entropy", "1.23")
    twice = once.with_comment("tree_entropy", "0.50")
    assert twice.comments == s1.comments + ["# tree_entropy = 0.50"]
    assert twice.comment("tree_entropy") == "0.50"
    moved = s1.with_comment("sent_id", "new")
    assert moved.comments[2] == "# sent_id = new" and len(moved.comments) == 4
    assert s1.with_comment("newpar", None).comments == [c for c in s1.comments if c != "# newpar"]
    assert s1.comments[2] == "# sent_id = s1"
    with pytest.raises(ValueError):
        s1.with_comment("a = b", "c")


def test_edited_sentence_keeps_ranges_and_empty_nodes_on_write():
    sentences = read_text(SAMPLE)
    edited = [s.with_comment("tree_entropy", "0.1000").with_misc(1, {"HeadProb": "0.9"}) for s in sentences]
    out = io.StringIO()
    write_conllu(edited, out)
    again = read_text(out.getvalue())
    for before, after in zip(sentences, again):
        assert after.ranges == before.ranges and after.empty_nodes == before.empty_nodes
        assert [r for r in after.rows if r[0] != "1"] == [r for r in before.rows if r[0] != "1"]
        assert after.comment("tree_entropy") == "0.1000"
    assert again[1].misc[0] == "HeadProb=0.9"
    assert again[2].rows[1][9] == "HeadProb=0.9"  # word 1 of s3 comes after its range line


def test_with_word_replaces_columns():
    (sentence,) = read_text(TREE)
    edited = sentence.with_word(2, head=1, deprel="amod", upos="ADJ")
    assert edited.heads.tolist() == [-1, 2, 1, 0, 3]
    assert edited.deprels[1] == "amod" and edited.upos[1] == "ADJ"
    assert sentence.deprels[1] == "nsubj"
    with pytest.raises(ValueError, match="unknown CoNLL-U column"):
        sentence.with_word(1, id="7")
    with pytest.raises(ValueError):
        sentence.with_word(1, lemma="")


def test_from_words_builds_a_readable_sentence():
    sentence = ConlluSentence.from_words(
        ["Hello", "world", "!"],
        heads=numpy.array([-1, 0, 1, -1]),
        deprels=["root", "vocative", "punct"],
        spaces=[True, False, True],
        upos=["INTJ", "NOUN", "PUNCT"],
        misc=["_", "X=1", "_"],
        comments=["# sent_id = new-1", "# text = Hello world!"],
    )
    expected = (
        "# sent_id = new-1\n# text = Hello world!\n"
        "1\tHello\t_\tINTJ\t_\t_\t0\troot\t_\t_\n"
        "2\tworld\t_\tNOUN\t_\t_\t1\tvocative\t_\tX=1|SpaceAfter=No\n"
        "3\t!\t_\tPUNCT\t_\t_\t_\tpunct\t_\t_\n"
    )
    assert sentence.to_text() == expected
    (back,) = read_text(sentence.to_text())
    assert back.rows == sentence.rows and back.spaces == [True, False, True]
    assert back.tree_problem() == "word 3 ('!') has head '_', not a number"


def test_from_words_checks_its_input():
    with pytest.raises(ValueError, match="length n\\+1 = 3"):
        ConlluSentence.from_words(["a", "b"], heads=[0, 1])
    with pytest.raises(ValueError, match="upos has 1 values for 2 words"):
        ConlluSentence.from_words(["a", "b"], upos=["X"])
    with pytest.raises(ValueError, match="unknown CoNLL-U column"):
        ConlluSentence.from_words(["a"], pos=["X"])
    with pytest.raises(ValueError, match="at least one word"):
        ConlluSentence.from_words([])
    with pytest.raises(ValueError, match="tab or line break"):
        ConlluSentence.from_words(["a\tb"])
    with pytest.raises(ValueError, match="starting with '#'"):
        ConlluSentence.from_words(["a"], comments=["sent_id = 1"])


# --- real data ------------------------------------------------------------------------


@pytest.mark.parametrize("split", ["train", "dev", "test"])
def test_ud_english_ewt_round_trip(split, tmp_path):
    path = EWT / f"en_ewt-ud-{split}.conllu"
    if not path.is_file():
        pytest.skip(f"UD English-EWT not found at {path}")
    sentences = list(read_conllu(path))
    target = tmp_path / "out.conllu"
    write_conllu(sentences, target)
    assert target.read_bytes() == path.read_bytes()
    assert all(s.tree_problem() is None for s in sentences)
    assert sum(len(s.empty_nodes) for s in sentences) > 0 and sum(len(s.ranges) for s in sentences) > 0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (SAMPLE, "sentence without words"),  # the whole file is one comment line
        (conllu("1 a a X _ _ 0 root _ _\n2 b b X _ _ 1 dep _ _\n"), "expected 10 tab-separated columns, got 19"),
    ],
)
def test_a_file_with_lone_carriage_returns_is_named_as_such(tmp_path, text, message):
    path = tmp_path / "mac.conllu"  # classic Mac OS line endings
    path.write_bytes(text.replace("\n", "\r").encode())
    with pytest.raises(ConlluError) as caught:
        list(read_conllu(path))
    assert caught.value.line == 1
    assert caught.value.message.startswith(message) and "lone carriage return (\\r), not \\n" in caught.value.message
    with pytest.raises(ConlluError) as plain:  # a lone \r kept inside one line of a good file
        list(read_text(GOOD.replace("# sent_id", "# x\ry\n# sent_id") + "\n1 a\n"))
    assert "carriage" not in plain.value.message


def test_a_skipped_sentence_hands_its_document_start_to_the_next():
    """A bad sentence that starts a document is skipped; its ``# newdoc`` goes to the next
    sentence, so that document does not merge into the one before (unless the next sentence
    starts a document of its own)."""
    good = "1\tHi\thi\tINTJ\tUH\t_\t0\troot\t_\t_\n"
    bad = "1\tHi\n"
    text = (
        f"# newdoc id = a\n# sent_id = a1\n{good}\n"
        f"# newdoc id = b\n# newpar\n# sent_id = b1\n{bad}\n"
        f"# sent_id = b2\n{good}\n"
        f"# newdoc id = c\n# sent_id = c1\n{bad}\n"
        f"# newdoc id = d\n# sent_id = d1\n{good}\n"
    )
    errors = []
    sentences = list(read_conllu(io.StringIO(text), on_error=errors.append))
    assert len(errors) == 2 and [s.line for s in sentences] == [1, 10, 17]
    assert sentences[1].comments == ["# newdoc id = b", "# newpar", "# sent_id = b2"]
    assert sentences[2].comments == ["# newdoc id = d", "# sent_id = d1"]  # its own start: c's is not added
