"""The tree_expectations component: flag uncertain attachments and look at alternatives.

Adds ``tree_expectations`` after the shipped parser, prints each sentence's entropy,
the words whose head the parser is least sure of (with their candidate heads), and the
sampled alternative parses that differ from the predicted tree.

    python examples/component_uncertainty.py "I saw the man with the telescope."
    python examples/component_uncertainty.py --model PATH "Some text."
"""

import argparse
from collections import Counter

import spacy

import spacy_treexp

parser = argparse.ArgumentParser()
parser.add_argument("text", nargs="?", default="I saw the man with the telescope. Flying planes can be dangerous.")
parser.add_argument("--model", default=None, help="spaCy pipeline with a parser writing arc scores")
args = parser.parse_args()

nlp = spacy_treexp.load() if args.model is None else spacy.load(args.model)
if "tree_expectations" not in nlp.pipe_names:
    nlp.add_pipe("tree_expectations", config={"n_samples": 20, "top_k_heads": 3})
doc = nlp(args.text)


def head_name(token):
    """The head's text, or ROOT (spaCy's root is its own head)."""
    return "ROOT" if token.head.i == token.i else token.head.text


for sent in doc.sents:
    print(f"\n{sent.text}")
    print(
        f"  tree entropy {sent._.tree_entropy:.3f} nats ({sent._.entropy_per_word:.3f}/word), "
        f"expected attachment of the predicted tree {100 * sent._.expected_attachment:.1f}%"
    )
    for token in sorted(sent, key=lambda t: t._.head_prob)[:3]:
        candidates = ", ".join(
            f"{'ROOT' if head.i == token.i else head.text} {p:.2f}" for head, p in token._.head_distribution
        )
        print(
            f"  least sure: {token.text!r} (head {head_name(token)}, p={token._.head_prob:.2f}) candidates: {candidates}"
        )
    # Sampled trees use CoNLL-U numbering: word j of the sentence is token sent.start + j - 1, 0 = ROOT.
    predicted = tuple(0 if t.head.i == t.i else t.head.i - sent.start + 1 for t in sent)
    samples = [tuple(row) for row in sent._.sampled_heads.tolist()]
    others = Counter(row for row in samples if row != predicted)
    print(
        f"  {len(set(samples))} distinct trees among {len(samples)} samples; "
        f"{sum(others.values())} differ from the predicted tree"
    )
    for row, count in others.most_common():
        changes = ", ".join(
            f"{sent[m].text} -> {'ROOT' if h == 0 else sent[h - 1].text}"
            for m, (h, old) in enumerate(zip(row, predicted))
            if h != old
        )
        print(f"    {count} x: {changes}")

# The i-th sample of every sentence, as a spaCy Doc anything that reads spaCy trees can use.
alternative = doc._.sampled_doc(0)
for token, other in zip(doc, alternative):
    if token.head.i != other.head.i:
        print(f"sample 0 attaches {token.text!r} to {head_name(other)} ({other.dep_}) instead of {head_name(token)}")
