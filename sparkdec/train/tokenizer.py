"""Byte-level BPE tokenizer (Qwen-style pre-tokenizer, no normalizer, so decode(encode(s)) == s) trained on a
corpus's train split, saved with tokenizer_config.json (ChatML template) and generation_config.json."""
from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from sparkdec.errors import SparkdecError
from sparkdec.train.corpus import CATEGORIES, iter_documents

EOS_TOKEN = "<|endoftext|>"
IM_START_TOKEN = "<|im_start|>"
IM_END_TOKEN = "<|im_end|>"
MASK_TOKEN = "<|mask|>"
SPECIAL_TOKENS = (EOS_TOKEN, IM_START_TOKEN, IM_END_TOKEN, MASK_TOKEN)
# Qwen2/Qwen3 split pattern: single digits, letters with one leading non-letter, whitespace runs kept whole.
SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
    r"|\s+(?!\S)|\s+"
)
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


class TokenizerSpecialTokenError(SparkdecError):
    """A tokenizer lacks one of sparkdec's special tokens or maps it to several ids."""


@dataclass(frozen=True, slots=True)
class SpecialTokenIds:
    eos: int
    pad: int
    im_start: int
    im_end: int
    mask: int


def special_token_ids(tokenizer: Tokenizer) -> SpecialTokenIds:
    """Ids of <|endoftext|> (also pad), <|im_start|>, <|im_end|> and <|mask|>; each must be one token."""
    ids = {}
    for token in SPECIAL_TOKENS:
        idx = tokenizer.token_to_id(token)
        if idx is None or tokenizer.encode(token, add_special_tokens=False).ids != [idx]:
            raise TokenizerSpecialTokenError(f"tokenizer has no single token for {token}: retrain it with "
                                             "sparkdec.train.tokenizer.train_tokenizer")
        ids[token] = idx
    return SpecialTokenIds(eos=ids[EOS_TOKEN], pad=ids[EOS_TOKEN], im_start=ids[IM_START_TOKEN],
                           im_end=ids[IM_END_TOKEN], mask=ids[MASK_TOKEN])


def new_tokenizer() -> Tokenizer:
    """An untrained byte-level BPE tokenizer with the Qwen split pattern and no prefix space."""
    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def _train_texts(corpus_dir: Path) -> Iterator[str]:
    for record in iter_documents(corpus_dir, "train"):
        yield record["text"]


def train_tokenizer(corpus_dir: str | os.PathLike[str], out_dir: str | os.PathLike[str], vocab_size: int = 8192,
                    *, model_max_length: int = 4096) -> Tokenizer:
    """Train on corpus_dir/train.jsonl; vocab_size counts the 256 bytes, merges and the 4 special tokens."""
    tok = new_tokenizer()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                                  special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_train_texts(Path(corpus_dir)), trainer=trainer)
    save_tokenizer(tok, out_dir, model_max_length=model_max_length)
    return tok


def save_tokenizer(tok: Tokenizer, out_dir: str | os.PathLike[str], *, model_max_length: int = 4096) -> None:
    """Write tokenizer.json, tokenizer_config.json and generation_config.json into out_dir."""
    ids = special_token_ids(tok)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    _write_json(out / "tokenizer_config.json", _tokenizer_config(tok, model_max_length))
    _write_json(out / "generation_config.json", {
        "bos_token_id": ids.eos, "pad_token_id": ids.pad, "eos_token_id": [ids.eos, ids.im_end],
    })


def _tokenizer_config(tok: Tokenizer, model_max_length: int) -> dict:
    added = {str(tok.token_to_id(t)): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                                       "single_word": False, "special": True} for t in SPECIAL_TOKENS}
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "added_tokens_decoder": added,
        "bos_token": None,
        "eos_token": EOS_TOKEN,
        "pad_token": EOS_TOKEN,
        "unk_token": None,
        "mask_token": MASK_TOKEN,
        "additional_special_tokens": [IM_START_TOKEN, IM_END_TOKEN],
        "add_bos_token": False,
        "add_prefix_space": False,
        "clean_up_tokenization_spaces": False,
        "split_special_tokens": False,
        "errors": "replace",
        "model_max_length": model_max_length,
        "chat_template": CHAT_TEMPLATE,
    }


def _write_json(path: Path, obj: dict) -> None:
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def load_tokenizer(folder: str | os.PathLike[str]) -> Tokenizer:
    return Tokenizer.from_file(str(Path(folder) / "tokenizer.json"))


def tokens_per_byte(tok: Tokenizer, corpus_dir: str | os.PathLike[str], split: str = "heldout") -> dict[str, float]:
    """Tokens per UTF-8 byte of one split, per category."""
    stats = {}
    for category in CATEGORIES:
        texts = [r["text"] for r in iter_documents(corpus_dir, split, category)]
        n_tokens = sum(len(e.ids) for e in tok.encode_batch(texts, add_special_tokens=False))
        n_bytes = sum(len(t.encode("utf-8")) for t in texts)
        stats[category] = n_tokens / max(n_bytes, 1)
    return stats


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Train the byte-level BPE tokenizer on a corpus.")
    parser.add_argument("corpus_dir")
    parser.add_argument("out_dir")
    parser.add_argument("--vocab-size", type=int, default=8192)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    tok = train_tokenizer(args.corpus_dir, args.out_dir, args.vocab_size)
    report = {"seconds": round(time.perf_counter() - start, 1), "vocab_size": tok.get_vocab_size(),
              "special_token_ids": asdict(special_token_ids(tok)),
              "heldout_tokens_per_byte": tokens_per_byte(tok, args.corpus_dir)}
    print(json.dumps(report))


if __name__ == "__main__":
    main()
