"""Parse with the shipped English pipeline and read the arc scores the parser keeps.

The ``biaffine_parser`` stores, per sentence, the arc log-potentials ``arc[h, d]`` and the
relation log-probabilities ``rel[h, d, l]`` in ``Doc._.parser_scores``; the engine turns
them into exact arc marginals (Koo et al. 2007).

These are the parser's raw scores. The ``tree_expectations`` component (and ``spacy-treexp
parse``) first applies the calibration map stored beside the parser, so its ``head_prob`` and
entropies differ from the figures printed here: use the component's for calibrated
probabilities (``examples/component_uncertainty.py``).

    python examples/parse_with_scores.py "I saw the man with the telescope."
"""

import math
import sys

import torch

import spacy_treexp
from spacy_treexp import TreeDistribution

text = sys.argv[1] if len(sys.argv) > 1 else "I saw the man with the telescope. He waved."
nlp = spacy_treexp.load()
doc = nlp(text)
for record, sent in zip(doc._.parser_scores, doc.sents):
    dist = TreeDistribution(torch.from_numpy(record["arc"]))
    marginals = dist.marginals
    print(f"\n{sent.text}\n  tree entropy {dist.entropy().item():.3f} nats (raw scores)")
    for token in sent:
        d = token.i - sent.start + 1
        h = 0 if token.head.i == token.i else token.head.i - sent.start + 1
        head = "ROOT" if h == 0 else token.head.text
        label_prob = math.exp(float(record["rel"][h, d].max()))
        print(
            f"  {token.text:>12} <-{token.dep_:-<10} {head:<12} "
            f"p(head) = {marginals[h, d].item():.3f}  p(label | head) = {label_prob:.3f}"
        )
