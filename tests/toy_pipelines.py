"""A tiny spaCy pipeline config with the biaffine parser, trained in seconds by the tests."""

# A shared tok2vec with a listener, like the shipped pipeline, kept tiny for speed.
_TEMPLATE = """
[nlp]
lang = "en"
pipeline = ["tok2vec", "sentencizer", "biaffine_parser"]

[components]

[components.sentencizer]
factory = "sentencizer"

[components.tok2vec]
factory = "tok2vec"

[components.tok2vec.model]
@architectures = "spacy.HashEmbedCNN.v2"
pretrained_vectors = null
width = 32
depth = 2
embed_size = 500
window_size = 1
maxout_pieces = 2
subword_features = true

[components.biaffine_parser]
factory = "biaffine_parser"

[components.biaffine_parser.model]
@architectures = "spacy_treexp.BiaffineParser.v1"
arc_width = {arc_width}
rel_width = 16
lstm_depth = 1
lstm_width = 32
dropout = 0.0

[components.biaffine_parser.model.tok2vec]
@architectures = "spacy.Tok2VecListener.v1"
width = 32
upstream = "tok2vec"
"""


def tiny_parser_config(arc_width: int = 64) -> str:
    """tok2vec + sentencizer + biaffine_parser; ``arc_width`` is the arc scorer's MLP size."""
    return _TEMPLATE.format(arc_width=arc_width)
