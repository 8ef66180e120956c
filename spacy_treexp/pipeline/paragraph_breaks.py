"""The ``paragraph_breaks`` spaCy component: a sentence ends where a paragraph ends.

spaCy's tokenizer keeps line breaks as whitespace tokens (``token.is_space``). A run of
whitespace holding ``min_newlines`` or more line breaks (by default a blank line) is a
paragraph break: the next word starts a sentence. Whitespace tokens themselves never start
one, so they stay at the end of the sentence before them (whitespace at the start of the
Doc joins the first sentence); a boundary already set on a whitespace token (by the user or
an earlier component) moves to the word after the run. Other tokens are left unset for a
downstream ``senter`` or ``sentencizer`` (both keep boundaries already set, unless told to
overwrite them). Docs without whitespace tokens are returned untouched at the cost of
one ``to_array`` call.

Place it first: ``nlp.add_pipe("paragraph_breaks", first=True)``. Plain text in UD
treebanks (and the CoNLL 2018 shared task's raw-text input) separates paragraphs with a
blank line, which is the default here.
"""

import numpy
from spacy.attrs import IS_SPACE
from spacy.language import Language
from spacy.tokens import Doc


@Language.factory("paragraph_breaks", default_config={"min_newlines": 2})
def make_paragraph_breaks(nlp: Language, name: str, min_newlines: int) -> "ParagraphBreaks":
    """Create a ``paragraph_breaks`` component (see ``ParagraphBreaks``)."""
    return ParagraphBreaks(name, min_newlines=min_newlines)


class ParagraphBreaks:
    """Sets sentence starts after paragraph breaks; leaves every other boundary unset."""

    def __init__(self, name: str = "paragraph_breaks", *, min_newlines: int = 2) -> None:
        if isinstance(min_newlines, bool) or not isinstance(min_newlines, int) or min_newlines < 1:
            raise ValueError(f"paragraph_breaks: min_newlines must be a positive integer, got {min_newlines!r}")
        self.name = name
        self.min_newlines = min_newlines

    def __call__(self, doc: Doc) -> Doc:
        spaces = numpy.flatnonzero(doc.to_array(IS_SPACE))
        if len(spaces) == 0:
            return doc
        # Runs of consecutive whitespace tokens: [starts[r], ends[r]).
        breaks = numpy.flatnonzero(numpy.diff(spaces) != 1) + 1
        starts = spaces[numpy.r_[0, breaks]]
        ends = spaces[numpy.r_[breaks - 1, len(spaces) - 1]] + 1
        for start, end in zip(starts.tolist(), ends.tolist()):
            # a boundary already set inside the run (by the user, or a component before this one) moves to the next word
            boundary_set = any(doc[i].is_sent_start for i in range(max(start, 1), end))
            for i in range(max(start, 1), end):
                doc[i].is_sent_start = False
            newlines = sum(doc[i].text.count("\n") for i in range(start, end))
            if start == 0 and end < len(doc):
                doc[end].is_sent_start = False  # leading whitespace joins the first sentence
            elif end < len(doc) and (newlines >= self.min_newlines or boundary_set):
                doc[end].is_sent_start = True
        return doc
