"""Where the samplers' uniforms come from: one generator for the batch, or one per sentence.

``generator`` is ``None`` (torch's default generator), a ``torch.Generator`` for the whole
batch, or a sequence of B generators, one per sentence. With one per sentence, the uniforms
of sentence b are drawn from its own generator in an order that depends on that sentence
alone (its length and the number of samples), never on the batch around it: a sentence gets
the same trees alone or in any batch, and a caller can batch sentences it must seed one by
one. (The same trees up to floating-point rounding: the conditionals of a padded batch may
differ in the last bit, which changes a draw only when a uniform falls within ~1e-15 of a
category boundary.) Only samplers that use a fixed number of uniforms per sentence can do
this: ``colbourn`` (blocks of samples: :func:`block_seeds`) and ``sbs`` (one block per word:
:func:`per_sentence_uniforms`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence, Union

import torch
from torch import Tensor

if TYPE_CHECKING:
    from typing_extensions import TypeIs

Randomness = Union[torch.Generator, Sequence[torch.Generator], None]

#: The methods that accept one generator per sentence.
PER_SENTENCE_METHODS = ("colbourn", "sbs", "auto")


def per_sentence(generator: Randomness) -> TypeIs[Sequence[torch.Generator]]:
    """Whether ``generator`` is a sequence of per-sentence generators."""
    return isinstance(generator, (list, tuple))


def shared(generator: Randomness) -> torch.Generator | None:
    """``generator`` for a method that draws from one generator for the whole batch (a
    per-sentence sequence is refused for such methods by :func:`check`)."""
    if per_sentence(generator):
        raise ValueError(f"one generator per sentence is supported by the methods {PER_SENTENCE_METHODS} only")
    return generator


def check(dist, generator: Randomness, method: str) -> None:
    """Clear errors for a generator on the wrong device, or a per-sentence sequence of the
    wrong length, of something else than generators, or for a method that cannot use it."""
    generators = list(generator) if per_sentence(generator) else [generator]
    if per_sentence(generator):
        batch = dist.scores.shape[0]
        if method not in PER_SENTENCE_METHODS:
            raise ValueError(
                f"one generator per sentence is supported by the methods {PER_SENTENCE_METHODS}, "
                f"not {method!r} (its walks use a random number of uniforms)"
            )
        if len(generators) != batch:
            raise ValueError(f"got {len(generators)} per-sentence generators for a batch of {batch} sentences")
    for item in generators:
        if item is None:
            if per_sentence(generator):
                raise ValueError("a per-sentence generator is None; give a torch.Generator for every sentence")
            continue
        if not isinstance(item, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator or a sequence of them, got {type(item).__name__}")
        if item.device.type != dist.scores.device.type:
            raise ValueError(
                f"generator is on {item.device} but the scores are on {dist.scores.device}; "
                "create the torch.Generator on the scores' device."
            )


def per_sentence_uniforms(
    generators: Sequence[torch.Generator], sizes: Sequence[tuple[int, ...]], shape: tuple[int, ...], like: Tensor
) -> Tensor:
    """(B, *shape) uniforms: sentence b's leading ``sizes[b]`` block from its own generator, 0
    elsewhere (padding, whose draws are never used). An empty size draws nothing."""
    out = torch.zeros((len(generators), *shape), dtype=like.dtype, device=like.device)
    for b, (generator, size) in enumerate(zip(generators, sizes)):
        if all(s > 0 for s in size):
            block = tuple(slice(0, s) for s in size)
            out[b][block] = torch.rand(size, dtype=like.dtype, device=like.device, generator=generator)
    return out


#: Samples per block of a sentence's uniforms in Colbourn's sampler (see :func:`block_seeds`).
SAMPLE_BLOCK = 256


def block_seeds(generators: Sequence[torch.Generator], num_samples: int) -> list[list[int]]:
    """Per sentence, the seeds of its blocks of :data:`SAMPLE_BLOCK` samples: block i holds
    samples i * SAMPLE_BLOCK onwards and draws from a generator seeded by the i-th seed. A
    block can then be drawn whole in whichever chunk of samples needs it (chunks follow the
    batch's memory), and drawn again, identically, if two chunks share it."""
    blocks = -(-num_samples // SAMPLE_BLOCK)
    return [
        torch.randint(2**62, (blocks,), generator=generator, device=generator.device).tolist()
        for generator in generators
    ]


def sample_block_uniforms(
    seeds: Sequence[Sequence[int]],
    lengths: Sequence[int],
    num_samples: int,
    start: int,
    stop: int,
    width: int,
    like: Tensor,
) -> Tensor:
    """(B, stop - start, width) uniforms of samples start..stop-1: sentence b, sample s, word m
    reads entry (s mod SAMPLE_BLOCK, m - 1) of its block s // SAMPLE_BLOCK, an (rows, n_b)
    draw; 0 past the sentence's words."""
    out = torch.zeros((len(seeds), stop - start, width), dtype=like.dtype, device=like.device)
    for b, (sentence_seeds, n) in enumerate(zip(seeds, lengths)):
        for block in range(start // SAMPLE_BLOCK, (stop - 1) // SAMPLE_BLOCK + 1):
            first, last = block * SAMPLE_BLOCK, min((block + 1) * SAMPLE_BLOCK, num_samples)
            generator = torch.Generator(device=like.device).manual_seed(sentence_seeds[block])
            values = torch.rand((last - first, n), dtype=like.dtype, device=like.device, generator=generator)
            lo, hi = max(first, start), min(last, stop)
            out[b, lo - start : hi - start, :n] = values[lo - first : hi - first]
    return out
