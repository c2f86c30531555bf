"""Sequence: one request's tokens, pages, sampling state, stop handling and speculative statistics."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field

from sparkdec.sampling import SamplingParams


class Status(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(slots=True)
class SpecStats:
    """Per-request acceptance statistics (AL counts the bonus token)."""

    block_size: int = 0
    rounds: int = 0
    draft_tokens: int = 0  # drafts verified
    accepted_tokens: int = 0  # drafts accepted (bonus excluded)
    accepted_per_position: list[int] = field(default_factory=list)
    verified_per_position: list[int] = field(default_factory=list)
    histogram: list[int] = field(default_factory=list)  # rounds by accepted count 0..γ
    bypassed_tokens: int = 0  # tokens decoded plainly while the bypass held speculation back (spec/bypass.py)

    def record(self, num_verified: int, num_accepted: int) -> None:
        if not self.histogram:
            self.histogram = [0] * (self.block_size + 1)
            self.accepted_per_position = [0] * self.block_size
            self.verified_per_position = [0] * self.block_size
        self.rounds += 1
        self.draft_tokens += num_verified
        self.accepted_tokens += num_accepted
        self.histogram[num_accepted] += 1
        for j in range(num_verified):
            self.verified_per_position[j] += 1
            self.accepted_per_position[j] += int(j < num_accepted)

    def copy(self) -> "SpecStats":
        return SpecStats(self.block_size, self.rounds, self.draft_tokens, self.accepted_tokens,
                         list(self.accepted_per_position), list(self.verified_per_position), list(self.histogram),
                         self.bypassed_tokens)

    @staticmethod
    def merged(stats: list["SpecStats"]) -> "SpecStats":
        """The statistics of several requests (one response's choices) as if they were one."""
        out = SpecStats(max((s.block_size for s in stats), default=0))
        for s in stats:
            out.rounds += s.rounds
            out.draft_tokens += s.draft_tokens
            out.accepted_tokens += s.accepted_tokens
            out.bypassed_tokens += s.bypassed_tokens
            for name in ("accepted_per_position", "verified_per_position", "histogram"):
                total, add = getattr(out, name), getattr(s, name)
                total.extend([0] * (len(add) - len(total)))
                for j, v in enumerate(add):
                    total[j] += v
        return out

    def as_dict(self) -> dict:
        rates = [a / v if v else None for a, v in zip(self.accepted_per_position, self.verified_per_position)]
        return {
            "rounds": self.rounds, "num_draft_tokens": self.draft_tokens, "num_accepted_tokens": self.accepted_tokens,
            "mean_acceptance_length": (self.accepted_tokens + self.rounds) / self.rounds if self.rounds else None,
            "acceptance_rate": self.accepted_tokens / self.draft_tokens if self.draft_tokens else None,
            "per_position_acceptance": rates, "accepted_histogram": list(self.histogram),
            "bypassed_tokens": self.bypassed_tokens,
        }


@dataclass(slots=True, eq=False)  # identity equality: the scheduler removes sequences from lists
class Sequence:
    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    seed: int
    eos_ids: tuple[int, ...]
    max_model_len: int
    output_ids: list[int] = field(default_factory=list)
    status: Status = Status.WAITING
    num_computed: int = 0  # positions with valid target KV (and draft context KV)
    block_table: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    spec: SpecStats = field(default_factory=SpecStats)
    rounds: list[dict] | None = None  # per-round trace records when tracing
    text: str = ""  # detokenised output (stop strings already cut)
    text_base: str = ""  # text of output_ids[:text_pos], which ends on a whole character
    text_pos: int = 0
    stop_from: int = 0  # stop strings are looked for from this index of text (after min_tokens' tokens)
    arrival: float = 0.0
    first_token_time: float | None = None
    finish_time: float | None = None
    prefill_time: float = 0.0
    # per output token when params.logprobs is set: (its id, its log-probability, ((token id, log-probability), ...)
    # of the params.logprobs most likely tokens), spec/logprobs.py
    logprobs: list[tuple[int, float, tuple]] | None = None
    # when params.prompt_logprobs is set: the same per prompt token, the first one's (id, None, ()): no row predicts it
    prompt_logprobs: list[tuple[int, float | None, tuple]] | None = None
    preemptions: int = 0  # times the scheduler took this sequence's pages back (engine/scheduler.py)
    page_keys: list[bytes] | None = None  # its prompt's full pages' prefix keys (engine/prefix_cache.py)
    registered_pages: int = 0  # its table's first pages registered in the prefix cache
    bad_words: tuple[tuple[int, ...], ...] = ()  # params.bad_words as token sequences (Engine.add_request)
    guide: object | None = None  # guided decoding's matcher (grammar_matcher.Matcher), advanced by each committed token
    # this round's guided rows go unmasked, their tokens checked after the read (spec/processed.checked; set by the
    # round for each decoding sequence: greedy, or drawn on the device from an unfiltered or top-k distribution)
    grammar_checked: bool = False
    # checked guided rounds: a running share of those whose tokens the grammar refused (spec/processed.failed_checks),
    # from 1; its rounds chain their next propose only while it is low (a chained round that fails commits less)
    check_failures: float = 1.0
    # a top-k guided draw checked (spec/processed.keeps_checked): rounds still masked after a refusal, and how many the
    # next refusal masks (1, 2, 4 .. processed.MAX_BACKOFF; back to 1 after a passing check)
    masked_rounds: int = 0
    backoff: int = 1
    history: object | None = None  # penalties.History: its prompt and output counted on the device, for penalties
    bypass: object | None = None  # spec/bypass.BypassState: whether speculation pays for it, made on first use
    error: str | None = None  # why the request ended with finish_reason "error" (see fail)
    error_own: bool = True  # the request's own doing (a 400 on the server), else the server's (500)

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.output_ids)

    @property
    def context_len(self) -> int:
        """Positions a prefill computes: the prompt; after a preemption, every token but the anchor (the next
        round's first row)."""
        return self.num_tokens - 1 if self.output_ids else len(self.prompt_ids)

    @property
    def prefill_done(self) -> bool:  # (context_len inlined: the scheduler asks it of every sequence every step)
        out = len(self.output_ids)
        return self.num_computed >= (len(self.prompt_ids) + out - 1 if out else len(self.prompt_ids))

    def tokens(self, a: int, b: int) -> list[int]:
        """Token ids at positions a .. b - 1 (prompt, then output)."""
        n = len(self.prompt_ids)
        if b <= n:
            return self.prompt_ids[a:b]
        return self.prompt_ids[a:n] + self.output_ids[max(a - n, 0):b - n]

    @property
    def anchor(self) -> int:
        return self.output_ids[-1]

    @property
    def anchor_position(self) -> int:
        return self.num_tokens - 1

    @property
    def finished(self) -> bool:
        return self.status is Status.FINISHED

    def token_at(self, position: int) -> int:
        n = len(self.prompt_ids)
        return self.prompt_ids[position] if position < n else self.output_ids[position - n]

    def room(self) -> int:
        """How many more tokens this sequence may still emit (max_tokens and the context window)."""
        return min(self.params.max_tokens - len(self.output_ids), self.max_model_len - self.num_tokens)

    def fail(self, message: str, own: bool = True) -> None:
        """End this request with an error (the others go on); own: the request's doing, not the server's."""
        self.finish_reason, self.error, self.error_own = "error", message, own

    def append(self, token: int) -> bool:
        """Commit one token; returns True when it ends the sequence (EOS, stop id, length)."""
        if self.guide is not None and not self.guide.accept(token):  # (not committed: the grammar's own mask allowed it)
            fault = getattr(self.guide, "fault", None)  # (xgrammar failed in it: grammar_matcher._guarded)
            self.fail(fault or f"guided decoding: the grammar refused token {token}, which its mask allowed", own=False)
            return True
        self.output_ids.append(token)
        p = self.params
        if token in p.stop_token_ids or (not p.ignore_eos and token in self.eos_ids):
            self.finish_reason = "stop"
        elif self.room() <= 0:
            self.finish_reason = "length"
        return self.finish_reason is not None
