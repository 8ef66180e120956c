"""A tiny randomly initialised BERT saved as a local sentence encoder directory (no network)."""

import torch

WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "dog", "barks", ".", "a", "cat", "sleeps", "here"]


def tiny_encoder(path, hidden=8, seed=0):
    """A randomly initialised (by ``seed``) one-layer BERT and its word-piece tokenizer, saved in ``path``."""
    import transformers

    path.mkdir(parents=True, exist_ok=True)
    (path / "vocab.txt").write_text("\n".join(WORDS) + "\n", encoding="utf-8")
    tokenizer = transformers.BertTokenizerFast(vocab_file=str(path / "vocab.txt"), do_lower_case=True)
    torch.manual_seed(seed)
    config = transformers.BertConfig(
        vocab_size=len(WORDS),
        hidden_size=hidden,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=16,
        max_position_embeddings=64,
    )
    model = transformers.BertModel(config).eval()
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return model, tokenizer
