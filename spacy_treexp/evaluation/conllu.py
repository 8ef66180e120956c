"""Gold sentences for evaluation: words (syntactic words, not multiword tokens), heads and
relations of a CoNLL-U file, read with the one CoNLL-U module (:mod:`spacy_treexp.io`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Union

import numpy

from spacy_treexp.io import ConlluError, ConlluSentence
from spacy_treexp.io import read_conllu as read_sentences
from spacy_treexp.io.conllu import sentence_id

__all__ = ["ConlluError", "GoldSentence", "read_conllu"]


@dataclass
class GoldSentence:
    """One gold sentence.

    ``heads[m]`` is the gold head of word m (1-based, 0 = ROOT) in the engine's convention:
    an int array of length n+1 with ``heads[0] = -1``. ``deprels[m - 1]`` is word m's
    relation. ``spaces[m - 1]`` says whether a space follows word m (``SpaceAfter=No``).
    """

    sent_id: str
    words: List[str]
    heads: numpy.ndarray
    deprels: List[str]
    spaces: List[bool] = field(default_factory=list)
    line: int = 0
    upos: List[str] = field(default_factory=list)
    xpos: List[str] = field(default_factory=list)
    feats: List[str] = field(default_factory=list)

    @property
    def n(self) -> int:
        """Number of words."""
        return len(self.words)

    @classmethod
    def from_conllu(cls, sentence: ConlluSentence, path: Union[str, Path, None] = None) -> GoldSentence:
        """The gold view of a CoNLL-U sentence; ``ConlluError`` if its heads are not a
        single-root tree."""
        problem = sentence.tree_problem()
        sent_id = sentence_id(sentence)
        if problem is not None:
            raise ConlluError(None if path is None else str(path), sentence.line, f"sentence {sent_id}: {problem}")
        return cls(
            sent_id,
            sentence.forms,
            sentence.heads,
            sentence.deprels,
            sentence.spaces,
            sentence.line,
            sentence.upos,
            sentence.xpos,
            sentence.feats,
        )


def read_conllu(path: Union[str, Path]) -> List[GoldSentence]:
    """Every sentence of a CoNLL-U file (UTF-8), on its syntactic words: multiword-token
    ranges (``4-5``) and empty nodes (``8.1``) are not words, as in the CoNLL 2018 shared
    task. Raises ``FileNotFoundError``, or :class:`ConlluError` naming the file and line for
    a malformed line or a sentence whose heads are not a single-root tree."""
    return [GoldSentence.from_conllu(sentence, path) for sentence in read_sentences(path)]
