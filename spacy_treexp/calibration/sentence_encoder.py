"""The sentence encoder of the opt-in out-of-domain model (issue 21, part 4).

A local Hugging Face encoder directory (all-MiniLM-L6-v2 for the shipped pipeline's opt-in
model, ``NoveltyReference.encoder_domain``) embeds each sentence's text as the mean of its
last hidden states over the text's word pieces, L2-normalised (the pooling sentence-transformers
uses for that model). The model is read with ``local_files_only``: nothing is fetched. It needs
``transformers`` (``pip install "spacy-treexp[encoder]"``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence, Union

import numpy
import torch

from spacy_treexp.calibration.map import CalibrationError

#: Word pieces read of each sentence (all-MiniLM-L6-v2's own limit), and texts per forward pass.
MAX_LENGTH = 256
BATCH_SIZE = 64
#: Texts of two lengths embedded once when the encoder is read (a padded batch); the embedding of
#: the last is the encoder's fingerprint (:attr:`SentenceEncoder.fingerprint`).
PROBE = ("a", "a sentence")
#: Least cosine between a fingerprint and the one a model was fitted with for the same encoder
#: (float rounding across machines moves it by ~1e-6; another encoder's is far lower).
SAME_ENCODER_COSINE = 0.999


class SentenceEncoder:
    """The encoder in ``path`` (a directory with its config, weights and tokenizer) and its
    :meth:`embed`; :class:`~spacy_treexp.calibration.map.CalibrationError` where it cannot be
    read, cannot embed a padded batch (not an encoder of the BERT kind) or ``transformers`` is
    missing."""

    def __init__(self, path: Union[str, Path]) -> None:
        try:
            from transformers import AutoModel, AutoTokenizer
        except ImportError as e:
            raise CalibrationError(
                f'sentence encoder: needs transformers (pip install "spacy-treexp[encoder]"): {e}'
            ) from e
        self.path = Path(path)
        if not self.path.is_dir():
            raise CalibrationError(f"sentence encoder: {self.path} is not a directory")
        try:
            self.tokenizer: Any = AutoTokenizer.from_pretrained(str(self.path), local_files_only=True)
            self.model: Any = AutoModel.from_pretrained(str(self.path), local_files_only=True).eval()
        except (OSError, ValueError) as e:
            raise CalibrationError(f"sentence encoder: cannot read the model in {self.path} ({e})") from e
        try:  # a model this pooling cannot run (no padding token, a decoder's inputs): said now, not at a Doc
            probe = self.embed(PROBE)
        except (AttributeError, KeyError, RuntimeError, TypeError, ValueError) as e:
            raise CalibrationError(
                f"sentence encoder: the model in {self.path} cannot embed a batch of texts as an encoder of the "
                f"BERT kind (all-MiniLM-L6-v2's) does: {type(e).__name__}: {e}"
            ) from e
        #: The embedding of ``PROBE[-1]``: which encoder this is (a model fitted on another
        #: encoder's embeddings of the same width would read this one's wrongly).
        self.fingerprint: numpy.ndarray = probe[-1]

    def is_fitted_encoder(self, fingerprint: Sequence[float]) -> bool:
        """Whether ``fingerprint`` (stored with a model fitted on an encoder's embeddings) is
        this encoder's, up to float rounding (cosine ≥ :data:`SAME_ENCODER_COSINE`)."""
        stored = numpy.asarray(fingerprint, dtype=numpy.float64)
        if stored.shape != self.fingerprint.shape:
            return False
        norm = float(numpy.linalg.norm(stored)) * float(numpy.linalg.norm(self.fingerprint))
        return norm > 0 and float(stored @ self.fingerprint) / norm >= SAME_ENCODER_COSINE

    @property
    def width(self) -> int:
        """The width of an embedding."""
        return int(self.model.config.hidden_size)

    def embed(self, texts: Sequence[str]) -> numpy.ndarray:
        """``(len(texts), width)`` float64: each text's mean-pooled, unit-length embedding
        (passes over texts of similar length: less padding, the same embeddings)."""
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = [numpy.zeros((0, self.width))]
        with torch.inference_mode():
            for start in range(0, len(texts), BATCH_SIZE):
                batch = self.tokenizer(
                    [texts[i] for i in order[start : start + BATCH_SIZE]],
                    padding=True,
                    truncation=True,
                    max_length=MAX_LENGTH,
                    return_tensors="pt",
                )
                hidden = self.model(**batch).last_hidden_state
                mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                out.append(torch.nn.functional.normalize(pooled, p=2, dim=1).double().numpy())
        embeddings = numpy.empty((len(texts), self.width))
        embeddings[order] = numpy.concatenate(out)
        return embeddings
