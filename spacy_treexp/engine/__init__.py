"""Pure-torch exact inference over dependency trees (no spaCy or Stanza imports)."""

from spacy_treexp.engine.decoding import NoTreeError
from spacy_treexp.engine.distribution import TreeDistribution
from spacy_treexp.engine.mixture import TreeMixture

__all__ = ["TreeDistribution", "TreeMixture", "NoTreeError"]
