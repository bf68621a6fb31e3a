#!/usr/bin/env python3
"""Generate a tiny random-weight Llama in Hugging Face format that vLLM serves:
config, safetensors weights, and a byte-level BPE tokenizer trained here on
generated text, with a ChatML chat template.  No download needed.

Usage: python make_tiny_hf.py OUT_DIR      (needs torch, transformers, tokenizers:
       the rig runs it with the vLLM build's venv, which has all three)

Deterministic: the corpus and the weights come from fixed seeds.  The tokenizer
spends several tokens per English word (vocabulary 1024).
"""

import random
import sys

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

VOCAB = 1024
SPECIAL = ["<unk>", "<s>", "</s>", "<pad>", "<|im_start|>", "<|im_end|>"]
WORDS = """the a an of to and in is it you that he was for on are with as I his they be at one
have this from or had by hot word but what some we can out other were all there when up use
your how said each she which do their time if will way about many then them write would like so
these her long make thing see him two has look more day could go come did number sound no most
people my over know water than call first who may down side been now find hello world assistant
user system model test token stream request response server engine cache""".split()
CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def tokenizer() -> PreTrainedTokenizerFast:
    """Byte-level BPE trained on random sentences of WORDS and the numbers 0..999."""
    rng = random.Random(0)
    corpus = [
        " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 30))) + rng.choice(".?!")
        for _ in range(4000)
    ]
    corpus += [str(i) for i in range(1000)]
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="<|im_end|>",
        unk_token="<unk>",
        pad_token="<pad>",
        additional_special_tokens=["<|im_start|>", "<|im_end|>"],
        model_max_length=2048,
    )
    hf_tok.chat_template = CHATML
    return hf_tok


def main(out: str) -> None:
    hf_tok = tokenizer()
    hf_tok.save_pretrained(out)
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=len(hf_tok),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        bos_token_id=hf_tok.bos_token_id,
        eos_token_id=hf_tok.eos_token_id,
        pad_token_id=hf_tok.pad_token_id,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    model = LlamaForCausalLM(cfg)
    model.generation_config.eos_token_id = hf_tok.eos_token_id
    model.save_pretrained(out, safe_serialization=True)
    params = sum(p.numel() for p in model.parameters())
    print(f"saved {out}: vocab {len(hf_tok)}, {params} parameters")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: make_tiny_hf.py OUT_DIR")
    main(sys.argv[1])
