"""Build a tiny Llama-architecture model directory for vLLM, locally: nothing from a model hub.

Where it sits: serving/vllm (the real-vLLM harness). Run with the vLLM virtualenv's Python, which
has the ``tokenizers`` library (a vLLM dependency); the weights are vLLM's ``--load-format dummy``
random values, so the directory holds only what vLLM reads besides weights:

- ``config.json``: ``LlamaForCausalLM``, 2 layers, hidden 256, 4 heads, the tokenizer's vocabulary (<= 4096), float32
  (the CPU build's portable dtype; this machine kind has no AVX-512/AMX for bf16),
  ``max_position_embeddings`` = the context limit the server is started with.
- ``tokenizer.json`` + ``tokenizer_config.json``: a byte-level BPE trained with ``tokenizers`` on
  the given local text, Llama-3 style special tokens, and a Llama-3 style chat template.
- ``generation_config.json``: eos/bos ids.

    python serving/vllm/tiny_model.py OUT_DIR CORPUS_FILE [CORPUS_FILE ...]

Training is deterministic for the same corpus (same vocabulary, same ids), so prompt token
counts are stable between runs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

VOCAB_SIZE = 4096
MAX_MODEL_LEN = 1024
SPECIAL_TOKENS = ("<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                  "<|eot_id|>")
BOS, EOS = "<|begin_of_text|>", "<|eot_id|>"
# Llama-3's chat template, shortened: a header per message, <|eot_id|> after each, and the
# assistant header when a generation prompt is asked for.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)


def llama_config(vocab_size: int, bos_id: int, eos_id: int, max_model_len: int = MAX_MODEL_LEN) -> dict:
    """``config.json`` of the tiny Llama (transformers' LlamaConfig field names)."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "head_dim": 64,
        "hidden_act": "silu",
        "max_position_embeddings": max_model_len,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "vocab_size": vocab_size,
        "bos_token_id": bos_id,
        "eos_token_id": eos_id,
    }


def train_tokenizer(texts: list[str], vocab_size: int = VOCAB_SIZE):
    """A byte-level BPE ``tokenizers.Tokenizer`` trained on ``texts`` (deterministic)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def build(out_dir: Path, texts: list[str], max_model_len: int = MAX_MODEL_LEN) -> Path:
    """Write the model directory into ``out_dir`` (created) and return it.

    Raises ValueError when ``texts`` is empty (a tokenizer needs something to learn from).
    """
    if not any(t.strip() for t in texts):
        raise ValueError("the tokenizer corpus is empty")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = train_tokenizer(texts)
    tok.save(str(out / "tokenizer.json"))
    bos_id, eos_id = tok.token_to_id(BOS), tok.token_to_id(EOS)
    (out / "config.json").write_text(json.dumps(llama_config(tok.get_vocab_size(), bos_id, eos_id, max_model_len),
                                                indent=2))
    (out / "generation_config.json").write_text(json.dumps({"bos_token_id": bos_id, "eos_token_id": eos_id}))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOS,
        "pad_token": "<|end_of_text|>",
        "model_max_length": max_model_len,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }, indent=2))
    (out / "special_tokens_map.json").write_text(json.dumps({"bos_token": BOS, "eos_token": EOS,
                                                            "pad_token": "<|end_of_text|>"}))
    return out


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: tiny_model.py OUT_DIR CORPUS_FILE [CORPUS_FILE ...]", file=sys.stderr)
        return 2
    texts = [Path(p).read_text(encoding="utf-8") for p in argv[1:]]
    print(build(Path(argv[0]), texts))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
