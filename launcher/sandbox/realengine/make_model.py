"""Generates the sandbox's tiny Llama (run by the real-engine image's own python at build time).

No weights can be downloaded here, so the model is made: transformers ``LlamaConfig`` (hidden
256, intermediate 512, 4 layers, 4 heads, 2 KV heads: head_dim 64, a size vLLM's CPU attention
kernel supports -- 16 is refused at the first request), random init under a fixed seed, saved as
bf16 safetensors (~2.4 M parameters); a ``tokenizers`` WordLevel tokenizer over a fixed word list
with bos/eos/pad/unk and a one-line chat template.  Same inputs, same files.

Usage: ``python3 make_model.py OUT_DIR``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch  # type: ignore[import-not-found]  # these three live in the image only
from tokenizers import Tokenizer, models, pre_tokenizers  # type: ignore[import-not-found]
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast  # type: ignore[import-not-found]

SEED = 20261201
SPECIAL = ("<unk>", "<s>", "</s>", "<pad>")
WORDS = (
    "system user assistant : . , ? ! the a an is are was be to of and in on at for with from by "
    "fleet host rank engine model token stream router replica answer hello hi what who where when "
    "how why yes no one two three four five six seven eight nine ten red green blue cpu gpu node "
    "port health ready drain restart serve request reply fast slow up down"
).split()
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }} : {{ m['content'] }} . {% endfor %}"
    "{% if add_generation_prompt %}assistant : {% endif %}"
)


def main(out: Path) -> None:
    vocab = {w: i for i, w in enumerate((*SPECIAL, *WORDS))}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<pad>"
    )
    fast.chat_template = CHAT_TEMPLATE
    config = LlamaConfig(
        vocab_size=len(vocab), hidden_size=256, intermediate_size=512, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
        bos_token_id=vocab["<s>"], eos_token_id=vocab["</s>"], pad_token_id=vocab["<pad>"],
        torch_dtype="bfloat16", tie_word_embeddings=False,
    )  # fmt: skip
    torch.manual_seed(SEED)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    fast.save_pretrained(out)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
