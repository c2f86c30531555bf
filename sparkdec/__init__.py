"""sparkdec: lossless DSpark speculative decoding for Qwen3-class models."""
from __future__ import annotations

from sparkdec.guided import Guided
from sparkdec.sampling import SamplingParams

__all__ = ["LLM", "SamplingParams", "Guided"]


def __getattr__(name: str):
    if name == "LLM":
        from sparkdec.llm import LLM

        return LLM
    raise AttributeError(name)
