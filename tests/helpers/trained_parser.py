"""A tiny parser trained in seconds on the first sentences of a CoNLL-U fixture (one gold
sentence per Doc), saved to a folder: the pipeline of the calibrate and evaluate command
tests (no shipped model, no ../shared data)."""

from __future__ import annotations

import random
from pathlib import Path

import spacy
import torch
from spacy.tokens import Doc
from spacy.training import Example
from thinc.api import Config, fix_random_seed

from helpers.toy_pipelines import tiny_parser_config
from spacy_treexp.evaluation import read_conllu


def train_tiny_parser(conllu: Path, out: Path, n_sentences: int = 12, epochs: int = 15, arc_width: int = 32) -> Path:
    """Train ``tiny_parser_config(arc_width)`` on the first ``n_sentences`` of ``conllu`` for
    ``epochs`` passes (seed 0, one torch thread) and write it to ``out``; returns ``out``."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        fix_random_seed(0)
        nlp = spacy.util.load_model_from_config(Config().from_str(tiny_parser_config(arc_width)), auto_fill=True)
        examples = []
        for sentence in read_conllu(conllu)[:n_sentences]:
            words = sentence.words
            heads = [i if h == 0 else h - 1 for i, h in enumerate(sentence.heads[1:].tolist())]
            deps = ["ROOT" if d == "root" else d for d in sentence.deprels]
            reference = Doc(
                nlp.vocab, words=words, heads=heads, deps=deps, sent_starts=[True] + [False] * (len(words) - 1)
            )
            examples.append(Example(Doc(nlp.vocab, words=words), reference))
        optimizer = nlp.initialize(lambda: examples)
        for _ in range(epochs):
            random.shuffle(examples)
            nlp.update(examples, sgd=optimizer)
        nlp.to_disk(out)
    finally:
        torch.set_num_threads(previous)
    return out
