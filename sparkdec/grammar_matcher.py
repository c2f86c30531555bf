"""A guided request's grammar state (xgrammar): advanced by each committed token; walked through drafts and rolled
back to give each verify row, and each draft slot, the tokens plain decoding would allow at that position.

With a thinking block (Guided.thinking = (open, close) tokens, Qwen3's `<think>` / `</think>`) the output may begin
with the block: the first row also allows the open token; after it the output is free up to the close token, after
which a second grammar applies (the same one, allowing newlines first). An output that does not begin with the block
follows the grammar from its first token.
"""
from __future__ import annotations

import functools
import logging

import torch

START, FREE, GRAMMAR = "start", "free", "grammar"  # phases: may still open the block / inside it / under the grammar
log = logging.getLogger(__name__)


def _guarded(default):
    """An xgrammar failure in one request's matcher ends that request, not the engine step of every request: the
    method returns `default` (no mask, no forced drafts; accept refuses, so Sequence.append fails the request with
    `fault` before it commits a token) from then on."""
    def wrap(method):
        @functools.wraps(method)
        def guarded(self, *args, **kwargs):
            if self.fault is None:
                try:
                    return method(self, *args, **kwargs)
                except Exception as exc:  # noqa: BLE001 (xgrammar raises RuntimeError, ValueError, ...)
                    log.warning("guided decoding failed in xgrammar: %r", exc)
                    self.fault = f"guided decoding failed in the grammar engine: {type(exc).__name__}: {exc}"
            return default
        return guarded
    return wrap


class Matcher:
    def __init__(self, compiled, stop_ids: tuple[int, ...], vocab_size: int, thinking=None, thinking_open=False,
                 encode=None):
        """compiled: the grammar; thinking: None, or (open id, close id, the grammar after the block, compiled);
        thinking_open: the prompt already opened the block (the output begins inside it); encode: text -> token ids
        (the tokenizer's), for forced()."""
        import xgrammar as xgr

        def matcher(g):
            return xgr.GrammarMatcher(g, override_stop_tokens=list(stop_ids) or None)

        self.vocab_size, self.encode = vocab_size, encode
        info = compiled.tokenizer_info  # special ids no grammar emits (allows() refuses them, no xgrammar warning)
        self.refused = frozenset(info.special_token_ids) - set(stop_ids or info.stop_token_ids)
        self.fault: str | None = None  # an xgrammar failure (_guarded): the request ends at its next token
        self._bits = xgr.allocate_token_bitmask(8, vocab_size)  # int32 [rows, ceil(V / 32)]
        self._first = matcher(compiled)  # the grammar from the first token
        self.open_id = self.close_id = None
        self._after = None
        if thinking is not None:
            self.open_id, self.close_id = thinking[0], thinking[1]
            self._after = matcher(thinking[2])
        self._live = self._first  # where committed grammar tokens go: the second grammar once a block closed
        self.phase = GRAMMAR if thinking is None else FREE if thinking_open else START
        self._walk: _Walk | None = None  # a propose's walk through its drafts

    def grammar_for(self, phase: str):
        """The matcher a phase's tokens go to (None inside the block)."""
        return None if phase == FREE else self._live

    @_guarded(False)
    def accept(self, token: int) -> bool:
        """A committed token -> False if the grammar refuses it (its mask allowed it: an xgrammar fault)."""
        if self.phase == FREE:
            if token == self.close_id:
                self.phase, self._live = GRAMMAR, self._after
            return True
        if self.phase == START:
            if token == self.open_id:
                self.phase = FREE
                return True
            self.phase = GRAMMAR
        m = self.grammar_for(GRAMMAR)
        return m.is_terminated() or m.accept_token(token)

    def free(self) -> bool:
        """Is the output inside its thinking block (no grammar until the close token)?"""
        return self.phase == FREE

    def constrains_drafts(self) -> bool:
        """Is the next draft under a grammar (not inside a thinking block)?"""
        return self.phase != FREE

    @_guarded(None)
    def allowed(self, drafts: list[int], n: int, device) -> torch.Tensor | None:
        """bool [n, V]: row k's allowed tokens after the committed tokens and drafts[:k], or None when every row is
        free (inside a thinking block that no draft closes). Rows past a draft the grammar refuses (or past its end)
        allow every token: their tokens are never committed (the row before cannot choose that draft)."""
        import xgrammar as xgr

        if self.unmasked(drafts, n):
            return None
        if self._bits.shape[0] < n:
            self._bits = xgr.allocate_token_bitmask(n, self.vocab_size)
        bits = self._bits[:n]
        bits.fill_(-1)  # every bit set: every token allowed
        walk = _Walk(self)
        for k in range(n):
            walk.mask_into(self._bits, k)
            if k < n - 1:
                walk.step(drafts[k])
        walk.undo()
        return self.unpack(bits, device)

    @_guarded(False)
    def allows(self, drafts: list[int], tokens: list[int], kept: list[list[int]] | None = None) -> bool:
        """Does the grammar allow each of a round's tokens (row k's: after the committed tokens and drafts[:k]) along
        the drafts they accept (rows up to the first token that is not its draft), as allowed()'s masks would, and
        with kept, every id of kept[k] in those rows too (a -1 allows nothing)? A token at a time (accepted on trial,
        rolled back): no mask is filled."""
        walk, ok = _Walk(self), True
        for k, token in enumerate(tokens):
            if not walk.allows(token) or (kept is not None and not all(t >= 0 and walk.allows(t) for t in kept[k])):
                ok = False
                break
            if k == len(tokens) - 1 or k >= len(drafts) or token != drafts[k]:
                break
            walk.step(token)
        walk.undo()
        return ok

    def unmasked(self, drafts: list[int], n: int) -> bool:
        """Are all n rows after these drafts free (inside a thinking block that none of them closes)?"""
        return self.phase == FREE and self.close_id not in drafts[:n - 1]

    @_guarded([])
    def forced(self, limit: int) -> list[int]:
        """Drafts for the text the grammar forces next (xgrammar's jump-forward string: a JSON key and its quotes, say),
        as the tokenizer writes it, at most limit tokens, cut where the grammar refuses one; [] inside or before a
        thinking block. The verify checks them like any drafts: plain decoding may write that text otherwise."""
        if self.encode is None or self.phase != GRAMMAR or self._live.is_terminated():
            return []
        try:
            text = self._live.find_jump_forward_string()
        except (UnicodeDecodeError, RuntimeError):  # (bytes that end inside a character: "北京" / "南京" share one)
            return []  # (drafts are only proposals: none is better than failing the requests in flight)
        walk, out = _Walk(self), []
        for token in self.encode(text)[:limit] if text else ():
            walk.step(token)
            if walk.dead:
                break
            out.append(token)
        walk.undo()
        return out

    @_guarded(None)
    def draft_mask(self, device) -> torch.Tensor | None:
        """bool [V]: what the grammar allows for the next draft of a propose's walk (after the committed tokens and
        the drafts so far), or None when that slot is free."""
        if self._walk is None:
            self._walk = _Walk(self)
        self._bits[:1].fill_(-1)
        return self.unpack(self._bits[:1], device)[0] if self._walk.mask_into(self._bits, 0) else None

    @_guarded(None)
    def draft(self, token: int) -> None:
        if self._walk is None:
            self._walk = _Walk(self)
        self._walk.step(token)

    @_guarded(None)
    def undo_drafts(self) -> None:
        if self._walk is not None:
            self._walk.undo()
            self._walk = None

    def unpack(self, bits: torch.Tensor, device) -> torch.Tensor:
        """int32 [n, W] bitmask -> bool [n, V] on device (bit j of word w: token 32 w + j), copied from page-locked
        memory on CUDA (a pageable copy would wait for the queued verify: spec/processed.GUIDED_ON_DEVICE)."""
        words = bits.pin_memory().to(device, non_blocking=True) if torch.device(device).type == "cuda" else bits.to(device)
        shifts = torch.arange(32, dtype=torch.int32, device=device)
        return (((words[:, :, None] >> shifts) & 1) != 0).reshape(bits.shape[0], -1)[:, :self.vocab_size]


# True: a round's guided requests are walked together (allowed_rows) by xgrammar's batch matcher, on half the machine's
# cores; False: one at a time. CPU, 2 cores (one batch thread), a synthetic 151936-token vocabulary, 8 rows per
# request: 4 requests 31.5 -> 33.2 ms, 16 requests 80.3 -> 119.4 ms (grammar_walk_cost_cpu_2026-12-05.json): slower
# on one thread; unmeasured where it gets several (scripts/device_next.sh 63), so off.
WALK_TOGETHER = False


def allowed_rows(asks: list, device, together: bool | None = None) -> list:
    """Matcher.allowed for several requests: asks (matcher, drafts, n) -> each one's bool [n, V] or None. together
    (None: WALK_TOGETHER): their grammars walked depth by depth, each depth's masks filled by xgrammar's batch matcher
    on several threads (the requests' walks are independent: the same masks as one request at a time), copied to
    the device in one transfer; a failure in xgrammar falls back to one request at a time (each then guarded)."""
    together = WALK_TOGETHER if together is None else together
    live = [j for j, (m, drafts, n) in enumerate(asks) if m.fault is None and not m.unmasked(drafts, n)]
    out = [None] * len(asks)
    if len(live) < 2 or not together:
        for j in live:
            out[j] = asks[j][0].allowed(*asks[j][1:], device)
        return out
    try:
        bits, at = _walk_together([asks[j] for j in live])
        rows = asks[live[0]][0].unpack(bits, device)  # [sum n, V]
    except Exception:  # noqa: BLE001 (xgrammar: one request's matcher; each alone finds which)
        log.warning("batched grammar walk failed; walking the requests one at a time", exc_info=True)
        for j in live:
            out[j] = asks[j][0].allowed(*asks[j][1:], device)
        return out
    for j, a in zip(live, at):
        out[j] = rows[a:a + asks[j][2]]
    return out


def _walk_together(asks: list) -> tuple:
    """The masks of asks (matcher, drafts, n), all walked depth by depth -> (int32 [sum n, W] bitmask, each ask's
    first row)."""
    import xgrammar as xgr

    at, total = [], 0
    for _, _, n in asks:
        at.append(total)
        total += n
    bits = xgr.allocate_token_bitmask(total, asks[0][0].vocab_size)
    bits.fill_(-1)  # every bit set: every token allowed
    walks = [_Walk(m) for m, _, _ in asks]
    try:
        for k in range(max(n for _, _, n in asks)):
            now = [(w, a + k) for w, a, (_, _, n) in zip(walks, at, asks) if k < n and w.masks()]
            if now:
                _batch().batch_fill_next_token_bitmask([w.m for w, _ in now], bits, [r for _, r in now])
            for w, row in now:
                w.open_bit(bits, row)
            for w, (_, drafts, n) in zip(walks, asks):
                if k < n - 1:
                    w.step(drafts[k])
    finally:
        for w in walks:  # (each on its own: a matcher that cannot go back ends its request, not the others')
            try:
                w.undo()
            except Exception as exc:  # noqa: BLE001
                w.o.fault = f"guided decoding failed in the grammar engine: {type(exc).__name__}: {exc}"
    return bits, at


@functools.lru_cache(maxsize=1)
def _batch():
    """xgrammar's batch matcher (its threads: half the machine's, xgrammar's default)."""
    import xgrammar as xgr

    return xgr.BatchGrammarMatcher()


class _Walk:
    """Drafts fed to a matcher on trial: the phase they reach and the tokens its grammar took (undo gives them back).
    A draft the grammar refuses ends the walk: later rows are free."""

    def __init__(self, owner: Matcher):
        self.o, self.phase, self.taken, self.dead = owner, owner.phase, 0, False
        self.m = owner.grammar_for(owner.phase)

    def masks(self) -> bool:
        """Is the walk's next row masked (under a grammar that is not done, no draft refused so far)?"""
        return not (self.phase == FREE or self.dead or self.m.is_terminated())

    def mask_into(self, bits: torch.Tensor, row: int) -> bool:
        """Write the row's mask into bits (left all ones when free) -> whether the row is masked."""
        if not self.masks():
            return False
        self.m.fill_next_token_bitmask(bits, row)
        self.open_bit(bits, row)
        return True

    def allows(self, token: int) -> bool:
        """Would the walk's next row's mask allow this token (mask_into's, without filling it)?"""
        if not self.masks() or (self.phase == START and token == self.o.open_id):
            return True
        if not 0 <= token < self.o.vocab_size or token in self.o.refused or not self.m.accept_token(token):
            return False
        self.m.rollback(1)
        return True

    def open_bit(self, bits: torch.Tensor, row: int) -> None:
        """Before the thinking block may open (START), its open token is allowed too in a row filled by the grammar."""
        if self.phase == START:
            bits[row, self.o.open_id // 32] |= _bit(self.o.open_id % 32)

    def step(self, token: int) -> None:
        if self.dead:
            return
        if self.phase == FREE:
            if token == self.o.close_id:
                self.phase, self.m = GRAMMAR, self.o._after
            return
        if self.phase == START:
            if token == self.o.open_id:
                self.phase, self.m = FREE, None
                return
            self.phase = GRAMMAR
        if self.m.is_terminated() or not self.m.accept_token(token):
            self.dead = True
            return
        self.taken += 1

    def undo(self) -> None:
        if self.taken:
            self.m.rollback(self.taken)
        self.taken = 0


def _bit(j: int) -> int:
    """Bit j of an int32 word, as the signed value torch stores."""
    return (1 << j) - (1 << 32) if j == 31 else 1 << j
