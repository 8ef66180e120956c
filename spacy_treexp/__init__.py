"""spacy_treexp: exact marginals, entropy and unbiased samples of dependency trees."""

from spacy_treexp.engine import NoTreeError, TreeDistribution, TreeMixture

__all__ = ["NoTreeError", "TreeDistribution", "TreeMixture", "add_uncertainty", "load", "render"]
__version__ = "0.1.0"


def load(*, ensemble=False, **overrides):
    """Load the default English pipeline shipped with the package (see its model card);
    ``ensemble=True`` adds a second parser (a product of experts: more accurate, slower),
    ``ensemble="mixture"`` adds it as a mixture member (the parser's tree and probabilities
    as they are, with stronger risk scores: ``sent._.mixture_error_probability``)."""
    from spacy_treexp.pipeline.default_model import load as _load

    return _load(ensemble=ensemble, **overrides)


def add_uncertainty(nlp, **options):
    """Add the shipped UD ``biaffine_parser`` and ``tree_expectations`` to a spaCy pipeline
    such as ``en_core_web_sm`` (see ``spacy_treexp/pipeline/stock.py``); returns ``nlp``."""
    from spacy_treexp.pipeline.stock import add_uncertainty as _add

    return _add(nlp, **options)


def render(doc, **options):
    """Render a Doc annotated by ``tree_expectations`` as a standalone HTML page."""
    from spacy_treexp.pipeline.render import render as _render

    return _render(doc, **options)
