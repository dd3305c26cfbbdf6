"""A randomly initialized causal LM with a word-level tokenizer, built locally (no downloads): tiny by default, for
tests and for exercising a training run end to end on CPU; larger sizes for throughput runs on a GPU."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

SPECIAL_TOKENS = ("<pad>", "<s>", "</s>", "<unk>")


def build_tiny_model(
    folder: Path,
    words: Sequence[str],
    *,
    hidden_size: int = 32,
    layers: int = 2,
    heads: int = 4,
    intermediate_size: int | None = None,
    seed: int = 0,
) -> Path:
    """Write a Llama-architecture model and its tokenizer (one token per whitespace-separated word of ``words``) to
    ``folder``, loadable by AutoModelForCausalLM / AutoTokenizer.from_pretrained; returns the folder."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate(dict.fromkeys([*SPECIAL_TOKENS, *words]))}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]  # transformers' tokenizers are untyped
        tokenizer_object=backend, pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    config = LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size or 2 * hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=4096,
        pad_token_id=vocab["<pad>"],
        bos_token_id=vocab["<s>"],
        eos_token_id=vocab["</s>"],
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
