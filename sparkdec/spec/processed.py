"""A round's rows for requests that process their logits (penalties.py): each sequence's rows processed with its
history, then the tokens of those whose acceptance the round can draw in one batch (greedy, or exact-sampled with the
ordinary sampler), read back together."""
from __future__ import annotations

import torch

from sparkdec.engine.runner import rows_tensor
from sparkdec.grammar_matcher import allowed_rows
from sparkdec.penalties import DraftProcessing, History, processed_rows, processes, rewrites, row_span
from sparkdec.row_processing import process_batch
from sparkdec.staging import to_device
from sparkdec.sampling import draw_tokens

# True: rows of sequences that rewrite their logits with no grammar masking them (on_device) are processed and drawn on
# the device with the verify, read back in the round's one read (their rounds can chain the next propose), and plain
# decoding runs them one step ahead (engine/lookahead.py); False: processed after that read, their tokens read in a
# second one, and plain decoding takes the round.
DEVICE_PROCESSING = True
# True: a guided request inside its thinking block (Guided.thinking) decodes as an unprocessed one (one read, its
# rounds chained), its round's tokens kept through the block's close token; False: its rows go through the grammar's
# walk and the second read like any guided request's, unmasked until the close.
THINKING_UNMASKED = True
# True: a guided request's rows are masked on the device too, before the round's one read: the round's drafts are
# copied to the host behind the propose (DraftsOnHost) and the grammar is walked through them while the device runs
# the verify, its masks applied with the other processing; its tokens come back in the one read and its rounds chain
# the next propose (where the drafter's own guided drafts are off). False: masked after that read, tokens in a second.
GUIDED_ON_DEVICE = True
# True: a guided request's rows are not masked at all where its tokens are the argmax or a race drawn on the device
# with no filter (temperature alone: no top-p, top-k or min_p; RoundRunner._checks): the round's tokens are checked
# against the grammar after the one read, along the drafts they accept (a token at a time: no mask is filled), and only
# a round where one of them breaks the grammar is masked and drawn again after that read (a second read). The masked
# argmax, or race winner (argmax of x / T - log E_i over the kept tokens), is the unmasked one wherever the grammar
# allows that (masking only lowers other logits), so the tokens are the same (the CPU's race divides normalised
# probabilities, whose last bits move with the mask: a near tie there could go the other way); a grammar's masks,
# filled over the whole vocabulary for every verify row, are the host cost of guided rounds at a Qwen3-sized
# vocabulary (grammar_walk_cost_*). Filtered draws are masked (the kept set moves with the mask), except top-k ones
# (FILTERED_CHECKED below). Like an unguided row, a checked row is not scanned for NaN or +inf (a masked one is, and
# fails its request; a NaN row's argmax is no token, which fails the check). False: masked like the others.
GUIDED_CHECKED = True
# True: sampled guided rows drawn with a top-k of at most TOPK_CHECKED (any top-p; no min_p) are checked too: where the
# grammar allows every token their unmasked top-k keeps (kept_ids: read back with the round's tokens), the masked row
# keeps the same tokens with the same numbers (a mask only sets refused ones to -inf), so its top-p and race give the
# same token. (Checking the drawn token alone would not do: test_guided.py finds rows whose drawn token is allowed
# and whose masked draw is another.) A refusal masks the sequence's next 1, 2, 4 .. 16 rounds before the read
# (note_filtered_check), since a failed check costs a mask after the read, not overlapped with the device. False:
# such rows are masked.
FILTERED_CHECKED, TOPK_CHECKED, MAX_BACKOFF = True, 64, 16
GAP_ULPS = 2  # how far below a row's k-th value of x / T the next must be for kept_ids to read its kept ids


def process_spans(spans, logits, drafts: list[list[int]], failed: set[int] = frozenset()) -> dict[int, torch.Tensor]:
    """spans: (seq, first logit row, rows, speculating index or None) -> id(seq) -> its rows processed [n, V], for
    the sequences that process their logits, and those whose checked tokens failed (failed_checks: masked now)."""
    def picks(seq) -> bool:
        return processes_now(seq) or id(seq) in failed

    picked = [(seq, n, drafts[i][:n - 1] if i is not None else []) for seq, r0, n, i in spans if picks(seq)]
    if not picked:
        return {}
    pieces = [rows_tensor(logits[r0:r0 + n]) for seq, r0, n, i in spans if picks(seq)]
    walked = grammar_masks([(seq, ver, n) for seq, n, ver in picked], pieces[0].device)
    each = [row_span(rows.shape, seq.params, seq.prompt_ids, seq.output_ids, ver, walked.get(id(seq)), held_back(seq),
                     seq.bad_words, history(seq), 0, rows.device) for (seq, n, ver), rows in zip(picked, pieces)]
    x, out, at = process_batch(torch.cat(pieces), each), {}, 0  # [sum n, V]
    for seq, n, _ in picked:
        out[id(seq)], at = x[at:at + n], at + n
    return out


def dead_rows(rows: dict[int, torch.Tensor]) -> dict[int, tuple[int, bool]]:
    """id(seq) -> (its first processed row with no token to choose, whether that is the request's own doing: every
    logit -inf, a grammar that leads nowhere; not so for a NaN or +inf, the model's numbers), for the sequences that
    have one; one device->host read."""
    return read_rows([], rows, lambda seq: False)[1]


def read_rows(spans, rows: dict[int, torch.Tensor], batched) -> tuple[dict[int, list[int]], dict]:
    """(drawn, dead) in the round's second and last device->host read: drawn is id(seq) -> the token each of its
    processed rows chooses (sampling.draw_tokens: the argmax, or the race plain sampling runs) for the sequences with
    processed rows for which batched(seq) holds; dead is dead_rows'."""
    if not rows:
        return {}, {}
    picked = [(seq, n) for seq, _, n, _ in spans if id(seq) in rows and batched(seq)]
    draws = [(seq.params, seq.seed, seq.anchor_position + k + 1) for seq, n in picked for k in range(n)]
    tokens = [draw_tokens(torch.cat([rows[id(seq)] for seq, _ in picked]), draws)] if picked else []  # [sum n]
    states = [row_states(x) for x in rows.values()]
    host = torch.cat(tokens + states).tolist()
    drawn, at = {}, 0
    for seq, n in picked:
        drawn[id(seq)], at = host[at:at + n], at + n
    dead = {}
    for key, x in rows.items():
        if (bad := _first_dead(host[at:at + x.shape[0]])) is not None:
            dead[key] = bad
        at += x.shape[0]
    return drawn, dead


def row_states(x: torch.Tensor) -> torch.Tensor:
    """processed rows [n, V] -> [n] int64: 0 fine, 1 every logit -inf (nothing to choose), 2 a NaN or +inf."""
    return torch.where(x.isnan().any(-1) | (x == float("inf")).any(-1), 2, (~x.isfinite().any(-1)).long())


def dead_of(spans, states: list) -> dict[int, tuple[int, bool]]:
    """row_states read back for spans (seq, first row, rows, ...) in order -> dead_rows' dict."""
    dead, at = {}, 0
    for seq, _, n, *_ in spans:
        if (bad := _first_dead(states[at:at + n])) is not None:
            dead[id(seq)] = bad
        at += n
    return dead


def _first_dead(states: list) -> tuple[int, bool] | None:
    """A span's row_states read back -> (its first row with no token to choose, whether every logit was -inf there:
    the request's own doing), or None."""
    return next(((k, f == 1) for k, f in enumerate(states) if f), None)


def thinking(seq) -> bool:
    """Is a guided sequence inside its thinking block, its rows the model's own up to the close token
    (THINKING_UNMASKED; the round keeps its tokens through_close)?"""
    return THINKING_UNMASKED and seq.guide is not None and seq.guide.free()


def checked(seq) -> bool:
    """Are a guided sequence's rows left unmasked this round, their tokens checked against its grammar after the
    round's read (GUIDED_CHECKED; Sequence.grammar_checked)?"""
    return (GUIDED_CHECKED and seq.grammar_checked and under_grammar(seq)
            and getattr(seq.guide, "fault", None) is None)


def unfiltered(params) -> bool:
    """Is a sampled request's draw a race over its whole distribution (no top-p, top-k or min_p: masking a token
    changes no other token's number in it)?"""
    return params.top_p >= 1.0 and not params.top_k and not params.min_p


def checkable(params) -> bool:
    """Can a sampled request's guided rows be checked rather than masked: an unfiltered draw, or one whose filter is a
    top-k the round reads back (FILTERED_CHECKED, TOPK_CHECKED; any top-p, no min_p)?"""
    return unfiltered(params) or (FILTERED_CHECKED and 0 < params.top_k <= TOPK_CHECKED and not params.min_p)


def keeps_checked(seq) -> bool:
    """Is a checked sequence's draw filtered by a top-k, so that every token its rows keep is checked (kept_ids)?"""
    return checked(seq) and not seq.params.greedy and not unfiltered(seq.params)


def kept_ids(rows: torch.Tensor, params) -> torch.Tensor:
    """rows [n, V] (as drawn: processed where they are) -> [n, k] float32: the ids top-k keeps in each row (the k
    largest x / T), or -1 throughout a row where the k-th and the next are not GAP_ULPS apart or fewer than k are
    finite: such a row fails its check and is masked. (The cut compares x / T with the k-th largest, sampling.top_k_floor; on
    CUDA the kernel sampler divides with div_rn where torch multiplies by 1 / T, which can differ by an ulp, so an entry
    an ulp below the k-th could be kept there; two ulps apart it cannot.)"""
    k = params.top_k
    if k + 1 > rows.shape[1]:
        return torch.full((rows.shape[0], k), -1.0, device=rows.device)
    vals, ids = torch.topk(rows.float() / params.temperature, k + 1, dim=-1)  # [n, k + 1], largest first
    above = vals[:, k]
    for _ in range(GAP_ULPS):  # (-inf stays below any finite k-th value)
        above = torch.nextafter(above, torch.full_like(above, float("inf")))
    ok = torch.isfinite(vals[:, :k]).all(-1) & (above <= vals[:, k - 1])
    return torch.where(ok[:, None], ids[:, :k], -1).float()


def kept_reader(asks):
    """asks: (seq, first logit row, rows) of the keeps_checked sequences -> kept(rows, at, x) for ModelRunner.verify:
    rows [R, V] of the logit rows, at / x the rows processed and their values (or None) -> each ask's kept_ids
    flattened and concatenated [sum n * k], read back with the round's tokens."""
    def kept(rows: torch.Tensor, at, x) -> torch.Tensor:
        where = {r: j for j, r in enumerate(at)} if at else {}
        groups: dict[tuple, tuple] = {}  # (T, k) -> (its params, its asks' rows): one batch of operations a group
        place = []  # each ask's (group, first row in it)
        for seq, r0, n in asks:
            y = x[where[r0]:where[r0] + n] if r0 in where else rows[r0:r0 + n]  # (a span's rows are processed or not)
            key = (seq.params.temperature, seq.params.top_k)
            _, parts = groups.setdefault(key, (seq.params, []))
            place.append((key, sum(p.shape[0] for p in parts)))
            parts.append(y)
        ids = {key: kept_ids(torch.cat(parts), params) for key, (params, parts) in groups.items()}  # [group rows, k]
        return torch.cat([ids[key][at0:at0 + n].reshape(-1) for (key, at0), (_, _, n) in zip(place, asks)])
    return kept


def kept_lists(asks, flat: list) -> dict[int, list[list[int]]]:
    """kept_reader's values read back -> id(seq) -> each row's kept ids (asks: seq, first logit row, rows)."""
    out, at = {}, 0
    for seq, _, n in asks:
        k = seq.params.top_k
        out[id(seq)] = [[int(t) for t in flat[at + j * k:at + (j + 1) * k]] for j in range(n)]
        at += n * k
    return out


def failed_checks(spans, tokens: list[int], drafts: list[list[int]], kept: dict | None = None) -> set[int]:
    """id(seq) of the checked sequences (spans: seq, first row, rows, speculating index or None) a token of whose
    round the grammar refuses, along the drafts the round accepts (tokens: every row's token, read back; kept: id(seq)
    -> each row's kept ids, kept_lists, for the keeps_checked ones: each of those must be allowed too). Such a
    round commits its masked tokens no further than its unmasked ones went (the row after those is its last): a
    propose chained from the device's tokens wrote its block's draft K/V from there on, over the context rows a
    longer commit would leave its next propose to attend to (spec/chain.py)."""
    kept = kept or {}
    return {id(seq) for seq, r0, n, i in spans if checked(seq)  # (only the tokens it may still emit: room)
            and not passes_check(seq, drafts[i][:n - 1] if i is not None else [], tokens[r0:r0 + min(n, seq.room())],
                                 kept.get(id(seq)))}


def passes_check(seq, drafts: list[int], tokens: list[int], kept: list[list[int]] | None) -> bool:
    """Does a checked sequence's grammar allow its tokens along the drafts (Matcher.allows), and each id its rows' top-k
    kept (kept: each row's ids; a keeps_checked sequence with none read back fails)?"""
    return not (keeps_checked(seq) and kept is None) and seq.guide.allows(drafts, tokens, kept)


def note_check(seq, failed: bool, counts: list[int]) -> None:
    """After a checked round or step: its share of failures (chains_checked), counts [checked, refused] (/metrics),
    and for a top-k draw the rounds a refusal masks (note_filtered_check)."""
    seq.check_failures = failure_share(seq.check_failures, failed)
    counts[0] += 1
    counts[1] += failed
    if keeps_checked(seq):
        note_filtered_check(seq, failed)


def filtered_turn(seq) -> bool:
    """May a guided sequence with a top-k draw be checked this round (not within the rounds a refusal masks)? Counts
    the round down where not (rounds inside a thinking block, unmasked anyway, do not count)."""
    if seq.params.greedy or unfiltered(seq.params) or seq.masked_rounds <= 0 or not under_grammar(seq):
        return True
    seq.masked_rounds -= 1
    return False


def note_filtered_check(seq, failed: bool) -> None:
    """After a keeps_checked round: a refusal masks the next 1, 2, 4 .. MAX_BACKOFF rounds (doubling while they go on
    failing); a pass starts the count again from 1."""
    seq.masked_rounds = seq.backoff if failed else 0
    seq.backoff = min(2 * seq.backoff, MAX_BACKOFF) if failed else 1


# a checked sequence's rounds chain their next propose while the running share of its checked rounds its grammar
# refused (Sequence.check_failures, from 1, each round weighing FAILURE_WEIGHT) is below CHAIN_BELOW: three passing
# rounds from the start, two after a failure
FAILURE_WEIGHT, CHAIN_BELOW = 0.5, 0.2


def failure_share(share: float, failed: bool) -> float:
    """Sequence.check_failures after one more checked round."""
    return (1 - FAILURE_WEIGHT) * share + FAILURE_WEIGHT * failed


def chains_checked(seq) -> bool:
    """May a checked sequence's round chain its next propose (its grammar seldom refuses its tokens)?"""
    return seq.check_failures < CHAIN_BELOW


def processes_now(seq) -> bool:
    """Are the sequence's next rows processed: it rewrites its logits, or its grammar masks them (not thinking)?"""
    return rewrites(seq.params) or masks(seq)


def on_device(seq) -> bool:
    """Can this sequence's rows be processed on the device before the round's one read (a grammar's masks only with
    GUIDED_ON_DEVICE: they are walked on the host through the drafts, DraftsOnHost)?"""
    return processes_now(seq) and (GUIDED_ON_DEVICE or not masks(seq))


def masks(seq) -> bool:
    """Does a grammar mask this sequence's next rows (under its grammar, not checked after the read instead)?"""
    return under_grammar(seq) and not checked(seq)


def under_grammar(seq) -> bool:
    """Is a guided sequence's next row under its grammar (not inside an unmasked thinking block)?"""
    return seq.guide is not None and not thinking(seq)


def settle(seq, tokens: list[int], dead: dict, thinking: bool) -> tuple[list[int], bool | None]:
    """A round's accepted tokens (drafts + bonus) -> (those it commits, and None, or whether it is the request's own
    doing when its next row has no token to choose: dead_end). A row with nothing to choose (dead_rows) ends them
    before its token; inside a thinking block they end at its close token (through_close), and the row right after
    the close is not dead yet: the next round masks it with the grammar."""
    accepted = len(tokens) - 1
    end, own = dead.get(id(seq), (len(tokens), True))
    tokens = tokens[:end]
    if thinking:
        tokens = tokens[:through_close(seq, tokens)]
    closed = thinking and tokens[-1:] == [seq.guide.close_id]
    return tokens, own if end <= accepted and end == len(tokens) and not closed else None


def through_close(seq, tokens: list[int]) -> int:
    """How many of a round's tokens a sequence inside a thinking block keeps: all, or through the block's close token
    (the rows after it chose without the grammar that applies from there; the next round masks them)."""
    close = seq.guide.close_id
    return tokens.index(close) + 1 if close in tokens else len(tokens)


def device_processing(spans, guided: dict | None = None):
    """-> process(rows) for ModelRunner.verify / decode_tokens: rows [R, V] of the packed logit rows -> (the indices
    of the rows it processed [m] (host ints), those rows processed [m, V], their row_states [m]), all on the device,
    so their tokens are drawn with the others' and read back in the round's one read. spans: (seq, first logit row,
    rows, drafts tensor [>= n - 1 + first] or None, first): row k of a span chooses the token after the output and
    its drafts[:first + k]. guided: id(seq) -> () -> its drafts on the host, for the sequences a grammar masks
    (first 0); called once the verify is queued, so the grammar's walk runs while the device computes."""
    def process(rows: torch.Tensor):
        at, each = [], []
        walked = grammar_masks([(seq, guided[id(seq)]()[:n - 1] if guided and id(seq) in guided else [], n)
                                for seq, _, n, _, _ in spans if masks(seq)], rows.device)
        for seq, r0, n, drafts, first in spans:
            each.append(row_span((n, rows.shape[1]), seq.params, seq.prompt_ids, seq.output_ids,
                                 drafts if drafts is not None else [], walked.get(id(seq)), held_back(seq),
                                 seq.bad_words, history(seq), first, rows.device))
            at += range(r0, r0 + n)
        x = process_batch(rows.index_select(0, to_device(at, rows.device)), each)  # [m, V]
        return at, x, row_states(x)
    return process


def grammar_masks(asks, device) -> dict[int, torch.Tensor]:
    """asks (seq, its drafts before the rows, rows) of guided sequences -> id(seq) -> bool [rows, V], each row's
    allowed tokens after the drafts before it (grammar_matcher.allowed_rows: the grammars walked together), for
    those that have a mask."""
    asks = [(seq, ver, n) for seq, ver, n in asks if seq.guide is not None]
    got = allowed_rows([(seq.guide, ver, n) for seq, ver, n in asks], device) if asks else []
    return {id(seq): mask for (seq, _, _), mask in zip(asks, got) if mask is not None}


class DraftsOnHost:
    """A round's drafts [B, γ], copied to the host behind the propose and before the verify is queued: waiting for
    them waits for the propose only, so a grammar can be walked through them while the device runs the verify."""

    def __init__(self, drafts: torch.Tensor):
        self._rows: list[list[int]] | None = None
        self._done = None
        if drafts.device.type == "cuda":
            self._host = torch.empty(drafts.shape, dtype=drafts.dtype, pin_memory=True)
            self._host.copy_(drafts, non_blocking=True)
            self._done = torch.cuda.Event()
            self._done.record()
        else:
            self._host = drafts

    def row(self, i: int) -> list[int]:
        """Sequence i's drafts (the first call waits for the copy)."""
        if self._rows is None:
            if self._done is not None:
                self._done.synchronize()
            self._rows = self._host.tolist()
        return self._rows[i]


def dead_end(seq, own: bool) -> None:
    """End a request whose next token comes from a row with no token to choose."""
    if own:
        seq.fail(f"no token can follow: the request's grammar or logit processing leaves every token out after "
                 f"{seq.text[-40:]!r}")
    else:
        seq.fail("the model's logits are not finite (NaN or +inf) at this request's next token", own=False)


def draft_processing(seqs, vocab: int, device) -> list[tuple[int, DraftProcessing]]:
    """(row, its DraftProcessing) for the proposed sequences that rewrite their logits."""
    return [(i, DraftProcessing(s.params, s.prompt_ids, s.output_ids, held_back(s), vocab, device, history(s)))
            for i, s in enumerate(seqs) if rewrites(s.params)]


def history(seq) -> History:
    """The sequence's penalty history on the device (made on first use, kept up to date as it is used)."""
    if seq.history is None:
        seq.history = History()
    return seq.history


def held_back(seq) -> tuple[int, ...]:
    """The tokens min_tokens keeps out of a sequence's first outputs: its EOS ids (unless it ignores EOS) and stop ids."""
    return (() if seq.params.ignore_eos else seq.eos_ids) + seq.params.stop_token_ids


def first_token(seq, row: torch.Tensor, sample) -> int | tuple[int, bool]:
    """A prompt's first output token from its last row [1, V], processed (sample: sampling.sample_token); dead_rows'
    (row, own) when no token can be chosen."""
    row = rows_tensor(row)
    allowed = seq.guide.allowed([], 1, row.device) if seq.guide is not None else None
    x = processed_rows(row, seq.params, seq.prompt_ids, [], [], allowed, held_back(seq), seq.bad_words, history(seq))
    dead = dead_rows({0: x})
    if dead:
        return dead[0]
    return sample(x[0], seq.params, seq.seed, len(seq.prompt_ids))
