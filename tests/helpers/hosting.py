"""What the tests of a parser sourced into another pipeline share: texts a stock pipeline
annotates, and a counter of the parser's runs of its own tok2vec on copies of foreign Docs."""

from typing import List

#: Texts with entities, contractions, a URL-like token, a line break and two sentences.
STOCK_TEXTS = [
    "The old man saw the dog with the telescope in the park.",
    "Apple is looking at buying a U.K. startup for $1 billion. Tim Cook didn't comment on Monday.",
    "I can't believe it's already November!  The meeting in Paris was moved to 3 pm.",
    "Please send the report to Dr. Smith at smith@example.com\nThanks, Anna",
]


def count_home_runs(monkeypatch) -> List[int]:
    """The sizes of the batches a ``biaffine_parser`` runs its home tok2vec on (copies of
    Docs from another pipeline), filled as they happen; empty while it reads the host's
    ``doc.tensor``."""
    from spacy_treexp.pipeline.biaffine_parser import BiaffineParser

    calls: List[int] = []
    original = BiaffineParser._run_home

    def counted(self, copies):
        calls.append(len(copies))
        return original(self, copies)

    monkeypatch.setattr(BiaffineParser, "_run_home", counted)
    return calls
