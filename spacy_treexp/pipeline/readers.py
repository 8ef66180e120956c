"""Training corpus reader: examples whose predicted Doc has the treebank's own tokens.

spaCy's ``spacy.Corpus.v1`` re-tokenizes each text, and about 7.5% of UD English-EWT's
training sentences do not align with spaCy's tokenizer; the biaffine parser gets no arc
loss for them. ``gold_preproc = true`` would keep the tokens but also split every Doc into
single sentences, which leaves a ``senter`` nothing to learn. This reader keeps the
multi-sentence Docs and replaces only the tokenization (as the evaluation on gold tokens
does).

    [corpora.train]
    @readers = "spacy_treexp.GoldTokensCorpus.v1"
    path = ${paths.train}
"""

from typing import Callable, Iterator

from spacy.language import Language
from spacy.tokens import Doc
from spacy.training import Corpus, Example
from spacy.util import registry
from spacy.vocab import Vocab


def gold_tokens_doc(reference: Doc, vocab: Vocab) -> Doc:
    """A Doc with ``reference``'s words and spaces and nothing else (no sentence
    boundaries, tags or heads): the parser's input on the treebank's own tokens."""
    words = [token.text for token in reference]
    spaces = [bool(token.whitespace_) for token in reference]
    return Doc(vocab, words=words, spaces=spaces)


@registry.readers("spacy_treexp.GoldTokensCorpus.v1")
def gold_tokens_corpus(path: str, limit: int = 0) -> Callable[[Language], Iterator[Example]]:
    """Read a ``.spacy`` corpus; each Example's predicted Doc is :func:`gold_tokens_doc` of
    its reference."""
    corpus = Corpus(path, limit=limit, max_length=0, gold_preproc=False)

    def read(nlp: Language) -> Iterator[Example]:
        for example in corpus(nlp):
            yield Example(gold_tokens_doc(example.reference, nlp.vocab), example.reference)

    return read
