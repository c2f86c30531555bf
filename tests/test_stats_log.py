"""The server's periodic stats line: rates since the last line, batch, KV cache, acceptance; nothing while idle."""
from __future__ import annotations

import logging
from types import SimpleNamespace

from sparkdec.server.stats_log import StatsLog


def test_stats_line_every_interval_with_rates_since_the_last_and_none_while_idle(caplog):
    now = [0.0]
    engine = SimpleNamespace(blocks=SimpleNamespace(num_pages=100, num_free=75),
                             scheduler=SimpleNamespace(running=[1, 2], waiting=[3]))
    stats = StatsLog(engine, interval_s=10.0, clock=lambda: now[0])
    assert stats.step(50, 10, 14, 7) is None  # not due yet
    now[0] = 10.0
    with caplog.at_level(logging.INFO, logger="sparkdec.server"):
        line = stats.step(100, 200, 140, 70)
    assert line == ("prompt 10.0 tokens/s, generation 20.0 tokens/s, running 2, waiting 1, KV cache 25.0%, "
                    "draft acceptance 50.0%") and line in caplog.text
    now[0] = 25.0
    assert stats.step(100, 200, 140, 70) is None  # idle: nothing generated since
    now[0] = 30.0
    assert stats.step(100, 260, 140, 70) is None  # (the idle check started a new interval)
    now[0] = 35.0
    assert stats.step(100, 260, 140, 70).startswith("prompt 0.0 tokens/s, generation 6.0 tokens/s")  # over 10 s
    now[0] = 45.0
    assert stats.step(100, 360, 160, 80, 25).endswith(", 25.0% of tokens plain (speculation set aside)")  # (bypass)
