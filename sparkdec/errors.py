"""User-facing error types: one per kind of mistake, each message says what is wrong and what to do."""
from __future__ import annotations


class SparkdecError(Exception):
    """Base class of every error sparkdec raises for a user mistake."""


class ModelNotFoundError(SparkdecError):
    """A model or drafter path does not exist or lacks config.json."""


class UnsupportedArchitectureError(SparkdecError):
    """config.json names an architecture or format sparkdec does not run."""


class CheckpointError(SparkdecError):
    """Tensors missing, unexpected or of the wrong shape, or a malformed config."""


class DraftMismatchError(SparkdecError):
    """A drafter does not fit its target (hidden size, vocabulary, layers, taps)."""


class PromptTooLongError(SparkdecError):
    """A prompt does not fit the model's context window."""


class InvalidSamplingParamsError(SparkdecError, ValueError):
    """A sampling parameter is out of range."""


class InvalidPromptError(SparkdecError, ValueError):
    """A prompt is empty or holds token ids outside the vocabulary."""


class CapacityError(SparkdecError):
    """The KV cache cannot hold a request, even when it runs alone."""
