"""Gold sentences from a CoNLL-U file: words (syntactic words, not multiword tokens),
heads and relations, for evaluation on gold tokenization and gold sentence boundaries."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, List, Union

import numpy


class ConlluError(ValueError):
    """A CoNLL-U file that cannot be evaluated on (names the file and line)."""


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


def read_conllu(path: Union[str, Path]) -> List[GoldSentence]:
    """Read every sentence of a CoNLL-U file (UTF-8).

    Multiword-token ranges (``4-5``) and empty nodes (``8.1``) are skipped: evaluation is on
    the syntactic words, as in the CoNLL 2018 shared task. Raises :class:`ConlluError` for
    a malformed line, a head outside the sentence, or a sentence that is not a single-root tree.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"CoNLL-U file not found: {path}")
    return list(_sentences(path))


def _sentences(path: Path) -> Iterator[GoldSentence]:
    block: List[tuple] = []
    with path.open(encoding="utf8") as handle:
        for number, raw in enumerate(handle, start=1):
            line = raw.rstrip("\n").rstrip("\r")
            if line.strip():
                block.append((number, line))
            elif block:
                sentence = _parse_block(path, block)
                if sentence is not None:
                    yield sentence
                block = []
    if block:
        sentence = _parse_block(path, block)
        if sentence is not None:
            yield sentence


def _parse_block(path: Path, block: List[tuple]) -> Union[GoldSentence, None]:
    sent_id = ""
    words: List[str] = []
    heads: List[int] = [-1]
    deprels: List[str] = []
    spaces: List[bool] = []
    tags: List[tuple] = []
    ranges = {}
    for number, line in block:
        if line.startswith("#"):
            key, _, value = line[1:].partition("=")
            if key.strip() == "sent_id":
                sent_id = value.strip()
            continue
        cols = line.split("\t")
        if len(cols) != 10:
            raise ConlluError(f"{path}:{number}: expected 10 tab-separated columns, got {len(cols)}")
        token_id = cols[0]
        if "." in token_id:
            continue
        if "-" in token_id:
            first, _, last = token_id.partition("-")
            if not (first.isdigit() and last.isdigit()):
                raise ConlluError(f"{path}:{number}: bad multiword token id {token_id!r}")
            ranges[int(first)] = (int(last), "SpaceAfter=No" not in cols[9].split("|"))
            continue
        if not token_id.isdigit() or int(token_id) != len(words) + 1:
            raise ConlluError(f"{path}:{number}: word id {token_id!r} where {len(words) + 1} was expected")
        if not cols[6].isdigit():
            raise ConlluError(f"{path}:{number}: head {cols[6]!r} is not a number (gold trees are needed)")
        words.append(cols[1])
        heads.append(int(cols[6]))
        deprels.append(cols[7])
        tags.append((cols[3], cols[4], cols[5]))
        spaces.append("SpaceAfter=No" not in cols[9].split("|"))
    if not words:
        return None
    for first, (last, space_after) in ranges.items():
        for i in range(first, min(last, len(words)) + 1):
            spaces[i - 1] = space_after if i == last else False
    head_array = numpy.asarray(heads, dtype=numpy.int64)
    line = block[0][0]
    n = len(words)
    if (head_array[1:] < 0).any() or (head_array[1:] > n).any() or (head_array[1:] == numpy.arange(1, n + 1)).any():
        raise ConlluError(f"{path}:{line}: sentence {sent_id or '?'} has a head outside the sentence or a self-loop")
    if int((head_array[1:] == 0).sum()) != 1:
        raise ConlluError(f"{path}:{line}: sentence {sent_id or '?'} does not have exactly one root word")
    if not _is_tree(head_array):
        raise ConlluError(f"{path}:{line}: sentence {sent_id or '?'}: the gold heads contain a cycle")
    upos, xpos, feats = (list(column) for column in zip(*tags))
    return GoldSentence(sent_id or f"line-{line}", words, head_array, deprels, spaces, line, upos, xpos, feats)


def _is_tree(heads: numpy.ndarray) -> bool:
    """Every word reaches ROOT by following heads."""
    n = len(heads) - 1
    state = [0] * (n + 1)  # 0 unseen, 1 on path, 2 reaches root
    state[0] = 2
    for start in range(1, n + 1):
        path = []
        node = start
        while state[node] == 0:
            state[node] = 1
            path.append(node)
            node = int(heads[node])
        if state[node] == 1:
            return False
        for visited in path:
            state[visited] = 2
    return True
