"""The ``space_tags`` spaCy component: whitespace tokens get the annotations spaCy gives them.

spaCy's tokenizer keeps line breaks and runs of spaces as tokens (``token.is_space``). A
treebank such as UD English-EWT has none, so a tagger, morphologizer or lemmatizer trained on
it gives them whatever its features suggest (``"\\n\\n"`` tagged ``NNS`` / ``NOUN``). This
component gives each whitespace token what spaCy's trained English pipelines give it: UPOS
``SPACE``, no morphological features, its own text as lemma and, where the Doc has PTB tags,
the tag ``_SP``. Other tokens are left as they are; the parser attaches whitespace itself
(``biaffine_parser``). Place it last: ``nlp.add_pipe("space_tags")``.
"""

import numpy
from spacy.attrs import IS_SPACE
from spacy.language import Language
from spacy.tokens import Doc, MorphAnalysis

#: The tag and UPOS spaCy's English pipelines give whitespace tokens.
SPACE_TAG = "_SP"
SPACE_POS = "SPACE"


@Language.factory("space_tags", default_config={}, assigns=["token.tag", "token.pos", "token.morph", "token.lemma"])
def make_space_tags(nlp: Language, name: str) -> "SpaceTags":
    """Create a ``space_tags`` component (see ``SpaceTags``)."""
    return SpaceTags(name)


class SpaceTags:
    """Sets ``pos_``, ``morph``, ``lemma_`` and (in a tagged Doc) ``tag_`` of whitespace tokens."""

    def __init__(self, name: str = "space_tags") -> None:
        self.name = name

    def __call__(self, doc: Doc) -> Doc:
        spaces = numpy.flatnonzero(doc.to_array(IS_SPACE))  # one array call for a Doc without any
        if len(spaces) == 0:
            return doc
        tagged = doc.has_annotation("TAG")
        for token in (doc[int(i)] for i in spaces):
            token.pos_ = SPACE_POS
            token.morph = MorphAnalysis(doc.vocab, {})  # no features
            token.lemma_ = token.text
            if tagged:
                token.tag_ = SPACE_TAG
        return doc
