"""A server's periodic stats line (as vLLM logs one): throughput, batch, KV cache and acceptance since the last
line, every interval while there is work."""
from __future__ import annotations

import logging
import time

log = logging.getLogger("sparkdec.server")
INTERVAL_S = 10.0


class StatsLog:
    """Fed the running totals after each engine step (StatsLog.step); writes a line once per interval_s when
    anything was generated, none while idle."""

    def __init__(self, engine, interval_s: float = INTERVAL_S, clock=time.monotonic):
        self.engine, self.interval_s, self.clock = engine, interval_s, clock
        # (prompt, generated, draft, accepted, bypassed) tokens at the last line
        self.last_t, self.last = clock(), (0, 0, 0, 0, 0)

    def step(self, prompt: int, generated: int, drafted: int, accepted: int, bypassed: int = 0) -> str | None:
        """The line written, if one was due. bypassed: tokens decoded plainly while the bypass (spec/bypass.py) held
        their request's speculation back."""
        now = self.clock()
        if now - self.last_t < self.interval_s:
            return None
        totals = (prompt, generated, drafted, accepted, bypassed)
        d = [a - b for a, b in zip(totals, self.last)]
        span, self.last_t, self.last = max(now - self.last_t, 1e-9), now, totals
        if d[1] <= 0:
            return None
        blocks, sched = self.engine.blocks, self.engine.scheduler
        line = (f"prompt {d[0] / span:.1f} tokens/s, generation {d[1] / span:.1f} tokens/s, running "
                f"{len(sched.running)}, waiting {len(sched.waiting)}, KV cache "
                f"{(blocks.num_pages - blocks.num_free) / max(blocks.num_pages, 1):.1%}")
        if d[2]:
            line += f", draft acceptance {d[3] / d[2]:.1%}"
        if d[4]:
            line += f", {d[4] / d[1]:.1%} of tokens plain (speculation set aside)"
        log.info(line)
        return line
