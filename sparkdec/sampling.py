"""SamplingParams and the sampler: greedy, temperature, top-k, top-p, with noise keyed on (seed, position)."""
from __future__ import annotations

import random
from dataclasses import dataclass, field

import torch

from sparkdec.env import flag
from sparkdec.errors import InvalidSamplingParamsError
from sparkdec.guided import Guided
from sparkdec.staging import to_device


MAX_LOGPROBS = 20  # the most alternatives per token a request may ask for (OpenAI's chat top_logprobs limit)


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    max_tokens: int = 256
    seed: int | None = None
    stop: tuple[str, ...] | list[str] | str | None = None
    stop_token_ids: tuple[int, ...] | list[int] = field(default_factory=tuple)
    ignore_eos: bool = False
    include_stop_str_in_output: bool = False  # the stop string that ended the output stays at its end (vLLM's)
    skip_special_tokens: bool = True  # the output's text without special tokens (False: with them, as written)
    # speculation controls (per request): None = engine default
    speculative: bool | None = None
    verify_len: int | None = None
    min_confidence: float | None = None
    # None: no log-probabilities; k >= 0: each output token's log-probability under the target's own distribution
    # (its logits' log-softmax, before temperature, top-k and top-p) and the k most likely tokens' (spec/logprobs.py)
    logprobs: int | None = None
    prompt_logprobs: int | None = None  # the same for each prompt token after the first (evaluation harnesses)
    # logit processing (sparkdec/penalties.py), on the target's logits before the token is chosen, in this order:
    # logit_bias ({token id: added to its logit}, [-100, 100]), repetition_penalty (vLLM's and HF's: a seen token's
    # logit is divided by it when positive, multiplied when not; prompt and output tokens), frequency_penalty
    # (minus it times the token's count in the output) and presence_penalty (minus it once the token is in the
    # output), both in [-2, 2] as OpenAI's; then min_p (sampled requests: tokens whose probability after temperature
    # is below min_p times the most likely one's are dropped, before top-k and top-p)
    logit_bias: dict[int, float] | tuple[tuple[int, float], ...] = ()
    repetition_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    min_p: float = 0.0
    # the first min_tokens output tokens are never EOS or a stop id (their logits are -inf), and stop strings are
    # looked for only in the text after them (vLLM's min_tokens)
    min_tokens: int = 0
    bad_words: tuple[str, ...] = ()  # words never generated (vLLM's: each with and without a leading space)
    allowed_token_ids: tuple[int, ...] | list[int] | None = None  # the only tokens generated (vLLM's); None: all
    # guided decoding (sparkdec/guided.py): the output follows JSON (a schema), a regex, a choice or a grammar
    guided: Guided | dict | None = None

    def __post_init__(self):
        if isinstance(self.stop, str):
            object.__setattr__(self, "stop", (self.stop,))
        object.__setattr__(self, "stop", tuple(self.stop or ()))
        object.__setattr__(self, "stop_token_ids", tuple(self.stop_token_ids or ()))
        bias = self.logit_bias.items() if isinstance(self.logit_bias, dict) else self.logit_bias or ()
        object.__setattr__(self, "logit_bias", tuple(sorted((t, b) for t, b in bias)))  # hashable, in one order
        object.__setattr__(self, "bad_words", tuple(self.bad_words or ()))
        if self.allowed_token_ids is not None:
            object.__setattr__(self, "allowed_token_ids", tuple(self.allowed_token_ids))
        if isinstance(self.guided, dict):
            object.__setattr__(self, "guided", Guided(**self.guided))
        self.validate()

    def validate(self) -> None:
        def bad(msg: str):
            raise InvalidSamplingParamsError(msg)

        if not isinstance(self.max_tokens, int) or self.max_tokens <= 0:
            bad(f"max_tokens must be a positive integer, got {self.max_tokens!r}")
        if self.temperature is None or self.temperature < 0:
            bad(f"temperature must be >= 0 (0 means greedy), got {self.temperature!r}")
        if not (0.0 < self.top_p <= 1.0):
            bad(f"top_p must be in (0, 1] (1 disables it), got {self.top_p!r}")
        if not isinstance(self.top_k, int) or self.top_k < 0:
            bad(f"top_k must be an integer >= 0 (0 disables it), got {self.top_k!r}")
        if self.verify_len is not None and self.verify_len < 0:
            bad(f"verify_len must be >= 0, got {self.verify_len!r}")
        if self.min_confidence is not None and not (0.0 <= self.min_confidence <= 1.0):
            bad(f"min_confidence must be in [0, 1], got {self.min_confidence!r}")
        for name in ("logprobs", "prompt_logprobs"):
            k = getattr(self, name)
            if k is not None and not (isinstance(k, int) and 0 <= k <= MAX_LOGPROBS):
                bad(f"{name} must be an integer from 0 to {MAX_LOGPROBS} (the top alternatives per token), got {k!r}")
        if any(not isinstance(t, int) or t < 0 for t in self.stop_token_ids):
            bad(f"stop_token_ids must be token ids (integers >= 0), got {list(self.stop_token_ids)!r}")
        if any(not isinstance(w, str) or not w.strip() for w in self.bad_words):
            bad("bad_words must be non-empty strings")
        if any(not s for s in self.stop):
            bad("stop strings must be non-empty")
        self._validate_processing(bad)

    def _validate_processing(self, bad) -> None:
        for name in ("frequency_penalty", "presence_penalty"):
            if not -2.0 <= getattr(self, name) <= 2.0:
                bad(f"{name} must be in [-2, 2] (0 disables it), got {getattr(self, name)!r}")
        if not 0.01 <= self.repetition_penalty <= 100.0:
            bad(f"repetition_penalty must be in [0.01, 100] (1 disables it), got {self.repetition_penalty!r}")
        if not 0.0 <= self.min_p <= 1.0:
            bad(f"min_p must be in [0, 1] (0 disables it), got {self.min_p!r}")
        if not isinstance(self.min_tokens, int) or not 0 <= self.min_tokens <= self.max_tokens:
            bad(f"min_tokens must be an integer from 0 to max_tokens ({self.max_tokens}), got {self.min_tokens!r}")
        if self.guided is not None and self.min_tokens:
            bad("min_tokens cannot be combined with guided decoding: the grammar decides where the output ends")
        if self.guided is not None and self.ignore_eos:
            bad("ignore_eos cannot be combined with guided decoding: the grammar ends the output with a stop token")
        if self.allowed_token_ids is not None and (not self.allowed_token_ids or any(
                not isinstance(t, int) or t < 0 for t in self.allowed_token_ids)):
            bad(f"allowed_token_ids must be a non-empty list of token ids (integers >= 0), got "
                f"{list(self.allowed_token_ids)!r}")
        if len({t for t, _ in self.logit_bias}) < len(self.logit_bias):
            bad("logit_bias names a token twice; give each token one bias")
        for token, bias in self.logit_bias:
            if not (isinstance(token, int) and token >= 0):
                bad(f"logit_bias keys must be token ids (integers >= 0), got {token!r}")
            if not -100.0 <= bias <= 100.0:
                bad(f"logit_bias values must be in [-100, 100], got {bias!r} for token {token}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def resolved_seed(self) -> int:
        return self.seed if self.seed is not None else random.getrandbits(62)


STREAM_TARGET, STREAM_DRAFT, STREAM_ACCEPT, STREAM_RESIDUAL = 0, 1, 2, 3
# opt-in, CUDA only: the target's sampled tokens from one fused kernel (ops/triton_sample.py: the same race in log
# space, all verify rows of a sequence at once). Plain and speculative decoding both take it when it is on, so
# seeded outputs stay equal (H200: exact, not faster; docs/architecture.md, Known gaps).
FUSED_SAMPLER: bool | None = None  # None: SPARKDEC_FUSED_SAMPLER decides, read on first use (Engine() reads it)
# CUDA: sampled rows drawn by ops/triton_nucleus.py (softmax, top-p's cut without a sort, the race in log space; about
# a dozen launches) rather than by torch (sort, scan, about 35 launches). Plain and speculative decoding both draw
# through _race_rows, so seeded outputs stay equal either way. H200, 4B shape, ctx 1k, T 0.8 / top-p 0.95: plain
# sampled 3.03 -> 2.85 ms/token, speculative sampled round 4.35-4.42 -> 3.95-3.98 ms
# (kernel_sampler_ab_h200_2026-11-30_session17.json). SPARKDEC_KERNEL_SAMPLER=0: the torch ops.
KERNEL_SAMPLER: bool | None = None


def _mix(seed: int, position: int, stream: int) -> int:
    """splitmix64 over (seed, position, stream): a generator seed unique to one draw."""
    x = (seed * 0x9E3779B97F4A7C15 + position * 0xBF58476D1CE4E5B9 + stream * 0x94D049BB133111EB) & (2**64 - 1)
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & (2**64 - 1)
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & (2**64 - 1)
    x ^= x >> 31
    return x & (2**63 - 1)


def signed(c: int) -> int:
    """A uint64 value as the int64 with the same bits."""
    return c - (1 << 64) if c >= 1 << 63 else c


_GOLDEN, _M1, _M2 = (signed(c) for c in (0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB))


def key_base(seed: int, stream: int) -> int:
    """_mix's sum before the position term, (seed * golden + stream * M2) mod 2^64, as an int64: with the position
    it keys a draw inside a kernel (ops/triton_noise.py)."""
    return signed((seed * 0x9E3779B97F4A7C15 + stream * 0x94D049BB133111EB) % (1 << 64))


def _shr(x: torch.Tensor, s: int) -> torch.Tensor:
    """Logical right shift of int64 values (torch shifts arithmetically)."""
    return (x >> s) & ((1 << (64 - s)) - 1)


def uniform_noise(seed: int, position: int, stream: int, n: int, device) -> torch.Tensor:
    """n float64 uniforms in (0, 1), a pure function of (seed, position, stream): element i is splitmix64 of
    key + (i + 1) * golden, computed with wrapping int64 arithmetic on the device itself (no host generator,
    no host->device copy; identical bits on CPU and CUDA)."""
    return _splitmix_uniforms(torch.arange(1, n + 1, dtype=torch.int64, device=device) * _GOLDEN
                              + _mix(seed, position, stream))


def keyed_uniforms(keys: list[int], n: int, device) -> torch.Tensor:
    """[len(keys), n]: row r is uniform_noise's n uniforms for key r = _mix(seed, position, stream) (one batch of
    device ops; the keys travel in one small host->device copy)."""
    x = torch.arange(1, n + 1, dtype=torch.int64, device=device) * _GOLDEN  # [n]
    return _splitmix_uniforms(x[None, :] + to_device(keys, device)[:, None])


def _splitmix_uniforms(x: torch.Tensor) -> torch.Tensor:
    """splitmix64's finaliser of int64 x (wrapping) -> float64 uniforms in [2^-53, 1 - 2^-53]."""
    x = (x ^ _shr(x, 30)) * _M1
    x = (x ^ _shr(x, 27)) * _M2
    x = x ^ _shr(x, 31)
    return (_shr(x, 12).double() + 0.5) * 2.0 ** -52  # 52 bits + 1/2: exact, in [2^-53, 1 - 2^-53]


def processed_probs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """logits [V] float32 -> the distribution plain sampling draws from (temperature, top-k, top-p)."""
    probs = _filtered_probs(logits, params)
    return probs / probs.sum() if params.top_p < 1.0 else probs


def _filtered_probs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """logits [..., V] -> softmax(logits / T) over the top-k, with top-p's tail set to 0 (not renormalised)."""
    x = logits.float() / params.temperature
    if params.top_k and params.top_k < x.shape[-1]:
        kth = torch.topk(x, params.top_k, dim=-1).values[..., -1:]  # [..., 1]
        x = x.masked_fill(x < kth, float("-inf"))
    probs = torch.softmax(x, dim=-1)
    if params.top_p < 1.0:
        probs = probs.masked_fill(_top_p_drop(probs, params.top_p), 0.0)
    return probs


def sample_from(probs: torch.Tensor, seed: int, position: int, stream: int = STREAM_TARGET) -> int:
    """Exponential race: argmax p_i / E_i with E_i ~ Exp(1) keyed on (seed, position, stream)."""
    e = -torch.log(uniform_noise(seed, position, stream, probs.shape[-1], probs.device))
    return int(torch.argmax(probs.double() / e))


def sample_token(logits: torch.Tensor, params: SamplingParams, seed: int, position: int) -> int:
    """The token plain decoding emits at `position` given the logits of the row before it."""
    if params.greedy:
        return int(torch.argmax(logits))  # first maximum: ties go to the smaller id
    if fused(logits):
        return int(fused_rows(logits[None], params, seed, position)[0])
    return int(sample_rows(logits[None], params, seed, position)[0])


def sample_rows(logits: torch.Tensor, params: SamplingParams, seed: int, first_position: int) -> torch.Tensor:
    """The sampled tokens at positions first_position .. + R - 1 given the logits [R, V] of the rows before them,
    as a device tensor [R] with no host read: the exponential race of sample_from over the distribution of
    processed_probs, every row on its own but all rows in one batch of operations. Plain decoding samples
    through this too, so a row gets the same token whichever way it is drawn. The race argmax p_i / E_i does not
    depend on p's scale: top-p's kept mass is not renormalised (a sum over the row would make a row's bits depend
    on how the reduction is split, which can follow R)."""
    keys = [_mix(seed, first_position + r, STREAM_TARGET) for r in range(logits.shape[0])]
    return _race_rows(logits, params, keys)


def draw_tokens(logits: torch.Tensor, draws: list[tuple[SamplingParams, int, int]], race=None) -> torch.Tensor:
    """The token of each row of logits [n, V] given its (params, seed, position of the token), as a device tensor
    [n] with no host read: greedy rows take the argmax; sampled rows, grouped by their filters, the race of
    sample_rows (each row keyed on its own seed and position, so grouping changes no row). race(logits, params,
    keys) -> the race's tokens or None: a faster race of a batch whose rows all sample with one filter
    (engine/sampler_graphs.py replays it as a CUDA graph over a target graph's logits)."""
    groups: dict[tuple, list[int]] = {}
    for r, (p, _, _) in enumerate(draws):
        if not p.greedy:
            groups.setdefault((p.temperature, p.top_k, p.top_p), []).append(r)
    keys = {r: _mix(draws[r][1], draws[r][2], STREAM_TARGET) for rows in groups.values() for r in rows}
    if len(groups) == 1 and len(keys) == len(draws):  # every row samples, with one filter: no argmax, no gather
        ordered = [keys[r] for r in range(len(draws))]
        fast = race(logits, draws[0][0], ordered) if race is not None else None
        return fast if fast is not None else _race_rows(logits.contiguous(), draws[0][0], ordered)
    tokens = logits.argmax(-1)
    for rows in groups.values():
        idx = to_device(rows, logits.device)
        tokens.index_copy_(0, idx, _race_rows(logits.index_select(0, idx), draws[rows[0]][0], [keys[r] for r in rows]))
    return tokens


def _race_rows(logits: torch.Tensor, params: SamplingParams, keys: list[int]) -> torch.Tensor:
    """sample_rows with row r's noise keyed on keys[r]. On CUDA (KERNEL_SAMPLER): ops/triton_nucleus.py, the same
    rule with no sort, in log space (argmax x_i / T - log E_i), in about 10 short launches."""
    if logits.is_cuda and kernel_sampler_on():
        return kernel_race(logits, params, keys)
    probs = _filtered_probs(logits, params)  # [R, V]
    e = -torch.log(keyed_uniforms(keys, probs.shape[1], probs.device))
    return torch.argmax(probs.double() / e, dim=-1)


def kernel_race(logits: torch.Tensor, params: SamplingParams, keys: list[int]) -> torch.Tensor:
    """_race_rows by ops/triton_nucleus.py (any device Triton runs on: CUDA, or the CPU interpreter in tests)."""
    return keyed_kernel_race(logits, params, to_device(keys, logits.device))


def keyed_kernel_race(logits: torch.Tensor, params: SamplingParams, keys: torch.Tensor) -> torch.Tensor:
    """kernel_race with the rows' keys already on the device (keys [R] int64): no host work but launches, so
    engine/sampler_graphs.py captures it."""
    from sparkdec.ops.triton_nucleus import race

    kth = top_k_floor(logits.float() / params.temperature, params) if cuts_top_k(params, logits.shape[-1]) else None
    return race(logits, params.temperature, keys, params.top_p, kth)


def cuts_top_k(params: SamplingParams, vocab: int) -> bool:
    """Does top-k drop any of a row's vocab tokens?"""
    return bool(params.top_k) and params.top_k < vocab


def top_k_floor(x: torch.Tensor, params: SamplingParams) -> torch.Tensor | None:
    """x [R, V] (logits / T) -> [R] float32: each row's k-th largest value (top-k keeps x >= it), or None where
    top-k keeps every token."""
    if cuts_top_k(params, x.shape[-1]):
        return torch.topk(x, params.top_k, dim=-1).values[:, -1].contiguous()
    return None


def kernel_sampler_on() -> bool:
    """SPARKDEC_KERNEL_SAMPLER, read once (an invalid value is an error that names it)."""
    global KERNEL_SAMPLER
    if KERNEL_SAMPLER is None:
        KERNEL_SAMPLER = flag("SPARKDEC_KERNEL_SAMPLER", True)
    return KERNEL_SAMPLER


def fused(logits: torch.Tensor) -> bool:
    """Do sampled tokens come from the fused kernel (SPARKDEC_FUSED_SAMPLER=1 and CUDA logits)?"""
    return logits.is_cuda and fused_sampler_on()


def fused_sampler_on() -> bool:
    """SPARKDEC_FUSED_SAMPLER, read once (an invalid value is an error that names it)."""
    global FUSED_SAMPLER
    if FUSED_SAMPLER is None:
        FUSED_SAMPLER = flag("SPARKDEC_FUSED_SAMPLER", False)
    return FUSED_SAMPLER


def fused_rows(logits: torch.Tensor, params: SamplingParams, seed: int, first_position: int) -> torch.Tensor:
    """The sampled tokens at positions first_position .. + R - 1 given the logits [R, V] of the rows before them,
    as a device tensor [R] (ops/triton_sample.py); the top-k and top-p masks are computed here."""
    from sparkdec.ops.triton_sample import keyed_race

    x = logits.float() / params.temperature
    drop = None
    kth = top_k_floor(x, params)
    if kth is not None:
        x = x.masked_fill(x < kth[:, None], float("-inf"))
    if params.top_p < 1.0:
        drop = _top_p_drop(torch.softmax(x, dim=-1), params.top_p)
    return keyed_race(logits, params.temperature, key_base(seed, STREAM_TARGET), first_position, kth, drop)


def _top_p_drop(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """probs [..., V] -> bool [..., V]: the tokens outside the smallest set, in descending probability (ties to the
    smaller id), whose mass reaches top_p: every token from the first whose sorted mass before it reaches top_p on.
    Each row's set never depends on the other rows of the call: sort and softmax give every row the same bits
    either way, and the scan is one a row gets alone too."""
    sorted_p, idx = torch.sort(probs, descending=True, stable=True)
    rows, ids = sorted_p.reshape(-1, sorted_p.shape[-1]), idx.reshape(-1, idx.shape[-1])  # [R, V]
    if rows.is_cuda:  # NOTE: not torch.cumsum: CUDA scans a lone row and a batch of rows with different bits
        from sparkdec.ops.triton_top_p import mass_reached

        past = mass_reached(rows, top_p)
    else:  # the CPU scans each row on its own, in order
        past = ((torch.cumsum(rows, dim=-1) - rows) >= top_p).to(torch.uint8)
    return after_first_past(past, rows, ids, probs.reshape(rows.shape)).view(probs.shape)


def after_first_past(past: torch.Tensor, sorted_p: torch.Tensor, ids: torch.Tensor,
                     probs: torch.Tensor) -> torch.Tensor:
    """suffix_drop's mask with neither a scan nor a scatter (torch's cummax took 0.35 ms per 152k-entry row on the
    H200, sampled_profile_h200_2026-11-30_session15.json): past, sorted_p, ids [R, V] in sorted order, probs [R, V]
    by token id -> bool [R, V] by token id. Token t is dropped when it comes at or after the first past entry f in the
    sort order (probability descending, then id ascending): p_t < p_f, or p_t == p_f and t >= id_f. Integer and
    comparison operations only: exact, so every row's mask is the one it gets alone. Contract: sorted_p, ids are
    torch.sort(probs, descending=True, stable=True) of these very probs, with no -0.0 among them (a sort may order
    -0.0 and +0.0 by their bits while == calls them equal; softmax and masked_fill give +0.0 only)."""
    any_past = past.amax(-1, keepdim=True) > 0  # [R, 1]
    first = past.argmax(-1, keepdim=True)  # [R, 1]: argmax returns the first maximum: the first past entry
    pf, idf = sorted_p.gather(-1, first), ids.gather(-1, first)  # [R, 1]
    tok = torch.arange(probs.shape[-1], device=probs.device)
    return ((probs < pf) | ((probs == pf) & (tok >= idf))) & any_past


def suffix_drop(past: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """The reference of after_first_past (tests). past [R, V] uint8 in sorted order (the mass before an entry
    reaches top_p), ids [R, V] (the token of each sorted entry) -> bool [R, V] by token id: every token from the
    first past entry on. (cummax is exact, so batch-invariant; rounding can make the test flicker near top_p, which
    must not leave holes in the kept set.)"""
    drop = past.cummax(dim=-1).values.bool()
    return torch.empty_like(drop).scatter_(-1, ids, drop)
