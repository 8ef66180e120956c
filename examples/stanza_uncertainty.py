"""Stanza's parser with calibrated uncertainty: marginals, entropy and sampled parses.

    python examples/stanza_uncertainty.py [MODEL_DIR] ["one sentence per line"]

MODEL_DIR defaults to the tiny offline test model (tests/fixtures/stanza/tiny, trained on
a small hand-made treebank); a folder written by benchmarks/train_stanza_ewt.sh or a
downloaded Stanza model folder works the same way.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import spacy_treexp.stanza as treexp_stanza

HERE = Path(__file__).resolve().parent
model_dir = sys.argv[1] if len(sys.argv) > 1 else str(HERE.parent / "tests" / "fixtures" / "stanza" / "tiny")
text = sys.argv[2] if len(sys.argv) > 2 else "The man saw the dog with the telescope in the park ."

nlp = treexp_stanza.pipeline_from_dir(model_dir, tree_options={"n_samples": 5, "seed": 0}, logging_level="WARN")
doc = nlp(text)
for sentence in doc.sentences:
    print(
        f"tree entropy {sentence.tree_entropy:.3f} nats, log Z {sentence.log_partition:.3f}, "
        f"expected attachment {100 * sentence.expected_attachment:.1f}%"
    )
    print(f"{'id':>3} {'word':12} {'head':>4} {'deprel':10} {'P(head)':>8} {'H(head)':>8}  alternatives")
    for word in sentence.words:
        # The most probable heads other than Stanza's (its tree's head need not be the most probable one).
        alternatives = ", ".join(f"{h}:{p:.2f}" for h, p in word.head_distribution if h != word.head)
        print(
            f"{word.id:>3} {word.text:12} {word.head:>4} {word.deprel:10} "
            f"{word.head_prob:8.3f} {word.head_entropy:8.3f}  {alternatives}"
        )
    print("sampled trees (heads) and their log-probabilities:")
    for heads, log_prob in zip(sentence.sampled_heads, sentence.sample_log_probs):
        print(f"  {heads.tolist()}  {log_prob:.3f}")

print("\nCoNLL-U with HeadProb/HeadEntropy in MISC:")
print(treexp_stanza.to_conllu(doc).strip())
print("\nJSON export (first sentence, truncated):")
print(json.dumps(treexp_stanza.to_dict(doc)[0]["tree_expectations"])[:300], "...")
