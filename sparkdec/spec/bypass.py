"""Speculation that steps aside where it does not pay: on text the drafter predicts badly, or in a batch large enough
that verifying drafts costs more than they return. Each sequence's tokens per round are measured over a probe of a
few rounds, then followed (the mean of its recent rounds); each round speculates for the sequences whose drafts are
expected to raise the batch's tokens per second, by the timed cost of the propose (by sequence count) and of the
forward (by token count), each scaled by how the engine's real steps of its kind (plain or speculating, greedy or
sampled) compared with it (until plain steps of a kind have been timed a few times, a few are run to time them); the
others decode plainly and are probed again after a backoff that doubles while speculation keeps losing. The tokens
are the same either way: speculative output equals plain output."""
from __future__ import annotations

from dataclasses import dataclass, field

from sparkdec.spec.schedule import StepCosts
from sparkdec.spec.step_costs import time_forward, time_propose

PROBE_ROUNDS = 4  # rounds that measure a sequence's tokens per round afresh: its first ones, and each probe's
WINDOW = 16  # a speculating sequence's tokens per round: the mean of its last WINDOW rounds (acceptance is bursty)
FIRST_BACKOFF = 32  # plain tokens before a sequence set aside is probed again; doubled while its probes lose
MAX_BACKOFF = 1024
MARGIN = 1.25  # sequences are set aside only where that is expected to raise the batch's tokens/s by more than this
STEP_ALPHA = 0.1  # the weight of a step in the ratio of real step times to the timed costs (its first: their mean)
RATIO_RANGE = (0.5, 4.0)  # what one step may say of that ratio
# plain steps run for a batch past its probes until EXPLORE_TIMED plain steps of its sampling (greedy, or a row
# sampled) have been timed, at most EXPLORE_STEPS of them: one step ahead a plain step can take far less than its
# forward's timing (its host work overlaps the device's), which a round's ratio does not tell; and a sampled step's
# sampler is host and device work a greedy one has not. (A step ahead's first step, only queued, is not timed.)
EXPLORE_TIMED, EXPLORE_STEPS = 3, 8


@dataclass
class BypassState:
    """One sequence's: the tokens of its rounds since its last probe began (its last WINDOW count), the output length
    at which a sequence set aside is probed again (None while it speculates), its backoff, whether its rounds come
    from a probe that followed a set-aside, and the rounds, accepted drafts and output length last seen (to count
    what came since)."""
    window: list[float] = field(default_factory=list)
    aside_until: int | None = None
    backoff: int = FIRST_BACKOFF
    reprobed: bool = False
    seen: tuple[int, int, int] = (0, 0, 0)

    @property
    def tokens_per_round(self) -> float | None:
        """The mean of its recent rounds, or None while it is probed (fewer than PROBE_ROUNDS since the probe)."""
        return sum(self.window) / len(self.window) if len(self.window) >= PROBE_ROUNDS else None


class MeasuredCosts:
    """ms of a forward by token count and of a propose by sequence count, timed on trash rows (spec/step_costs.py)
    where first needed: at the graph tiers and powers of two up to the count asked, interpolated between
    (schedule.StepCosts). Timing runs forwards and proposes: only when no work is queued ahead (Engine._round)."""

    def __init__(self, runner):
        self.runner = runner
        self.tiers = tuple(runner.graphs.tiers) if runner.graphs is not None else ()
        self.propose_tiers = tuple(runner.propose_graphs.tiers) if runner.propose_graphs is not None else ()
        self.forward_points: dict[int, float] = {}
        self.propose_points: dict[int, float] = {}
        self._tables: tuple[StepCosts, StepCosts] | None = None

    def ready(self, tokens: int, seqs: int) -> bool:
        """Are the costs of forwards up to tokens and proposes up to seqs known?"""
        return (all(n in self.forward_points for n in _points(tokens, self.tiers))
                and all(k in self.propose_points for k in _points(seqs, self.propose_tiers)))

    def measure(self, tokens: int, seqs: int) -> None:
        for n in _points(tokens, self.tiers):
            if n not in self.forward_points:
                self.forward_points[n] = time_forward(self.runner, n)
        for k in _points(seqs, self.propose_tiers):
            if k not in self.propose_points:
                self.propose_points[k] = time_propose(self.runner, k)
        self._tables = None

    def forward_ms(self, tokens: int) -> float:
        return self._costs()[0].cost_ms(tokens)

    def propose_ms(self, seqs: int) -> float:
        return self._costs()[1].cost_ms(seqs)

    def _costs(self) -> tuple[StepCosts, StepCosts]:
        if self._tables is None:
            self._tables = (StepCosts(self.forward_points, self.tiers),
                            StepCosts(self.propose_points, self.propose_tiers))
        return self._tables


def _points(n: int, tiers: tuple[int, ...]) -> list[int]:
    """The counts timed to cost n: the powers of two up to the first at or past n, and the tiers up to it."""
    top = 1 << max(n - 1, 0).bit_length()
    return sorted({1 << j for j in range(top.bit_length())} | {t for t in tiers if t <= top})


class Bypass:
    def __init__(self, costs, calibrate: bool = True):
        self.costs = costs  # forward_ms(tokens), propose_ms(seqs), ready(tokens, seqs), measure(tokens, seqs)
        self.calibrate = calibrate  # False: the costs as they are (tests: choices that follow given costs exactly)
        # real step ms / the costs' ms by kind of step, (speculates, sampled: a row of the batch is not greedy):
        # host work the timed forward and propose leave out (scheduling, sampling, commits); None until such a step
        # was timed
        self.ratio: dict[tuple[bool, bool], float | None] = {(s, d): None for s in (False, True) for d in (False, True)}
        self.predicted: tuple[tuple[bool, bool], float] | None = None  # (kind, ms) of the step choose last chose
        self.steps = dict.fromkeys(self.ratio, 0)  # steps timed, by kind
        self.explored = {False: 0, True: 0}  # plain steps chosen to time them, by sampled (at most EXPLORE_STEPS)

    def choose(self, batch: list, eligible: list, ell, always: list = (), timeable: bool = True) -> set[int] | None:
        """id() of the sequences of eligible (those that may speculate, part of the decode batch) that speculate this
        round; None when the costs this needs are not timed yet (costs.measure first). ell(seq): the drafts it
        would verify; always: sequences of the batch that speculate every round (counted in the costs); timeable:
        the step will be timed (no prompt chunks in it), so it may be one that explores."""
        must, optional = list(always), []
        for seq in eligible:
            st = observe(seq)
            if st.aside_until is not None and len(seq.output_ids) >= st.aside_until:  # its backoff passed: a probe
                st.aside_until, st.window, st.reprobed = None, [], True
            if st.aside_until is None:
                (must if st.tokens_per_round is None else optional).append(seq)
        drafts = {id(s): ell(s) for s in must + optional}  # (each sequence's once: choices are per step)
        self.predicted = None
        if not self.costs.ready(len(batch) + sum(drafts.values()), len(drafts)):
            return None if optional else {id(s) for s in must}
        optional.sort(key=lambda s: -s.bypass.tokens_per_round)
        sampled = any(not s.params.greedy for s in batch)
        if timeable and self._explores(must, optional, sampled):
            self.predicted = ((False, sampled), self._ms(len(batch), 0, 0))
            return set()
        keep = self._best(len(batch), must, optional, drafts, sampled)
        for seq in optional[keep:]:
            _set_aside(seq)
        for seq in optional[:keep]:
            seq.bypass.reprobed, seq.bypass.backoff = False, FIRST_BACKOFF  # (its probe paid)
        chosen = must + optional[:keep]
        self.predicted = ((bool(chosen), sampled), self._ms(len(batch), len(chosen),
                                                            sum(drafts[id(s)] for s in chosen)))
        return {id(s) for s in chosen}

    def _explores(self, must: list, optional: list, sampled: bool) -> bool:
        """Is this step one of the plain steps run to time them (fewer than EXPLORE_TIMED plain steps of its sampling
        timed, fewer than EXPLORE_STEPS run so, none of the batch probing or speculating every round)? Its sequences
        keep their state: no backoff."""
        if not self.calibrate or self.steps[False, sampled] >= EXPLORE_TIMED or must or not optional:
            return False
        if self.explored[sampled] >= EXPLORE_STEPS:
            return False
        self.explored[sampled] += 1
        return True

    def timed(self, ms: float) -> None:
        """The wall-clock ms of the step choose last chose (decode rows only), into the ratio of its kind (each
        step's ratio kept within RATIO_RANGE: a step that only queued work, or waited on something else, says
        little)."""
        if self.predicted is not None and self.calibrate:
            kind, predicted = self.predicted
            now = min(max(ms / predicted, RATIO_RANGE[0]), RATIO_RANGE[1])
            self.steps[kind] += 1
            alpha = max(STEP_ALPHA, 1 / self.steps[kind])  # (the mean of its first steps)
            old = self.ratio[kind]
            self.ratio[kind] = now if old is None else (1 - alpha) * old + alpha * now
        self.predicted = None

    def _best(self, b: int, must: list, optional: list, drafts: dict, sampled: bool) -> int:
        """How many of optional (by expected tokens per round, highest first) speculate: the most tokens per second
        for the batch of b sequences; all of them unless fewer are expected to be faster by MARGIN."""
        tokens = sum(_expected(s) for s in must) + b - len(must)  # expected tokens of the step
        rows = sum(drafts[id(s)] for s in must)  # its draft rows
        rates = [self._rate(b, len(must), rows, tokens, sampled)]
        for k, seq in enumerate(optional, 1):
            tokens, rows = tokens + seq.bypass.tokens_per_round - 1, rows + drafts[id(seq)]
            rates.append(self._rate(b, len(must) + k, rows, tokens, sampled))
        best = max(range(len(rates)), key=lambda k: (rates[k], k))
        return best if rates[best] > MARGIN * rates[-1] else len(optional)

    def _rate(self, b: int, spec: int, rows: int, tokens: float, sampled: bool) -> float:
        """Expected tokens per ms of a step of b sequences where spec of them speculate with rows drafts in all."""
        return tokens / (self._ms(b, spec, rows) * self._ratio(spec > 0, sampled))

    def _ms(self, b: int, spec: int, rows: int) -> float:
        """The timed costs' ms of that step."""
        return self.costs.forward_ms(b + rows) + (self.costs.propose_ms(spec) if spec else 0.0)

    def _ratio(self, speculates: bool, sampled: bool) -> float:
        """Real step time over the costs' for this kind of step; until one was timed, the same step's with the other
        sampling's, else the other step's (its sampling's first), else 1."""
        for kind in ((speculates, sampled), (speculates, not sampled), (not speculates, sampled),
                     (not speculates, not sampled)):
            if self.ratio[kind] is not None:
                return self.ratio[kind]
        return 1.0


def _expected(seq) -> float:
    """A sequence's expected tokens per round: its bypass's, else (probing, or speculating every round) its rounds'
    mean so far, else 1."""
    st = seq.bypass
    if st is not None and st.tokens_per_round is not None:
        return st.tokens_per_round
    return (seq.spec.accepted_tokens + seq.spec.rounds) / seq.spec.rounds if seq.spec.rounds else 1.0


def observe(seq) -> BypassState:
    """The sequence's state, with what came since it was last seen: its rounds' tokens into its window, or the tokens
    it decoded plainly while set aside into its SpecStats.bypassed_tokens."""
    st = seq.bypass = seq.bypass or BypassState(seen=(seq.spec.rounds, seq.spec.accepted_tokens, len(seq.output_ids)))
    rounds, accepted, out = seq.spec.rounds - st.seen[0], seq.spec.accepted_tokens - st.seen[1], len(seq.output_ids)
    if rounds:  # (one round a step: a choice comes before each)
        st.window = (st.window + [(accepted + rounds) / rounds] * rounds)[-WINDOW:]
    else:  # (tokens with no round: decoded plainly, set aside, or in the step drained before its probe)
        seq.spec.bypassed_tokens += out - st.seen[2]
    st.seen = (seq.spec.rounds, seq.spec.accepted_tokens, out)
    return st


def _set_aside(seq) -> None:
    """Plain decoding for the sequence until it has backoff more tokens; a probe that lost doubles the backoff."""
    st = seq.bypass
    if st.reprobed:
        st.backoff, st.reprobed = min(2 * st.backoff, MAX_BACKOFF), False
    st.aside_until = len(seq.output_ids) + st.backoff
