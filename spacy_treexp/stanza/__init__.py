"""Stanza adapter: the ``tree_expectations`` processor, exports and ``to_spacy``.

Importing this package registers the processor and the ``Sentence`` / ``Word``
properties with Stanza (once, however often it is imported or reloaded)::

    import stanza, spacy_treexp.stanza
    nlp = stanza.Pipeline("en", processors="tokenize,pos,lemma,depparse,tree_expectations")
"""

from spacy_treexp.stanza.convert import pipeline_from_dir, to_spacy
from spacy_treexp.stanza.export import from_conllu, from_dict, to_conllu, to_dict
from spacy_treexp.stanza.processor import (
    SENTENCE_PROPERTIES,
    WORD_PROPERTIES,
    TreeExpectationsProcessor,
    register_processor,
    register_properties,
)

register_properties()
register_processor()

__all__ = [
    "TreeExpectationsProcessor",
    "SENTENCE_PROPERTIES",
    "WORD_PROPERTIES",
    "register_processor",
    "register_properties",
    "to_dict",
    "from_dict",
    "to_conllu",
    "from_conllu",
    "to_spacy",
    "pipeline_from_dir",
]
