"""One engine step: propose -> choose verify lengths -> packed verify (+ prefill chunks) -> accept -> commit.

This is the only place that sequences the round. Plain decoding is the same round with ℓ = 0 and no propose.
"""
from __future__ import annotations

import time

import torch

from sparkdec.engine import context
from sparkdec.engine.scheduler import Batch
from sparkdec.engine.sequence import Sequence
from sparkdec.sampling import STREAM_DRAFT, SamplingParams, fused_sampler_on, sample_from, sample_token
from sparkdec.penalties import processes, rewrites as rewrites_logits
from sparkdec.spec import coupling, logprobs, processed
from sparkdec.spec.chain import PendingPropose
from sparkdec.spec.commit import commit_tokens
from sparkdec.spec.schedule import VerifyPolicy, batch_verify_lengths, survivals
from sparkdec.spec.verify import accept_exact, accept_greedy, accept_rejection
from sparkdec.staging import to_device


GREEDY = SamplingParams()  # the draw of a row whose token is the argmax
# exact-sampled rounds draw all their verify rows on the device with the verify (one read per round) instead of one
# row at a time on acceptance; those with argmax drafts also queue the next propose from them (spec/chain.py).
# H200 (sampled_rounds_ab_h200_2026-11-30_top_p_scan.json, T 0.8 top-p 0.95): tiny pair at 8 prompts 1511
# tokens/s one row at a time with argmax drafts -> 7180 drawn with the verify with coupled drafts (4802 with argmax
# drafts), the same tokens; 4B shape 5.3-6.2 -> 3.7-3.8 ms/token. (Session 6 measured it slower, before coupled
# drafts and the batched draw: kernels_h200_2026-11-30_session6_sampled.json.) False: one row at a time.
DEVICE_DRAWS = True
# True: guided sequences draft only what their grammar allows: each slot's disallowed tokens are masked out of the
# drafter's logits before its pick (a host read per slot, and the propose leaves its CUDA graph). Shipped pair, tokens
# per round rise on both devices (JSON schema 1.56 -> 3.08, a forced tool call 1.30 -> 3.85 on the H200), but tokens/s
# rose on the CPU (1.1-2.5x) and fell on the H200 (0.54-0.92x: the tiny verify is cheaper than the eager propose;
# guided_drafts_ab_{cpu,h200}_tiny_2026-12-05.json; unmeasured at full size). None: on for CPU engines, off on CUDA.
GUIDED_DRAFTS: bool | None = None
# True: sequences that rewrite their logits (penalties, logit_bias, min_p, min_tokens) draft from logits rewritten the
# same way, slot by slot (penalties.DraftProcessing: no host read, but the propose leaves its CUDA graph). Shipped
# pair, CPU, 4 code prompts, tokens per round off -> on (processed_drafts_ab_cpu_tiny_2026-12-05.json): repetition
# penalty 1.3 1.89 -> 2.28, 1.05 3.16 -> 2.95, presence 0.8 + frequency 0.5 2.42 -> 2.53, sampled with repetition 1.2
# and min_p 1.98 -> 2.25: mixed (the drafter's logits are not the target's scale), so off by default.
PROCESSED_DRAFTS = False
# True: a guided sequence's first drafts are the text its grammar forces next (grammar_matcher.Matcher.forced: a JSON
# key with its quotes and colon, say), as the tokenizer writes it, in place of the drafter's; the verify checks them as
# ever. Not for rejection-sampled drafts, whose acceptance needs each draft drawn from the drafter's distribution.
FORCED_DRAFTS = True


class RoundRunner:
    def __init__(self, runner, policy, accept_mode: str, decode, ahead: bool = True):
        self.runner, self.policy, self.accept_mode, self.decode = runner, policy, accept_mode, decode
        self.ahead = ahead  # greedy rounds queue the next propose before the host reads back (spec/chain.py)
        self.pending: PendingPropose | None = None
        self.timing = {"propose": 0.0, "verify": 0.0, "accept": 0.0, "host": 0.0, "steps": 0}
        self.simulate = None  # spec.simulate.SimulatedAcceptance: benchmarks only
        # spec.schedule.StepCosts: the batch policy (Algorithm 1, spec §11.4) chooses ℓ across the speculating
        # sequences when two or more speculate, each within its own policy's ℓ; None: each sequence on its own
        self.step_costs = None
        # benchmarks only: a list that collects (start, proposed, verified) CUDA events per speculative round,
        # the device timeline of the round (the host times above see only when launches return)
        self.device_events: list | None = None
        self.guided_checks = [0, 0]  # guided rounds checked after the read (processed.checked), and those refused

    def _sampled_drafts(self, seq: Sequence) -> bool:
        return self.accept_mode == "rejection" and not seq.params.greedy

    def _coupled(self, seq: Sequence) -> bool:
        """Does this sequence's drafter race with the target's noise (exact-sampled: spec/coupling.py)?"""
        return (self.accept_mode == "exact" and not seq.params.greedy and self.simulate is None
                and coupling.couples(seq.params))

    def propose(self, seqs: list[Sequence]):
        """Drafts [B, γ], z [B, γ, V] and confidences [B, γ], all on the device."""
        positions = [s.anchor_position for s in seqs]
        gumbels: dict[int, torch.Tensor] = {}  # row -> [γ, V]: coupled rows' race noise, made at the first slot
        guides = [(i, s.guide) for i, s in enumerate(seqs) if s.guide is not None and s.guide.constrains_drafts()] \
            if self._guided_drafts_on() else []
        rewrites = processed.draft_processing(seqs, self.runner.target_cfg.vocab_size, self.runner.device) \
            if PROCESSED_DRAFTS else []

        def pick(z: torch.Tensor, k: int) -> torch.Tensor:
            # in place: z is the q that rejection sampling verifies against
            for i, rewrite in rewrites:
                rewrite.apply_(z[i], k)
            for i, guide in guides:
                mask = guide.draft_mask(z.device)
                if mask is not None:
                    z[i].masked_fill_(~mask, float("-inf"))
            tokens = z.argmax(-1)
            for i, seq in enumerate(seqs):
                if self._sampled_drafts(seq):
                    q = torch.softmax(z[i] / seq.params.temperature, dim=-1)
                    tokens[i] = sample_from(q, seq.seed, positions[i] + k + 1, STREAM_DRAFT)
                elif self._coupled(seq):
                    if i not in gumbels:
                        gumbels[i] = coupling.coupled_gumbels(seq.seed, positions[i], self.runner.draft_cfg.block_size,
                                                              z.shape[-1], z.device)
                    tokens[i] = coupling.coupled_token(z[i], seq.params, gumbels[i][k])
            for i, rewrite in rewrites:
                rewrite.drafted(tokens[i])
            if guides:  # NOTE: a host read per slot, for guided sequences only
                host = tokens.tolist()
                for i, guide in guides:
                    guide.draft(host[i])
            return tokens

        # argmax picks or coupled races (a guided sequence's picks run here, slot by slot, on the host's grammar)
        greedy = not any(self._sampled_drafts(s) for s in seqs) and not guides and not rewrites
        coupled = coupling.race_rows(seqs, [self._coupled(s) for s in seqs])
        try:
            return self.runner.propose([s.block_table for s in seqs], [s.anchor for s in seqs], positions, pick,
                                       greedy=greedy, coupled=coupled)
        finally:
            for _, guide in guides:
                guide.undo_drafts()

    def _device_draws(self, seq: Sequence) -> bool:
        """Are this sequence's verify rows sampled on the device with the verify (sampling.draw_tokens, exact mode,
        the ordinary sampler) and read back with it, in place of their argmax?"""
        return (DEVICE_DRAWS and not seq.params.greedy and self.accept_mode == "exact" and self.simulate is None
                and not fused_sampler_on() and (not processed.processes_now(seq) or self._processed_on_device(seq)))

    def _checks(self, seq: Sequence) -> bool:
        """May this sequence's guided rows go unmasked, their tokens checked after the read (spec/processed.checked):
        greedy, or exact-sampled with no filter or a top-k read back (processed.checkable), drawn on the device with
        the verify (a top-k one not within the rounds a refusal masks: processed.filtered_turn)? Rows rewritten as
        well only where that is done on the device (the tokens checked are then the ones drawn)."""
        if rewrites_logits(seq.params) and not processed.DEVICE_PROCESSING:
            return False
        return seq.params.greedy or (processed.checkable(seq.params) and DEVICE_DRAWS and self.accept_mode == "exact"
                                     and self.simulate is None and not fused_sampler_on()
                                     and processed.filtered_turn(seq))

    def _processed_on_device(self, seq: Sequence) -> bool:
        """Are this sequence's rows processed (penalties.py) on the device before the round's one read, their tokens
        drawn there with the others' (greedy, or exact-sampled with the ordinary sampler; spec/processed.on_device)?"""
        return (processed.DEVICE_PROCESSING and self.simulate is None and processed.on_device(seq)
                and (seq.params.greedy or (DEVICE_DRAWS and self.accept_mode == "exact" and not fused_sampler_on())))

    def _drawn_after(self, seq: Sequence) -> bool:
        """Are this sequence's processed rows (penalties.py) drawn in one batch after the readback (greedy, or
        exact-sampled with the ordinary sampler) rather than accepted one row at a time?"""
        return seq.params.greedy or (self.accept_mode == "exact" and not fused_sampler_on())

    def accept(self, seq: Sequence, logits: torch.Tensor, argmax: list[int], drafts: list[int], z, row: int,
               rows: torch.Tensor | None = None, picks: list[int] | None = None):
        """The tokens a sequence commits. rows, picks: a logit-processing sequence's processed rows and, when they
        were drawn after the readback, their tokens (spec/processed.py)."""
        s = seq.anchor_position
        if self.simulate is not None:
            return self.simulate.accept(argmax, drafts)
        if picks is not None:
            return accept_greedy(picks, drafts)
        if rows is not None:
            logits = rows
        if seq.params.greedy or self._device_draws(seq):  # argmax: the drawn tokens for device-drawn rows
            return accept_greedy(argmax, drafts)
        if self.accept_mode == "rejection" and drafts:
            return accept_rejection(logits, z[row], drafts, seq.params, seq.seed, s)
        return accept_exact(logits, drafts, seq.params, seq.seed, s)

    def _propose_joined(self, spec: list[Sequence], pending: PendingPropose | None):
        """Drafts, z and confidences for spec when the queued propose lacks some of it (sequences that joined the
        decode batch since): its rows are kept for the sequences it holds, the others are proposed now."""
        held = [pending is not None and pending.holds(s) for s in spec]
        if not any(held):
            return self.propose(spec)
        # NOTE: copies: the queued rows may be views of a propose graph's static outputs, which the propose below
        # replays over (stream order makes the copies first). z only where a row reads it (rejection-sampled
        # drafts); the queued rows never do (they chain: greedy or device-drawn)
        with_z = any(self._sampled_drafts(s) for s in spec)
        drafts, z, conf = pending.take([s for s, h in zip(spec, held) if h])
        old = (drafts.clone(), z.clone() if with_z else None, conf.clone())
        new = self.propose([s for s, h in zip(spec, held) if not h])
        placed = [i for i, h in enumerate(held) if h] + [i for i, h in enumerate(held) if not h]
        inv = [0] * len(spec)  # spec row i is row inv[i] of old rows then new rows
        for k, i in enumerate(placed):
            inv[i] = k
        sel = to_device(inv, new[0].device)
        return tuple(torch.cat([a, b]).index_select(0, sel) if a is not None else None for a, b in zip(old, new))

    def _forced(self, spec: list[Sequence], drafts: torch.Tensor, conf: torch.Tensor):
        """(drafts [B, γ], confidences [B, γ]) with each guided sequence's first drafts replaced by the tokens its
        grammar forces next (FORCED_DRAFTS), their confidences 1; the same tensors when none forces any."""
        rows = [(i, f) for i, s in enumerate(spec) if s.guide is not None and not self._sampled_drafts(s)
                and (f := s.guide.forced(drafts.shape[1]))]
        if not rows:
            return drafts, conf
        drafts, conf = drafts.clone(), conf.clone()  # (not the propose graph's outputs, which the next one rewrites)
        for i, forced in rows:
            drafts[i, :len(forced)] = to_device(forced, drafts.device)
            conf[i, :len(forced)] = 1.0
        return drafts, conf

    def _verify_lengths(self, spec: list[Sequence], conf_dev, other_rows: int = 0) -> list[int]:
        """ℓ per sequence. Only a confidence threshold or the batch policy needs the confidences on the host before
        the verify (an extra device->host read); full-block and fixed lengths are known without them. other_rows:
        the forward's rows that are not the speculating sequences' (plain decode rows, prompt chunks)."""
        policies = [self.policy_for(s) for s in spec]
        gamma = conf_dev.shape[1] if conf_dev is not None else 0
        batched = self._batched(spec)
        need = batched or any(p.min_confidence for p in policies)
        conf = conf_dev.tolist() if need else [[1.0] * gamma] * len(spec)
        ells = [p.choose(c, s.room()) for p, c, s in zip(policies, conf, spec)]
        if batched:  # within what each sequence's own policy allows (its room, verify_len, min_confidence)
            ells = batch_verify_lengths([survivals(c) for c in conf], ells, self.step_costs.rate, other_rows)
        return ells

    def _batched(self, spec: list[Sequence]) -> bool:
        """Does the batch policy choose ℓ this round? (A profile, and two or more sequences speculate: at batch 1 the
        full block, spec §11.8.)"""
        return self.step_costs is not None and len(spec) >= 2

    def step(self, batch: Batch, speculating) -> list[Sequence]:
        t0 = time.perf_counter()
        dec = batch.decode
        for seq in dec:
            seq.grammar_checked = seq.guide is not None and self._checks(seq)
        spec = [s for s in dec if speculating(s)]
        thinking = {id(s) for s in dec if processed.thinking(s)}  # rows unmasked up to the block's close
        pending, self.pending = self.pending, None
        queued = pending.take(spec) if pending is not None and spec else None
        if queued is not None:  # proposed during the last round's readback: its events were recorded then
            drafts_dev, z, conf_dev = queued
            events = pending.events
        else:
            events = self._events() if spec else None
            drafts_dev, z, conf_dev = self._propose_joined(spec, pending) if spec else (None, None, None)
            if events:
                events[1].record()
        if events and self.device_events is not None:
            self.device_events.append(events)
        if spec and FORCED_DRAFTS:
            drafts_dev, conf_dev = self._forced(spec, drafts_dev, conf_dev)
        other = len(dec) - len(spec) + sum(b - a for _, a, b in batch.prefill)
        ells = self._verify_lengths(spec, conf_dev, other) if spec else []
        t1 = time.perf_counter()
        gamma = drafts_dev.shape[1] if spec else 0
        row_of = {id(s): i for i, s in enumerate(spec)}
        pieces, logit_rows, spans, fill_rows, fill_src, draws = [], [], [], [], [], []
        on_device = [self._processed_on_device(seq) for seq in dec]
        drawn = any(on_device) or any(self._device_draws(seq) for seq in dec)  # rows drawn with the verify
        start = 0  # packed row where the next piece begins
        for seq in dec:
            i = row_of.get(id(seq))
            ell = ells[i] if i is not None else 0
            s = seq.anchor_position
            # drafts go into their verify rows on the device; the host holds placeholders
            pieces.append((seq.block_table, [seq.anchor] + [0] * ell, list(range(s, s + ell + 1))))
            fill_rows += range(start + 1, start + 1 + ell)
            fill_src += range(i * gamma, i * gamma + ell) if ell else []
            spans.append((seq, len(logit_rows), ell + 1, i))
            logit_rows.extend(range(start, start + ell + 1))
            if drawn:  # row k (position s + k) draws the token at s + k + 1
                p = seq.params if seq.params.greedy or self._device_draws(seq) else GREEDY
                draws += [(p, seq.seed, s + k + 1) for k in range(ell + 1)]
            start += ell + 1
        # a preempted sequence's generated rows, recomputed: placed with the decode rows (the attention they had)
        regenerated = [(seq, a, b) for seq, a, b in batch.prefill if a >= len(seq.prompt_ids)]
        prompts = [(seq, a, b) for seq, a, b in batch.prefill if a < len(seq.prompt_ids)]
        for seq, a, b in regenerated:
            pieces.append((seq.block_table, seq.tokens(a, b), list(range(a, b))))
            seq.num_computed = b
            start += b - a
        prefill_done, prompt_scored = [], []
        for seq, a, b in prompts:
            pieces.append((seq.block_table, seq.prompt_ids[a:b], list(range(a, b))))
            seq.num_computed = b
            lo, hi = logprobs.prompt_rows(seq, a, b)
            if hi > lo:  # rows of positions lo .. hi - 1 (packed from start + lo - a) score prompt tokens lo + 1 .. hi
                prompt_scored.append((seq, len(logit_rows), lo, hi))
                logit_rows.extend(range(start + lo - a, start + hi - a))
                draws += [(GREEDY, 0, 0)] * (hi - lo) if drawn else []
            if b == len(seq.prompt_ids) and not seq.output_ids:  # (a recomputed prompt has its first token)
                prefill_done.append((seq, len(logit_rows)))
                logit_rows.append(start + b - a - 1)
                draws += [(GREEDY, 0, 0)] if drawn else []  # its first token is drawn below, as ever
            start += b - a
        fill = (fill_rows, drafts_dev.reshape(-1), fill_src) if spec else None
        readback = (drafts_dev, conf_dev) if spec else ()
        # NOTE: the one device->host read of the round: verify argmax, drafts and confidences together
        prompt_from = len(dec) + len(regenerated) if prompts and context.PREFILL_KERNEL else None  # 1st prompt piece
        mark = events[2].record if events else None
        ahead = self._propose_ahead(spec, spans, drafts_dev) if self._chains(dec, spec) else None
        dev_spans = [(seq, r0, n, drafts_dev[i] if i is not None else None, 0)
                     for (seq, r0, n, i), on in zip(spans, on_device) if on]
        process = processed.device_processing(dev_spans, self._guided_drafts(spans, on_device, drafts_dev)) \
            if dev_spans else None
        kept_asks = [(seq, r0, n) for seq, r0, n, _ in spans if processed.keeps_checked(seq)]
        kept = processed.kept_reader(kept_asks) if kept_asks and drawn else None
        logits, host = self.runner.verify(pieces, logit_rows, fill, readback, prompt_from, mark, ahead,
                                          draws if drawn else None, process, kept)
        argmax = host[0]
        drafts = [[int(x) for x in host[1][i * gamma:(i + 1) * gamma]] for i in range(len(spec))] if spec else []
        conf = [host[2][i * gamma:(i + 1) * gamma] for i in range(len(spec))] if spec else []
        states = host[1 + len(readback)] if process is not None else None
        t2 = time.perf_counter()
        touched, scores = [], logprobs.RoundScores()
        # checked guided rows went unmasked: where the grammar refuses one of their tokens, masked now (a second read)
        kept_ids = processed.kept_lists(kept_asks, host[-1]) if kept is not None else {}
        failed = processed.failed_checks(spans, argmax, drafts, kept_ids) if self.simulate is None else set()
        after = [span for span, on in zip(spans, on_device) if not on or id(span[0]) in failed]  # processed now
        rows = processed.process_spans(after, logits, drafts, failed) if self.simulate is None else {}
        picks, dead = processed.read_rows(after, rows, self._drawn_after)
        on_dead = processed.dead_of(dev_spans, states) if dev_spans else {}
        dead.update({key: bad for key, bad in on_dead.items() if key not in failed})
        for seq, r0, n, i in spans:
            ver = drafts[i][:n - 1] if i is not None else []
            tokens = self.accept(seq, logits[r0:r0 + n], argmax[r0:r0 + n], ver, z, i, rows.get(id(seq)),
                                 picks.get(id(seq)))
            if id(seq) in failed and ahead is not None:  # no further than the device's tokens went: failed_checks
                tokens = tokens[:len(accept_greedy(argmax[r0:r0 + n], ver))]
            if processed.checked(seq) and self.simulate is None:
                processed.note_check(seq, id(seq) in failed, self.guided_checks)
            s = seq.anchor_position
            accepted = len(tokens) - 1
            tokens, stuck = processed.settle(seq, tokens, dead, id(seq) in thinking)
            committed = commit_tokens(seq, tokens, self.decode)
            if (len(tokens) <= accepted or id(seq) in failed) and seq.finish_reason is None and self.pending:
                self.pending.drop(seq)  # (the propose chained from the device's tokens is not its next)
            if seq.logprobs is not None:
                scores.output(seq, logits[r0:r0 + committed], tokens[:committed])
            seq.num_computed = s + len(tokens)
            if i is not None:
                self._record(seq, s, drafts[i], conf[i], n - 1, min(accepted, len(tokens)), committed,
                             (t1 - t0, t2 - t1))
            if stuck is not None and seq.finish_reason is None:  # its next token's row has no choice
                processed.dead_end(seq, stuck)
            touched.append(seq)
        for seq, r, lo, hi in prompt_scored:
            scores.prompt(seq, logits[r:r + hi - lo], lo, hi)
        for seq, r in prefill_done:
            # greedy: the round's readback already holds the argmax (no extra device read)
            if processes(seq.params):
                token = processed.first_token(seq, logits[r:r + 1], sample_token)
                if isinstance(token, tuple):  # (dead, own): no first token to choose
                    processed.dead_end(seq, token[1])
                    touched.append(seq)
                    continue
            elif seq.params.greedy:
                token = argmax[r]
            else:
                token = sample_token(logits[r], seq.params, seq.seed, len(seq.prompt_ids))
            if commit_tokens(seq, [token], self.decode) and seq.logprobs is not None:  # (0: refused, see append)
                scores.output(seq, logits[r:r + 1], [token])
            seq.first_token_time = time.perf_counter()
            touched.append(seq)
        scores.flush()
        t3 = time.perf_counter()
        self._time(t0, t1, t2, t3)
        return touched

    @staticmethod
    def _guided_drafts(spans, on_device: list[bool], drafts_dev) -> dict:
        """id(seq) -> () -> its drafts on the host, for the speculating sequences whose grammar masks their rows on
        the device (processed.GUIDED_ON_DEVICE): the drafts' copy is queued now, before the verify."""
        guided = [(seq, i) for (seq, _, _, i), on in zip(spans, on_device) if on and i is not None and processed.masks(seq)]
        if not guided:
            return {}
        host = processed.DraftsOnHost(drafts_dev)
        return {id(seq): (lambda i=i: host.row(i)) for seq, i in guided}

    def _guided_drafts_on(self) -> bool:
        """Do guided sequences draft only what their grammar allows (GUIDED_DRAFTS; None: on CPU engines)?"""
        return GUIDED_DRAFTS if GUIDED_DRAFTS is not None else self.runner.device.type != "cuda"

    def _chains(self, dec: list[Sequence], spec: list[Sequence]) -> bool:
        """Can the next round's propose be queued before this round is read back? Every decode sequence speculates
        greedily or with device-drawn rows (acceptance the device can reproduce: spec/chain.py) and no verify
        length waits for the confidences. A sequence a grammar masks chains only where its drafts are the drafter's
        own (the chained propose walks no grammar: _guided_drafts_on), and one whose tokens are checked only while its
        grammar seldom refuses them (processed.chains_checked)."""
        return (self.ahead and bool(spec) and len(spec) == len(dec)
                and not (self._guided_drafts_on() and any(processed.under_grammar(s) for s in spec))
                and not any(processed.checked(s) and not processed.chains_checked(s) for s in spec)
                and all((s.params.greedy and (not processed.processes_now(s) or self._processed_on_device(s)))
                        or (self._device_draws(s) and not self._coupled(s))
                        for s in spec)
                and not any(self.policy_for(s).min_confidence for s in spec) and not self._batched(spec))

    def _propose_ahead(self, spec: list[Sequence], spans, drafts_dev):
        """-> before_read(first) for runner.verify: the device's acceptance of this round, then the next propose."""
        rows = [r0 for seq, r0, n, i in spans if i is not None]
        ells = [n - 1 for seq, r0, n, i in spans if i is not None]
        starts = [s.anchor_position for s in spec]
        al = self.simulate.acceptance_length if self.simulate is not None else None

        def before_read(first: torch.Tensor) -> None:
            events = self._events()
            vals = to_device([rows, ells, starts], first.device)  # [3, B]
            out = self.runner.propose_chained([s.block_table for s in spec], first, drafts_dev, vals, al)
            if events:
                events[1].record()
            self.pending = PendingPropose(list(spec), *out, events)
        return before_read

    def _events(self) -> list | None:
        """Three CUDA timing events (start, proposed, verified) for a round when the device timeline is being
        collected; the first is recorded now (before the propose). The round that uses them collects them."""
        if self.device_events is None or not torch.cuda.is_available():
            return None
        events = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
        events[0].record()
        return events

    def policy_for(self, seq: Sequence):
        p = seq.params
        if p.verify_len is None and p.min_confidence is None:
            return self.policy
        return VerifyPolicy(p.verify_len if p.verify_len is not None else self.policy.verify_len,
                            p.min_confidence if p.min_confidence is not None else self.policy.min_confidence)

    def _record(self, seq, anchor_position, drafts, conf, ell, accepted, committed, times) -> None:
        seq.spec.record(ell, accepted)
        if seq.rounds is not None:
            seq.rounds.append({"anchor_position": anchor_position, "draft_token_ids": list(drafts),
                               "confidence": [float(c) for c in conf], "num_verified": ell,
                               "num_accepted": accepted, "num_committed": committed,
                               "propose_ms": times[0] * 1e3, "verify_ms": times[1] * 1e3})

    def _time(self, t0, t1, t2, t3) -> None:
        tm = self.timing
        tm["propose"] += t1 - t0
        tm["verify"] += t2 - t1
        tm["accept"] += t3 - t2
        tm["steps"] += 1
