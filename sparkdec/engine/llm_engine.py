"""Engine: loads models, admits requests, and steps the batch until every request finishes."""
from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from sparkdec.engine.kv_cache import BlockManager, KVCache
from sparkdec.engine.lookahead import Lookahead
from sparkdec.engine.runner import ModelRunner
from sparkdec.engine.scheduler import Scheduler
from sparkdec.engine.sequence import Sequence
from sparkdec.guided import GuideCompiler
from sparkdec.errors import InvalidPromptError, InvalidSamplingParamsError, PromptTooLongError, SparkdecError
from sparkdec.sampling import SamplingParams, fused_sampler_on, kernel_sampler_on
from sparkdec.spec.bypass import Bypass, MeasuredCosts, observe
from sparkdec.spec.round import RoundRunner
from sparkdec.spec.schedule import VerifyPolicy
from sparkdec.spec.step_costs import profile_verify_costs

DEFAULT_PAIR = Path(__file__).resolve().parents[2] / "models" / "sparkdec-tiny"
ACCEPT_MODES = ("exact", "rejection")
VERIFY_POLICIES = ("full", "batch")
# EngineConfig.spec_bypass when not given: speculation steps aside for the sequences whose drafts are not expected to
# pay (spec/bypass.py). The test suite turns it off (tests/conftest.py): its choices follow timings, and tests compare
# rounds; its own tests run it on.
BYPASS_DEFAULT = True


@dataclass(frozen=True)
class EngineConfig:
    model: str | None = None  # None: the shipped tiny pair
    draft: str | None = None
    device: str | None = None  # None: cuda when available, else cpu
    dtype: str | None = None  # None: float32 on CPU, bfloat16 on CUDA
    max_model_len: int | None = None
    page_size: int = 16
    kv_cache_tokens: int | None = None
    kv_cache_memory_fraction: float = 0.5  # of the GPU's free memory after the weights, when kv_cache_tokens is None
    max_num_seqs: int = 64
    max_batched_tokens: int = 1024
    verify_len: int | None = None
    min_confidence: float | None = None
    # "full": every sequence on its own (verify_len / min_confidence, else the full block); "batch": when two or more
    # sequences speculate in a round, Algorithm 1 (spec §11.4) from a verify-cost profile taken at start-up chooses
    # ℓ across them, each within what its own verify_len / min_confidence allows (needs a drafter with a confidence head)
    verify_policy: str = "full"
    accept_mode: str = "exact"
    speculative: bool = True
    # speculation steps aside where its drafts are not expected to pay, by measured costs and each sequence's
    # acceptance, and probes again later (spec/bypass.py); None: BYPASS_DEFAULT
    spec_bypass: bool | None = None
    cuda_graphs: bool = True
    # plain decoding queues step k+1 before reading step k (engine/lookahead.py); greedy speculative rounds
    # queue the next propose before reading the round back (spec/chain.py)
    lookahead: bool = True
    # a prompt's full pages stay cached after its request (engine/prefix_cache.py): a later prompt that begins with
    # them starts its prefill after them, with the bits it would have computed (prompt rows only are shared)
    prefix_caching: bool = True
    threads: int | None = None  # CPU threads for torch (None: torch's default)


def _resolve_paths(cfg: EngineConfig) -> tuple[str, str | None]:
    if cfg.model is not None:
        return cfg.model, cfg.draft
    draft = cfg.draft or (str(DEFAULT_PAIR / "draft") if (DEFAULT_PAIR / "draft").is_dir() else None)
    return str(DEFAULT_PAIR / "target"), draft


def load_models(cfg: EngineConfig, device: torch.device):
    """-> (target, target_cfg, drafter or None, draft_cfg or None, tokenizer or None) from checkpoint folders."""
    from sparkdec.models.draft_loader import load_draft
    from sparkdec.models.loader import load_target
    from sparkdec.tokenizer import Tokenizer

    model_path, draft_path = _resolve_paths(cfg)
    target, target_cfg = load_target(model_path, device, cfg.dtype)
    drafter, draft_cfg = load_draft(draft_path, target, target_cfg, device) if draft_path else (None, None)
    tokenizer = Tokenizer(model_path) if (Path(model_path).expanduser() / "tokenizer.json").is_file() else None
    return target, target_cfg, drafter, draft_cfg, tokenizer


def check_config(cfg: EngineConfig) -> None:
    """Refuse settings the engine cannot run with (a batch of no sequences would wait forever)."""
    if cfg.accept_mode not in ACCEPT_MODES:
        raise SparkdecError(f"accept mode {cfg.accept_mode!r} unknown; use one of {ACCEPT_MODES}")
    if cfg.verify_policy not in VERIFY_POLICIES:
        raise SparkdecError(f"verify policy {cfg.verify_policy!r} unknown; use one of {VERIFY_POLICIES}")
    for name, least in (("max_num_seqs", 1), ("max_batched_tokens", 1), ("page_size", 1), ("max_model_len", 2),
                        ("kv_cache_tokens", cfg.page_size), ("threads", 1), ("verify_len", 0)):
        value = getattr(cfg, name)
        if value is not None and (not isinstance(value, int) or value < least):
            flag = "--max-num-batched-tokens" if name == "max_batched_tokens" else "--" + name.replace("_", "-")
            raise SparkdecError(f"{name} must be an integer >= {least}, got {value!r} ({flag} on the command line)")
    if cfg.min_confidence is not None and not 0.0 <= cfg.min_confidence <= 1.0:
        raise SparkdecError(f"min_confidence must be in [0, 1], got {cfg.min_confidence!r}")
    if not 0.0 < cfg.kv_cache_memory_fraction <= 0.95:
        raise SparkdecError(f"kv_cache_memory_fraction must be in (0, 0.95] (the rest holds activations and CUDA "
                            f"graphs), got {cfg.kv_cache_memory_fraction!r}")


class Engine:
    def __init__(self, cfg: EngineConfig = EngineConfig(), models: tuple | None = None):
        """models: prebuilt (target, target_cfg, drafter, draft_cfg, tokenizer), e.g. random weights for benchmarks."""
        check_config(cfg)
        fused_sampler_on()  # an invalid SPARKDEC_FUSED_SAMPLER fails here, at start, not at the first sampled token
        kernel_sampler_on()  # (SPARKDEC_KERNEL_SAMPLER likewise)
        self.config = cfg
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        self.device = torch.device(cfg.device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.target, self.target_cfg, self.drafter, self.draft_cfg, self.tokenizer = models or load_models(cfg, self.device)
        self.max_model_len = cfg.max_model_len or self.target_cfg.max_position_embeddings
        self.guides = GuideCompiler(self.tokenizer, self.target_cfg.vocab_size)  # guided decoding, built on first use
        gamma = self.draft_cfg.block_size if self.draft_cfg else 0
        num_pages = self._num_pages(cfg)
        self.blocks = BlockManager(num_pages, cfg.page_size)
        self.runner = ModelRunner(self.target, self.target_cfg, self.drafter, self.draft_cfg, num_pages=num_pages,
                                  page_size=cfg.page_size, max_positions=self.max_model_len + gamma + 1,
                                  device=self.device)
        if self.device.type == "cuda":
            self.runner.fuse_weights()
            if cfg.cuda_graphs:
                self.runner.enable_graphs(cfg.max_num_seqs)
        self.scheduler = Scheduler(self.blocks, cfg.max_num_seqs, max(cfg.max_batched_tokens, (gamma + 1) * cfg.max_num_seqs),
                                   headroom=gamma + 1, prefix_caching=cfg.prefix_caching)
        decode = (lambda ids, skip=True: self.tokenizer.decode(ids, skip)) if self.tokenizer else None
        self.rounds = RoundRunner(self.runner, VerifyPolicy(cfg.verify_len, cfg.min_confidence), cfg.accept_mode, decode,
                                  ahead=cfg.lookahead)
        if cfg.verify_policy == "batch" and self.drafter is not None:  # (requests may turn speculation on)
            if not self.draft_cfg.enable_confidence_head:
                raise SparkdecError("verify policy 'batch' needs a drafter with a confidence head (it ranks drafts "
                                    "by predicted survival); this drafter has none: use verify_policy 'full' "
                                    "or a fixed verify_len")
            self.rounds.step_costs = profile_verify_costs(self.runner, self.max_verify_rows())
        self.lookahead = Lookahead(self.runner, decode) if cfg.lookahead else None
        bypass = cfg.spec_bypass if cfg.spec_bypass is not None else BYPASS_DEFAULT
        self.bypass = Bypass(MeasuredCosts(self.runner)) if bypass and self.drafter is not None else None
        if self.device.type == "cuda":  # (timed now, not between a server's steps; a CPU engine times what it needs)
            self.time_bypass_costs(cfg.max_num_seqs)
        self._bypass_needs = (1, 1)  # (forward tokens, proposed sequences) the bypass's next choice needs timed
        self._ids = itertools.count()

    def max_verify_rows(self, seqs: int | None = None) -> int:
        """The most rows a round of seqs sequences (None: max_num_seqs) verifies: each with its anchor and γ drafts."""
        return (self.config.max_num_seqs if seqs is None else seqs) * (self.block_size + 1)

    def time_bypass_costs(self, seqs: int) -> None:
        """Time the bypass's costs for rounds of up to seqs sequences now (spec/bypass.py; else where first needed)."""
        if self.bypass is not None:
            self.bypass.costs.measure(self.max_verify_rows(seqs), seqs)

    def _num_pages(self, cfg: EngineConfig) -> int:
        tokens = cfg.kv_cache_tokens
        if tokens is None:
            if self.device.type == "cuda":
                tc = self.target_cfg
                per_token = KVCache.bytes_per_token(tc.num_hidden_layers, tc.num_key_value_heads, tc.head_dim, torch.bfloat16)
                if self.draft_cfg:
                    lc = self.draft_cfg.layers
                    per_token += KVCache.bytes_per_token(lc.num_hidden_layers, lc.num_key_value_heads, lc.head_dim, torch.bfloat16)
                tokens = int(torch.cuda.mem_get_info(self.device)[0] * cfg.kv_cache_memory_fraction) // per_token
            else:
                tokens = 32768
        return max(1, tokens // cfg.page_size)

    @property
    def block_size(self) -> int:
        return self.draft_cfg.block_size if self.draft_cfg else 0

    def encode_prompt(self, prompt: str | list[int], keep_last: int | None = None) -> list[int]:
        """The prompt's token ids, checked (keep_last: only its last ones, before the length check)."""
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise InvalidPromptError("this model has no tokenizer.json; pass the prompt as a list of token ids")
            ids = self.tokenizer.encode(prompt)
        else:
            ids = [int(t) for t in prompt]
        ids = ids[-keep_last:] if keep_last else ids
        if not ids:
            raise InvalidPromptError("the prompt is empty; give at least one token")
        bad = [t for t in ids if not 0 <= t < self.target_cfg.vocab_size]
        if bad:
            raise InvalidPromptError(f"token ids {bad[:5]} are outside the vocabulary (0..{self.target_cfg.vocab_size - 1})")
        if len(ids) >= self.max_model_len:
            raise PromptTooLongError(f"the prompt has {len(ids)} tokens but the context window is {self.max_model_len}; "
                                     "shorten the prompt (it must leave room for at least one new token)")
        return ids

    def add_request(self, prompt: str | list[int], params: SamplingParams | None = None,
                    request_id: str | None = None, trace: bool = False, guide=None) -> Sequence:
        """guide: the request's grammar matcher built beforehand by guide_for (the server builds it off the engine
        thread); built here when None."""
        params = params or SamplingParams()
        params.validate()
        vocab = self.target_cfg.vocab_size
        for name, ids in (("logit_bias", [t for t, _ in params.logit_bias]), ("stop_token_ids", params.stop_token_ids),
                          ("allowed_token_ids", params.allowed_token_ids or ())):
            outside = [t for t in ids if t >= vocab]
            if outside:
                raise InvalidSamplingParamsError(f"{name} names token ids {outside[:5]} outside the vocabulary "
                                                 f"(0..{vocab - 1}); drop them")
        ids = self.encode_prompt(prompt)
        eos = self.tokenizer.eos_token_ids if self.tokenizer else ()
        guide = guide if guide is not None else self.guide_for(ids, params)
        seq = Sequence(request_id=request_id or f"req-{next(self._ids)}", prompt_ids=ids, params=params,
                       seed=params.resolved_seed(), eos_ids=eos, max_model_len=self.max_model_len,
                       rounds=[] if trace else None, arrival=time.perf_counter(),
                       logprobs=[] if params.logprobs is not None else None,
                       prompt_logprobs=[(ids[0], None, ())] if params.prompt_logprobs is not None else None)
        seq.spec.block_size = self.block_size
        seq.guide = guide
        seq.bad_words = self.bad_word_ids(params.bad_words)
        self.scheduler.add(seq)
        return seq

    def guide_for(self, prompt_ids: list[int], params: SamplingParams):
        """A guided request's grammar matcher (grammar_matcher.Matcher; None for others), its grammar compiled or taken
        from the compiler's cache. Safe off the engine thread: the server builds it there, so that compiling a new
        grammar does not stall the requests in flight."""
        if not params.guided:
            return None
        params.validate()  # (its grammar is checked before it compiles)
        # (the grammar ends with EOS; a stop id is an ordinary token to it, which ends the request where it comes)
        return self.guides.matcher(params.guided, self.tokenizer.eos_token_ids if self.tokenizer else (), prompt_ids)

    def bad_word_ids(self, words: tuple[str, ...]) -> tuple[tuple[int, ...], ...]:
        """Each bad word's token sequences, as written and after a space (vLLM's rule)."""
        if words and self.tokenizer is None:
            raise InvalidSamplingParamsError("bad_words needs the model's tokenizer (tokenizer.json)")
        seqs = {tuple(self.tokenizer.encode(v)) for w in words for v in (w.lstrip(), " " + w.lstrip())}
        return tuple(sorted(s for s in seqs if s))

    def _verify_drafts(self, seq: Sequence) -> int:
        """The drafts a round would verify for the sequence (its verify_len or the block, within its room)."""
        ell = self.rounds.policy_for(seq).verify_len
        return max(0, min(self.block_size if ell is None else ell, self.block_size, seq.room() - 1))

    def speculating(self, seq: Sequence) -> bool:
        if self.drafter is None:
            return False
        return seq.params.speculative if seq.params.speculative is not None else self.config.speculative

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished()

    def step(self) -> list[Sequence]:
        """Run one round over the current batch; returns the sequences that changed."""
        t0 = time.perf_counter()
        ahead = self.lookahead
        if ahead is not None and ahead.pending is not None and self.scheduler.pages_short():
            batch = None  # the step queued ahead ends before the scheduler takes any sequence's pages back
        else:
            batch = self.scheduler.schedule(rows_per_decode=self.block_size + 1)
            if batch.empty:
                return []
        t1 = time.perf_counter()
        touched = self._round(batch) if batch is not None else ahead.drain()
        t2 = time.perf_counter()
        for seq in touched:
            if seq.finish_reason is not None:
                seq.finish_time = t2
                self.scheduler.finish(seq)
                if seq.bypass is not None:
                    observe(seq)  # (its last tokens decoded plainly are counted)
        self.rounds.timing["host"] += (t1 - t0) + (time.perf_counter() - t2)  # scheduling and bookkeeping
        return touched

    def _round(self, batch) -> list[Sequence]:
        """One step ahead when the batch allows (plain greedy decode); a batch that does not first drains the
        pending step, and is scheduled again next call (its sequences' host state was one step behind)."""
        ahead = self.lookahead
        t = time.perf_counter()
        speculating = self._speculating_now(batch)
        if speculating is None:  # the bypass needs costs timed first, with no work queued ahead
            if ahead is not None and ahead.pending is not None:
                return ahead.drain()
            self.rounds.pending = None  # (the timed proposes replay its graph)
            self.bypass.costs.measure(*self._bypass_needs)
            speculating = self._speculating_now(batch)
            t = time.perf_counter()
        if ahead is not None and ahead.takes(batch, speculating):
            first = ahead.pending is None  # (a first step only queues its forward: nothing to time)
            touched = ahead.step(batch)
            return touched if first else self._timed(t, batch, touched)
        if ahead is not None and ahead.pending is not None:
            return ahead.drain()
        return self._timed(t, batch, self.rounds.step(batch, speculating))

    def _timed(self, t: float, batch, touched: list[Sequence]) -> list[Sequence]:
        """The step's wall clock to the bypass (decode-only steps: its costs leave prompt chunks out)."""
        if self.bypass is not None and not batch.prefill:
            self.bypass.timed((time.perf_counter() - t) * 1e3)
        return touched

    def _speculating_now(self, batch):
        """Which sequences speculate this round: those that may (speculating), less those the bypass sets aside;
        None when the bypass needs costs it has not timed (their counts in _bypass_needs)."""
        if self.bypass is None or self.rounds.simulate is not None:
            return self.speculating
        self.bypass.predicted = None
        may = [s for s in batch.decode if self.speculating(s)]
        if not may:
            return self.speculating
        # (rejection-sampled rows give other tokens than plain sampling, the same distribution: a choice that
        # follows timings would make a seeded request's tokens vary, so they speculate every round)
        rejection = self.config.accept_mode == "rejection"
        always = [s for s in may if rejection and not s.params.greedy]
        eligible = [s for s in may if not (rejection and not s.params.greedy)]
        chosen = self.bypass.choose(batch.decode, eligible, self._verify_drafts, always, timeable=not batch.prefill)
        if chosen is None:
            self._bypass_needs = (len(batch.decode) + sum(map(self._verify_drafts, may)), len(may))
            return None
        if self.rounds.pending is not None:
            for seq in eligible:
                if id(seq) not in chosen:  # (its queued propose would be stale when it speculates again)
                    self.rounds.pending.drop(seq)
        return lambda seq: id(seq) in chosen

    def abort(self, request_id: str) -> Sequence | None:
        seq = self.scheduler.abort(request_id)
        if seq is not None:
            seq.finish_time = time.perf_counter()
            if seq.bypass is not None:
                observe(seq)
        return seq
