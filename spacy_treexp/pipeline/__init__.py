"""spaCy components of spacy_treexp.

Importing this package registers the ``Doc._.parser_scores`` extension. The components
themselves are registered through the package's ``spacy_factories`` entry points, so
``spacy.load`` finds them without an import.
"""

from spacy_treexp.pipeline.extensions import PARSER_SCORES, register_extensions

__all__ = ["PARSER_SCORES", "register_extensions"]
