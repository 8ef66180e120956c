"""``spacy_treexp.load`` (and so ``spacy.load("en_treexp_ewt")``) with components left out."""

import warnings

import pytest

import spacy_treexp

TAGGER_PART = ["tagger_tok2vec", "tagger", "lemmatizer", "lemma_table"]


def test_excluding_the_tok2vec_the_tagger_reads_is_refused_by_name():
    """The tagger and lemmatizer read ``tagger_tok2vec``'s vectors; without it they got the shared
    tok2vec's narrower ones: "shapes (17,128) and (192,49) not aligned" at the first Doc."""
    with pytest.raises(ValueError, match=r"'tagger', 'lemmatizer' read the token vectors of 'tagger_tok2vec'"):
        spacy_treexp.load(exclude=["tagger_tok2vec"])


def test_disabling_the_tok2vec_the_tagger_reads_is_refused_as_it_would_fail():
    """Disabled (not excluded), ``tagger_tok2vec`` was warned of ("predict from zeros, or fail"),
    then the first Doc raised numpy's "shapes (5,128) and (192,49) not aligned" naming no
    component: the tagger reads the shared tok2vec's vectors in its place, always."""
    with pytest.raises(ValueError, match=r"'tagger', 'lemmatizer' read .*'tagger_tok2vec', which is disabled: .*"
                       r"read the vectors of 'tok2vec' in its place, and fail"):  # fmt: skip
        spacy_treexp.load(disable=["tagger_tok2vec"])


@pytest.mark.parametrize(
    "options",
    [
        {"disable": ["tok2vec"]},
        {"exclude": ["tok2vec", "morphologizer", "tagger_tok2vec", "tagger", "lemmatizer"]},  # the advice followed
    ],
)
def test_leaving_out_the_tok2vec_the_parser_reads_is_refused_at_load(options):
    """The parser listens to ``tok2vec``: without it the load only warned of the morphologizer,
    and the first Doc failed with "a Doc has no token vectors"."""
    with pytest.raises(ValueError, match=r"'biaffine_parser'.* of 'tok2vec'.*'biaffine_parser' would refuse every Doc"):
        spacy_treexp.load(**options)


def test_the_tagger_alone_warns_that_its_vectors_would_be_zeros():
    """``tagger_tok2vec`` listens to ``tok2vec``: enabled alone it gave the tagger zeros, and
    wrong tags without a word of warning."""
    with pytest.warns(UserWarning, match=r"'tagger_tok2vec' reads the token vectors of 'tok2vec', which is disabled"):
        spacy_treexp.load(enable=["tagger_tok2vec", "tagger"])


def test_leaving_out_the_tagger_and_lemmatizer_together_is_quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        nlp = spacy_treexp.load(disable=TAGGER_PART)
        doc = nlp("The children were playing in the park.")
    assert nlp.disabled == TAGGER_PART
    assert doc.has_annotation("DEP") and not doc.has_annotation("TAG")


@pytest.mark.parametrize(
    "config",
    [{"components.second_parser.members": 4}, {"components": {"second_parser": {"members": 4}}}],
    ids=["dotted", "nested"],
)
def test_an_override_of_the_ensembles_second_parser_is_refused_by_name(config):
    """``second_parser`` is added after loading: spaCy's own answer was "not a section value
    that can be overridden", which did not say that it takes biaffine_parser's settings (in
    either form of overrides spaCy takes)."""
    with pytest.raises(ValueError, match=r"second_parser.*added after.*biaffine_parser's members"):
        spacy_treexp.load(ensemble=True, config=config)
