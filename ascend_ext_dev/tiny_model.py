"""A tiny Llama for vLLM's CPU build, made offline: a config of a chosen shape and a local BPE.

No model hub is reachable from these machines, so tests, ``make bench`` and ``make demo``
build the model directory at run time: ``config.json`` (a ``ModelShape``: ``SMALL`` is hidden
256, 4 heads of 64, 2 layers, overhead-bound; ``COMPUTE`` is hidden 1024, 16 heads, 4 layers,
where prefill dominates a request as on a real deployment),
``tokenizer.json`` trained with the ``tokenizers`` library on a built-in English corpus, and a
``tokenizer_config.json`` with a chat template. vLLM serves it with ``--load-format dummy``
(random weights): the tokens are gibberish, but prompt lengths, KV bytes and timings are real.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # tokenizers comes with the engine extra, imported when a model is built
    from tokenizers import Tokenizer

VOCAB_SIZE = 2048
SPECIAL = ["<unk>", "<s>", "</s>"]
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


@dataclass(frozen=True, slots=True)
class ModelShape:
    """The Llama's size: what prefill costs and how many bytes of KV each token holds."""

    hidden: int = 256
    layers: int = 2
    heads: int = 4
    intermediate: int = 512

    def __post_init__(self) -> None:
        if min(self.hidden, self.layers, self.heads, self.intermediate) <= 0:
            raise ValueError(f"model shape sizes must be positive, got {self}")
        if self.hidden % self.heads:
            raise ValueError(f"hidden {self.hidden} is not a multiple of heads {self.heads}")

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V of every layer, bf16 (2 bytes), no GQA (kv heads = heads)."""
        return 2 * self.layers * self.hidden * 2

    def chunk_mib(self, chunk_tokens: int) -> float:
        """MiB of KV in one LMCache chunk of ``chunk_tokens`` tokens."""
        return self.kv_bytes_per_token * chunk_tokens / 2**20

    def label(self) -> str:
        return f"{self.hidden}x{self.layers}"


#: The tests' and the demo's model: cheap to start, every request overhead-bound (~80 ms).
SMALL = ModelShape()
#: The benchmark's: a 2048-token prefill costs seconds on 2 cores, a chunk's KV 4 MiB.
COMPUTE = ModelShape(hidden=1024, layers=4, heads=16, intermediate=2816)


_CORPUS = """
The agent reads the repository, runs the tests and writes a short report for the user.
Every session keeps a system prompt, the tool results and the growing conversation.
A key value cache holds the attention keys and values of tokens the model has already seen.
When the next turn arrives the engine loads those chunks from memory instead of recomputing.
Chunks that no live session references can be evicted; shared prefixes stay in memory.
The daemon counts references per chunk hash and tells the cache which ones are dead.
Tools return JSON documents, logs, stack traces, diffs and lists of files with line numbers.
def main(argv): parse the arguments, open the file, read each line and print the result.
SELECT name, count(*) FROM sessions WHERE state = 'open' GROUP BY name ORDER BY 2 DESC;
Error: connection refused while contacting the server at port 8000; retrying in 2 seconds.
The quick brown fox jumps over the lazy dog while the five boxing wizards jump quickly.
Numbers like 0 1 2 3 4 5 6 7 8 9 10 42 100 256 1024 4096 appear in configs and logs.
"""


def _train_tokenizer() -> Tokenizer:
    """A byte-level BPE trained on _CORPUS (deterministic: same input, same merges)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    lines = [line for line in _CORPUS.splitlines() if line.strip()]
    tok.train_from_iterator(lines * 4, trainer=trainer)
    return tok


def _config(vocab_size: int, max_len: int, shape: ModelShape) -> dict[str, Any]:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": shape.hidden,
        "intermediate_size": shape.intermediate,
        "num_hidden_layers": shape.layers,
        "num_attention_heads": shape.heads,
        "num_key_value_heads": shape.heads,
        "head_dim": shape.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": max_len,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "vocab_size": vocab_size,
        "tie_word_embeddings": False,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": "bfloat16",
    }


def build(model_dir: str | Path, max_len: int = 4096, shape: ModelShape = SMALL) -> Path:
    """Write the model directory (idempotent: a complete one of the same shape is kept; one of
    another shape gets the new config, keeping its tokenizer)."""
    path = Path(model_dir)
    config, tokenizer = path / "config.json", path / "tokenizer.json"
    if config.exists() and tokenizer.exists():
        from tokenizers import Tokenizer

        want = _config(Tokenizer.from_file(str(tokenizer)).get_vocab_size(), max_len, shape)
        if json.loads(config.read_text()) != want:
            config.write_text(json.dumps(want, indent=1))
        return path
    path.mkdir(parents=True, exist_ok=True)
    tok = _train_tokenizer()
    tok.save(str(tokenizer))
    vocab = tok.get_vocab_size()
    (path / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": "<s>",
                "eos_token": "</s>",
                "unk_token": "<unk>",
                "model_max_length": max_len,
                "chat_template": CHAT_TEMPLATE,
                "add_bos_token": True,
                "clean_up_tokenization_spaces": False,
            },
            indent=1,
        )
    )
    (path / "special_tokens_map.json").write_text(
        json.dumps({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"})
    )
    (path / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": 2}))
    # Written last: its presence marks a complete directory.
    config.write_text(json.dumps(_config(vocab, max_len, shape), indent=1))
    return path
