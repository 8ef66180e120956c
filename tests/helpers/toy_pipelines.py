"""A tiny spaCy pipeline with the biaffine parser, trained in seconds by the tests."""

import random
from pathlib import Path

import spacy
from spacy.tokens import Doc
from spacy.training import Example
from spacy.training.converters import conllu_to_docs
from thinc.api import Config, fix_random_seed

from helpers.paths import FIXTURES

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


TINY_CONFIG = tiny_parser_config()

TEXTS = [
    "The cat sat on the mat . A dog barked .",
    "She reads old books in the garden .",
    "My brother plays the guitar and sings . Is it raining ?",
    "Give me the red pen quickly .",
    "The old man saw a bird that sang . We will visit Paris next year .",
]


def toy_examples(nlp):
    text = (FIXTURES / "toy_treebank.conllu").read_text(encoding="utf8")
    gold_docs = list(conllu_to_docs(text, n_sents=2, no_print=True))
    return [
        Example(Doc(nlp.vocab, words=[t.text for t in gold], spaces=[t.whitespace_ for t in gold]), gold)
        for gold in gold_docs
    ]


def train_toy(config_str, n_iter):
    fix_random_seed(0)
    nlp = spacy.util.load_model_from_config(Config().from_str(config_str), auto_fill=True)
    examples = toy_examples(nlp)
    optimizer = nlp.initialize(lambda: examples)
    history = []
    for _ in range(n_iter):
        random.shuffle(examples)
        losses = nlp.update(examples, sgd=optimizer, losses={})
        history.append(losses["biaffine_parser"])
    return nlp, examples, history


def sentence_heads(sent):
    """Head vector of a sentence in the engine's convention (ROOT = 0, -1 at index 0)."""
    heads = [-1]
    for token in sent:
        heads.append(0 if token.head.i == token.i else token.head.i - sent.start + 1)
    return heads


def two_toy_parsers(folder: Path):
    """Two toy pipelines of different sizes (arc MLPs of 64 and 32), the second saved in
    ``folder`` to be loaded there with ``product`` or ``mixture_member`` set: ``(first,
    second, folder)``."""
    first, _, _ = train_toy(tiny_parser_config(arc_width=64), 25)
    second, _, _ = train_toy(tiny_parser_config(arc_width=32), 25)
    second.to_disk(folder)
    return first, second, folder
