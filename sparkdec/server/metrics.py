"""Prometheus metrics of one server (own CollectorRegistry): requests, latency, KV pages, speculation (vLLM names)."""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily

PREFIX = "sparkdec:"
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0)
TPOT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)


class Metrics:
    """Updated from the engine thread (prometheus_client is thread-safe); gauges read the engine at scrape time."""

    def __init__(self, engine):
        self.registry = r = CollectorRegistry(auto_describe=True)
        self.requests = Counter(PREFIX + "request_success", "Finished requests by finish reason.",
                                ["finished_reason"], registry=r)
        self.prompt_tokens = Counter(PREFIX + "prompt_tokens", "Prompt tokens of admitted requests.", registry=r)
        self.generation_tokens = Counter(PREFIX + "generation_tokens", "Generated tokens.", registry=r)
        self.ttft = Histogram(PREFIX + "time_to_first_token_seconds", "Time to first token.",
                              buckets=TTFT_BUCKETS, registry=r)
        self.tpot = Histogram(PREFIX + "time_per_output_token_seconds",
                              "Mean time per output token after the first, per request.", buckets=TPOT_BUCKETS, registry=r)
        self.e2e = Histogram(PREFIX + "e2e_request_latency_seconds", "Request latency from arrival to finish.",
                             buckets=TTFT_BUCKETS, registry=r)
        self.drafts = Counter(PREFIX + "spec_decode_num_drafts", "Speculative rounds (one draft per request per round).",
                              registry=r)
        self.draft_tokens = Counter(PREFIX + "spec_decode_num_draft_tokens", "Draft tokens verified.", registry=r)
        self.accepted_tokens = Counter(PREFIX + "spec_decode_num_accepted_tokens", "Draft tokens accepted.", registry=r)
        self.accepted_per_pos = Counter(PREFIX + "spec_decode_num_accepted_tokens_per_pos",
                                        "Accepted draft tokens by position in the draft block.", ["position"],
                                        registry=r)
        self.bypassed_tokens = Counter(PREFIX + "spec_decode_bypassed_tokens", "Tokens decoded plainly while "
                                       "speculation was set aside for their request (it was not expected to pay).",
                                       registry=r)
        blocks, sched = engine.blocks, engine.scheduler
        Gauge(PREFIX + "kv_cache_pages_total", "KV cache pages.", registry=r).set_function(lambda: blocks.num_pages)
        Gauge(PREFIX + "kv_cache_pages_used", "KV cache pages reserved by requests.",
              registry=r).set_function(lambda: blocks.num_pages - blocks.num_free)
        Gauge(PREFIX + "kv_cache_usage_perc", "Fraction of KV cache pages in use.",
              registry=r).set_function(lambda: (blocks.num_pages - blocks.num_free) / max(blocks.num_pages, 1))
        Gauge(PREFIX + "num_requests_running", "Requests in the running batch.",
              registry=r).set_function(lambda: len(sched.running))
        Gauge(PREFIX + "num_requests_waiting", "Requests waiting for a batch slot or KV pages.",
              registry=r).set_function(lambda: len(sched.waiting))
        r.register(_SchedulerCounters(sched))
        r.register(_GuidedChecks(engine))
        # prompt, generated, draft, accepted and bypassed tokens so far (for server/stats_log.py)
        self.totals = [0, 0, 0, 0, 0]
        for j in range(engine.block_size):  # every position shows up from the start, at 0
            self.accepted_per_pos.labels(position=str(j))

    def spec_delta(self, old, new) -> None:
        """Add the speculative progress between two snapshots of one request's SpecStats fields."""
        self.drafts.inc(new[0] - old[0])
        self.draft_tokens.inc(new[1] - old[1])
        self.accepted_tokens.inc(new[2] - old[2])
        self.bypassed_tokens.inc(new[4] - old[4])
        self.totals[4] += new[4] - old[4]
        self.totals[2] += new[1] - old[1]
        self.totals[3] += new[2] - old[2]
        for j, (a, b) in enumerate(zip(old[3] or [0] * len(new[3]), new[3])):
            if b > a:
                self.accepted_per_pos.labels(position=str(j)).inc(b - a)

    def finished(self, reason: str, arrival: float, first: float | None, end: float, num_tokens: int) -> None:
        self.requests.labels(finished_reason=reason).inc()
        self.e2e.observe(max(end - arrival, 0.0))
        if first is not None and num_tokens > 1:
            self.tpot.observe(max(end - first, 0.0) / (num_tokens - 1))

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _GuidedChecks:
    """Guided rounds (and plain steps ahead) whose tokens were checked against their grammar after the read instead of
    masked before it (spec/processed.GUIDED_CHECKED), and those the grammar refused (masked again after the read):
    whether checking pays on this model's outputs."""

    def __init__(self, engine):
        self.engine = engine

    def collect(self):
        counts = [a + b for a, b in zip(self.engine.rounds.guided_checks, self.engine.lookahead.guided_checks
                                        if self.engine.lookahead is not None else (0, 0))]
        yield CounterMetricFamily(PREFIX + "guided_checks", "Guided rounds whose tokens were checked against their "
                                  "grammar after the read instead of masked.", value=counts[0])
        yield CounterMetricFamily(PREFIX + "guided_check_refusals", "Checked guided rounds the grammar refused a "
                                  "token of (masked and drawn again after the read).", value=counts[1])


class _SchedulerCounters:
    """Counters the scheduler keeps itself, read at scrape time."""

    def __init__(self, sched):
        self.sched = sched

    def collect(self):
        yield CounterMetricFamily(PREFIX + "num_preemptions", "Requests that gave their KV pages back to running "
                                  "ones and recomputed their context later.", value=self.sched.num_preemptions)
        yield CounterMetricFamily(PREFIX + "prefix_cache_queries", "Prompt tokens looked up in the prefix cache at "
                                  "admission.", value=self.sched.prefix_queries)
        yield CounterMetricFamily(PREFIX + "prefix_cache_hits", "Prompt tokens found in the prefix cache (their "
                                  "prefill skipped).", value=self.sched.prefix_hits)
