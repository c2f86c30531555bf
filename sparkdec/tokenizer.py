"""Tokenizer: tokenizer.json through `tokenizers`, chat template through jinja2, EOS ids from the checkpoint."""
from __future__ import annotations

import json
from pathlib import Path

from sparkdec.errors import CheckpointError


class Tokenizer:
    def __init__(self, folder: str | Path):
        from tokenizers import Tokenizer as HFTokenizer

        folder = Path(folder).expanduser()
        if not (folder / "tokenizer.json").is_file():
            raise CheckpointError(f"{folder} has no tokenizer.json; pass token ids instead of text, "
                                  "or add the tokenizer files to the checkpoint folder")
        self._tok = HFTokenizer.from_file(str(folder / "tokenizer.json"))
        self._byte_level = type(self._tok.decoder).__name__ == "ByteLevel"  # (token_bytes maps its pieces back)
        cfg_path = folder / "tokenizer_config.json"
        self.config = json.loads(cfg_path.read_text()) if cfg_path.is_file() else {}
        self.chat_template = self.config.get("chat_template")
        self.eos_token_ids = self._eos_ids(folder)

    def _eos_ids(self, folder: Path) -> tuple[int, ...]:
        ids: list[int] = []
        gen = folder / "generation_config.json"
        if gen.is_file():
            eos = json.loads(gen.read_text()).get("eos_token_id")
            ids.extend(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        eos_tok = self.config.get("eos_token")
        if isinstance(eos_tok, dict):
            eos_tok = eos_tok.get("content")
        if eos_tok and self._tok.token_to_id(eos_tok) is not None:
            ids.append(self._tok.token_to_id(eos_tok))
        return tuple(dict.fromkeys(int(i) for i in ids))

    @property
    def vocab_size(self) -> int:
        return self._tok.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes one token stands for (byte-level BPE pieces mapped back to their bytes, which may be part of
        a character; other tokenizers through decode)."""
        piece = self._tok.id_to_token(token_id)
        if piece is not None and self._byte_level and all(c in _BYTE_OF for c in piece):
            return bytes(_BYTE_OF[c] for c in piece)
        return self.decode([token_id], skip_special_tokens=False).encode()

    @property
    def byte_level(self) -> bool:
        """Are pieces byte-level BPE's (GPT-2's printable stand-ins for bytes)?"""
        return self._byte_level

    def vocab(self) -> dict[str, int]:
        """Every piece (added tokens too) -> its id."""
        return self._tok.get_vocab(with_added_tokens=True)

    def special_ids(self) -> list[int]:
        """Ids of the special added tokens (<|im_end|> and the like)."""
        return [i for i, t in self._tok.get_added_tokens_decoder().items() if t.special]

    def token_to_id(self, token: str) -> int | None:
        return self._tok.token_to_id(token)

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True, tools: list | None = None,
                            switches: dict | None = None, template: str | None = None) -> str:
        """The prompt text of a chat. tools: OpenAI tool definitions, for templates that render them; switches: the
        template's own variables (Qwen3's enable_thinking), which cannot replace the arguments above; template: one
        to use instead of the checkpoint's."""
        template = template or self.chat_template
        if not template:
            raise CheckpointError("this checkpoint's tokenizer_config.json has no chat_template; "
                                  "send a plain prompt instead of chat messages")
        return template_env().from_string(template).render(
            **{**(switches or {}), "messages": messages, "add_generation_prompt": add_generation_prompt,
               "tools": tools, "bos_token": self.config.get("bos_token") or "",
               "eos_token": self.config.get("eos_token") or ""})


def template_env():
    """Jinja as Hugging Face renders chat templates: sandboxed (a request may bring its own template), loop controls,
    and a tojson that neither sorts keys nor escapes HTML characters (jinja's own does both, which would change the
    tools a Qwen3 prompt lists)."""
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    return env


def _tojson(value, ensure_ascii: bool = False, indent=None, separators=None, sort_keys: bool = False) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _byte_level_alphabet() -> dict[str, int]:
    """GPT-2's byte-level alphabet, inverted: each byte's printable stand-in character -> the byte."""
    printable = {*range(ord("!"), ord("~") + 1), *range(ord("\u00a1"), ord("\u00ac") + 1),
                 *range(ord("\u00ae"), ord("\u00ff") + 1)}
    out, shifted = {}, 0
    for b in range(256):
        if b in printable:
            out[chr(b)] = b
        else:  # unprintable bytes stand in as 256, 257, ... in byte order
            out[chr(256 + shifted)] = b
            shifted += 1
    return out


_BYTE_OF = _byte_level_alphabet()


def _raise(message: str):
    raise CheckpointError(f"chat template error: {message}")
