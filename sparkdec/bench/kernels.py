"""`sparkdec bench kernels`: decode, verify(t), propose and round anatomy against the memory floor, on the device.

Random bf16 weights in the real shapes (valid for speed only). Everything is measured in one run: copy
bandwidth, the floor it implies, our engine, and Hugging Face eager generate as a peer.
"""
from __future__ import annotations

import gc
import json
import statistics
import time

import torch

from sparkdec.bench.shapes import SHAPES, param_bytes, random_models
from sparkdec.engine.llm_engine import Engine, EngineConfig
from sparkdec.sampling import SamplingParams
from sparkdec.spec.simulate import SimulatedAcceptance


def copy_bandwidth(nbytes: int = 4 << 30) -> float:
    """Device-to-device copy, bytes read + written per second (median of 20). 4 GiB: a copy's fixed start and tail
    cost 1% of a 2 GiB one (H200, session 35: 4.207 / 4.23 / 4.278 TB/s at 1 / 2 / 4 GiB, copy_bandwidth_probe_*)."""
    x = torch.empty(nbytes // 2, dtype=torch.bfloat16, device="cuda").normal_()
    y = torch.empty_like(x)
    times = []
    for _ in range(23):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        y.copy_(x)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    del x, y
    return 2 * nbytes / statistics.median(times[3:])


def wall(fn, reps: int = 30, warmup: int = 5) -> float:
    """Median wall seconds of fn() including its host work and final sync."""
    return statistics.median(wall_samples(fn, reps, warmup))


def wall_samples(fn, reps: int, warmup: int) -> list[float]:
    """Wall seconds of each of reps calls of fn() (its host work and a final sync), after warmup calls."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        out.append(time.perf_counter() - t)
    return out


def fit_line(xs, ys) -> tuple[float, float]:
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return my - b * mx, b


# the engines' context window, which sizes the graphs' attention grids: None = the model's own (the engine's default:
# what a served model runs with; 40960 for the Qwen3 shapes); 0 = the context + 1024 (the bench before session 16)
MAX_MODEL_LEN: int | None = None


def make_engine(models, ctx: int, spec: bool) -> Engine:
    window = None if MAX_MODEL_LEN is None else MAX_MODEL_LEN or ctx + 1024
    cfg = EngineConfig(device="cuda", max_model_len=window, kv_cache_tokens=4 * (ctx + 1100),
                       max_num_seqs=4, max_batched_tokens=max(2048, ctx), speculative=spec,
                       prefix_caching=False,  # (time to first token computes the whole prompt)
                       spec_bypass=False)  # (the rounds measured are rounds, whatever random weights accept)
    return Engine(cfg, models=models)


SAMPLED = dict(temperature=0.8, top_p=0.95, seed=7)  # the bench's sampled requests
# the bench's processed requests (greedy, penalties.py): rows processed on the device with the round's one read, one
# step ahead in plain decoding, the next propose chained in speculative rounds (spec/processed.DEVICE_PROCESSING)
PROCESSED = dict(temperature=0.0, repetition_penalty=1.1, presence_penalty=0.3)
# decode steps timed per plain request (greedy, sampled). Until session 24 the timed steps were the first of a longer
# request, so one more forward (queued ahead, its token past the window) was counted: about 1/128 of the figure
DECODE_TOKENS, SAMPLED_TOKENS = 128, 64
WARM_REQUESTS = 3  # plain requests timed after the engine's first (median reported)


def prefill(engine: Engine, ctx: int, max_tokens: int, seed: int = 0, sampling: dict | None = None):
    gen = torch.Generator().manual_seed(seed)
    prompt = torch.randint(0, min(150000, engine.target_cfg.vocab_size), (ctx,), generator=gen).tolist()
    seq = engine.add_request(prompt, SamplingParams(max_tokens=max_tokens, ignore_eos=True, **(sampling or {})))
    while not seq.prefill_done or not seq.output_ids:
        engine.step()
    return seq


def decode_ms(engine: Engine, seq, steps: int) -> float:
    """ms per token of the engine's steps until seq has `steps` more tokens or ends (everything the device queued by
    then included: a step queued ahead, past the window, too, unless the request ends at its limit there)."""
    sync()
    t = time.perf_counter()
    n0 = len(seq.output_ids)
    while not seq.finished and len(seq.output_ids) - n0 < steps:
        engine.step()
    sync()
    return (time.perf_counter() - t) / (len(seq.output_ids) - n0) * 1e3


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def request_ms(engine: Engine, ctx: int, tokens: int, seed: int, sampling: dict | None = None) -> float:
    """ms per decode step of a whole request of 1 + tokens tokens (its prompt's pass gives the first) at ctx."""
    seq = prefill(engine, ctx, 1 + tokens, seed=seed, sampling=sampling)
    ms = decode_ms(engine, seq, tokens)
    assert seq.finished and len(seq.output_ids) == 1 + tokens, "request_ms: the request did not end at its limit"
    return ms


def warm_request_ms(engine: Engine, ctx: int, tokens: int, seed: int, sampling: dict) -> float:
    """request_ms after a short untimed request with the same sampling: a kernel's first use compiles it (lazily)
    outside the timed steps."""
    request_ms(engine, ctx, 8, seed=seed + 100, sampling=sampling)
    return request_ms(engine, ctx, tokens, seed=seed, sampling=sampling)


def verify_times(engine: Engine, seq, passes: int = 6) -> dict:
    """verify(t): one packed forward of t rows at the sequence's end (graph replay + host + readback). The row
    counts are timed in turn over several passes and each t's samples pooled (median), so that a drift of the
    machine over the run weighs on every t alike (timed one t after another, verify(8) / verify(1) read 1.09 and
    1.17 in two runs on one H200)."""
    s = seq.anchor_position
    samples: dict[int, list] = {t: [] for t in range(1, 9)}
    for _ in range(passes):
        for t in samples:
            pieces = [(seq.block_table, [seq.anchor] * t, list(range(s, s + t)))]
            samples[t] += wall_samples(lambda: engine.runner.verify(pieces, list(range(t))), reps=6, warmup=2)
    return {t: statistics.median(v) * 1e3 for t, v in samples.items()}


def graph_replay_ms(engine: Engine, seq, rows: int = 1, position: int | None = None) -> float | None:
    """Device time of one forward of `rows` rows at the sequence's end (1: decode), its verify graph replayed
    back to back, no host work. position (one row): a position the sequence has already decoded, with its own token
    (the replay rewrites that position's keys and values with what decoding wrote there)."""
    assert position is None or rows == 1, "graph_replay_ms: a decoded position takes one row"
    g = engine.runner.graphs
    if g is None:
        return None
    s = seq.anchor_position if position is None else position
    token = seq.anchor if position is None else seq.token_at(position)
    pieces = [(seq.block_table, [token] * rows, list(range(s, s + rows)))]
    tier = g.tier_for(rows, 1)
    g._fill(pieces, [seq.block_table], tier)
    return replay_ms(g.graph_for(pieces, tier)[0])


def decode_replays_ms(engine: Engine, seq, first: int, stride: int = 8) -> float | None:
    """The decode graph's device time averaged over the positions decoding went through (first .. the anchor's, every
    stride-th): what decode_ms timed, less the host. A replay at one position alone can differ from that mean by a
    few percent: at 2k keys the attention's first 128-key split fills up as decoding proceeds."""
    times = [graph_replay_ms(engine, seq, 1, p) for p in range(first, seq.anchor_position, stride)]
    return sum(times) / len(times) if times and None not in times else None


def propose_time(engine: Engine, seq) -> float:
    r = engine.runner
    pick = lambda z, k: z.argmax(-1)
    return wall(lambda: r.propose([seq.block_table], [seq.anchor], [seq.anchor_position], pick, greedy=True)[0].tolist()) * 1e3


def propose_replay_ms(engine: Engine, seq) -> float:
    """Device time of the one-sequence propose graph, replayed back to back after one staged run (no host work)."""
    r = engine.runner
    if r.propose_graphs is None:
        return None
    r.propose([seq.block_table], [seq.anchor], [seq.anchor_position], lambda z, k: z.argmax(-1), greedy=True)
    graph = r.propose_graphs.graphs[r.propose_graphs.tier_for(1)][0]
    return replay_ms(graph)


def replay_ms(graph, reps: int = 20) -> float:
    for _ in range(3):
        graph.replay()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(reps):
        graph.replay()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) / reps


def propose_floor_bytes(engine: Engine, ctx: int = 0) -> int:
    """Bytes one propose must read: the drafter's weights it uses, the LM head once, W2 once per slot, and the draft
    layers' context K/V at ctx positions (the block rows attend to all of it)."""
    d = engine.drafter
    dc = engine.draft_cfg
    lc = dc.layers
    elem = engine.runner.draft_kv.layers[0][0].element_size()
    kv = 2 * lc.num_hidden_layers * lc.num_key_value_heads * lc.head_dim * elem * ctx  # K and V
    size = lambda t: t.numel() * t.element_size()
    w1, w2 = d.markov_head.markov_w1.weight, d.markov_head.markov_w2.weight
    # NOTE: fc and hidden_norm project the target's taps into the context K/V inside the verify graph, never in the
    # propose: not counted (sessions 1-6 counted them: a floor 9 us higher at the Qwen3-4B shape, the ratio better)
    ctx_proj = sum(size(p) for m in (d.fc, d.hidden_norm) for p in m.parameters())
    return (param_bytes(d) - size(w1) - size(w2) - ctx_proj  # layers, norms, heads (W1 rows are gathered)
            + size(engine.target.lm_head.weight)  # base logits of all γ slots in one pass
            + dc.block_size * size(w2)  # W2 streamed once per slot
            + kv)


def simulated_rounds(models, ctx: int, new_tokens: int) -> dict:
    out = {}
    for al in range(1, 8):
        eng = make_engine(models, ctx, spec=True)
        eng.rounds.simulate = SimulatedAcceptance(al)
        seq = prefill(eng, ctx, new_tokens + 3 * al)
        for _ in range(3):  # NOTE: the first rounds load kernels the graphs did not (the chain's acceptance ops)
            eng.step()
        t0 = {k: v for k, v in eng.rounds.timing.items()}
        eng.rounds.device_events = []
        n0 = len(seq.output_ids)
        ms = decode_ms(eng, seq, new_tokens)
        steps = eng.rounds.timing["steps"] - t0["steps"]
        # host clocks: when launches returned and how long the host spent accepting and scheduling
        anatomy = {k: (eng.rounds.timing[k] - t0[k]) / steps * 1e3 for k in ("accept", "host")}
        dev = device_anatomy(eng.rounds.device_events)
        # NOTE: per round from the rounds run, not ms * al: the last round commits fewer than al tokens when it
        # reaches max_tokens, and ms * al then counted that shortfall as time outside propose and verify
        round_ms = ms * (len(seq.output_ids) - n0) / steps
        out[al] = {"tokens_per_s": 1e3 / ms, "ms_per_round": round_ms, "rounds": steps, **dev,
                   "outside_propose_verify_ms": round_ms - dev["propose_device_ms"] - dev["verify_device_ms"],
                   **{f"{k}_host_ms": v for k, v in anatomy.items()}}
        del eng
        gc.collect()
    return out


def spec_rounds(engine: Engine, ctx: int, sampling: dict, kind: str) -> dict:
    """Speculative rounds of a request with these sampling settings (kind: sampled, processed), the round's cost
    with such verify rows: ms per round and tokens per round. (Random weights: argmax drafts are rarely accepted;
    coupled drafts sometimes are, because nearly flat distributions that share the race noise pick the same token:
    no measure of a trained drafter.)"""
    seq = prefill(engine, ctx, 100, seed=4, sampling=sampling)
    decode_ms(engine, seq, 8)  # untimed: a kernel's first use compiles it outside the timed rounds
    steps0, n0 = engine.rounds.timing["steps"], len(seq.output_ids)
    ms = decode_ms(engine, seq, 48)
    rounds = engine.rounds.timing["steps"] - steps0
    tokens = len(seq.output_ids) - n0
    engine.abort(seq.request_id)
    return {f"spec_{kind}_ms_per_round": ms * tokens / rounds, f"spec_{kind}_tokens_per_round": tokens / rounds}


def device_anatomy(events: list) -> dict:
    """Mean device time of the propose (round start -> propose queued) and of the verify (-> forward done,
    before the readback) over the rounds whose (start, proposed, verified) CUDA events were collected."""
    torch.cuda.synchronize()
    n = max(1, len(events))
    return {"propose_device_ms": sum(a.elapsed_time(b) for a, b, _ in events) / n,
            "verify_device_ms": sum(b.elapsed_time(c) for _, b, c in events) / n, "rounds_timed": len(events)}


def hf_peer(models, ctx: int, new_tokens: int = 32) -> float | None:
    """Hugging Face transformers eager generate on the same weights -> tokens/s (decode only)."""
    try:
        from transformers import Qwen3Config, Qwen3ForCausalLM
    except ImportError:
        return None
    tc = models[1]
    hf_cfg = Qwen3Config(vocab_size=tc.vocab_size, hidden_size=tc.hidden_size, intermediate_size=tc.intermediate_size,
                         num_hidden_layers=tc.num_hidden_layers, num_attention_heads=tc.num_attention_heads,
                         num_key_value_heads=tc.num_key_value_heads, head_dim=tc.head_dim, rope_theta=tc.rope_theta,
                         tie_word_embeddings=tc.tie_word_embeddings, max_position_embeddings=tc.max_position_embeddings)
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("cuda"):
            hf = Qwen3ForCausalLM(hf_cfg)
    finally:
        torch.set_default_dtype(torch.float32)
    hf.load_state_dict(models[0].row_major_state_dict(), strict=False)  # (the engines tile some weights in place)
    hf = hf.eval()
    ids = torch.randint(0, 150000, (1, ctx), device="cuda")
    kw = dict(do_sample=False, attention_mask=torch.ones_like(ids))
    hf.generate(ids, max_new_tokens=4, min_new_tokens=4, **kw)
    torch.cuda.synchronize()
    t = time.perf_counter()
    hf.generate(ids, max_new_tokens=1, min_new_tokens=1, **kw)
    torch.cuda.synchronize()
    t_prefill = time.perf_counter() - t
    t = time.perf_counter()
    hf.generate(ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens, **kw)
    torch.cuda.synchronize()
    return (new_tokens - 1) / (time.perf_counter() - t - t_prefill)


def apply_floors(res: dict, bw: float) -> None:
    """The run's floors at copy bandwidth bw (bytes/s) and its figures against them."""
    res["floor_ms"] = (res["weight_bytes"] + res["kv_bytes"]) / bw * 1e3
    res["fraction_of_floor"] = res["floor_ms"] / res["plain_decode_ms"]
    pfloor = res["propose_floor_ms"] = res["propose_floor_bytes"] / bw * 1e3
    res["propose_over_floor"] = res["propose_ms"] / pfloor
    dev = res["propose_device_ms"]
    res["propose_device_over_floor"] = dev / pfloor if dev else None


def bench_shape(shape: str, ctx: int, bw: float, with_peer: bool, with_sim: bool) -> dict:
    models = random_models(shape)
    tc = SHAPES[shape]
    weights = param_bytes(models[0])
    elem = next(models[0].parameters()).element_size()  # the cache holds the weights' dtype
    kv_bytes = 2 * tc.num_hidden_layers * tc.num_key_value_heads * tc.head_dim * elem * ctx  # K and V
    plain = make_engine(models, ctx, spec=False)
    prefill(plain, ctx, 1, seed=2)  # compiles the prefill kernels; the request ends with its first token
    torch.cuda.synchronize()
    t = time.perf_counter()
    prefill(plain, ctx, 1, seed=1)  # a second prompt on an idle engine: time to first token
    ttft = (time.perf_counter() - t) * 1e3
    # plain decoding: whole requests of 129 tokens (the prompt's pass gives the first), so the 128 timed tokens
    # are all their decode steps and one forward each (the lookahead queues no step past a request's limit). The
    # engine's first decoding request is reported apart (what a server's first request pays once); the figure is
    # the median of the next WARM_REQUESTS
    cold = request_ms(plain, ctx, DECODE_TOKENS, seed=4)
    warm = [request_ms(plain, ctx, DECODE_TOKENS, seed=5 + i) for i in range(WARM_REQUESTS)]
    dec = statistics.median(warm)
    seq = prefill(plain, ctx, 200)  # decoded on, for the replays at positions it decoded
    first = seq.anchor_position
    decode_ms(plain, seq, DECODE_TOKENS)
    replay_end = graph_replay_ms(plain, seq)  # at the next position
    replay = decode_replays_ms(plain, seq, first)
    plain.abort(seq.request_id)  # NOTE: batch 1: the sampled request decodes alone
    sampled, processed = (warm_request_ms(plain, ctx, SAMPLED_TOKENS, 3, kind) for kind in (SAMPLED, PROCESSED))
    res = {"prefill_ttft_ms": ttft, "prefill_tokens_per_s": ctx / ttft * 1e3, "decode_graph_replay_ms": replay,
           "decode_graph_replay_at_end_ms": replay_end, "host_ms_per_decode_step": dec - replay if replay else None,
           "shape": shape, "ctx": ctx, "max_model_len": plain.max_model_len,
           "cuda_graphs": plain.runner.graphs is not None, "weight_bytes": weights, "kv_bytes": kv_bytes,
           "plain_decode_ms": dec, "plain_tokens_per_s": 1e3 / dec,
           "plain_decode_requests_ms": warm, "plain_decode_first_request_ms": cold,
           "plain_sampled_decode_ms": sampled, "sampling": SAMPLED,
           "plain_processed_decode_ms": processed, "processing": PROCESSED}
    spec = make_engine(models, ctx, spec=True)
    sseq = prefill(spec, ctx, 64)
    vt = verify_times(spec, sseq)
    a, b = fit_line(list(vt), list(vt.values()))
    prop = propose_time(spec, sseq)
    prop_dev = propose_replay_ms(spec, sseq)
    spec.abort(sseq.request_id)
    # propose_ms: wall clock of one propose call (staging, graph launch, readback of the drafts);
    # propose_device_ms: its graph on the device alone (the host part is in the round anatomy's outside time)
    res.update(verify_ms=vt, verify_fit_a_ms=a, verify_fit_b_ms=b, verify8_over_verify1=vt[8] / vt[1],
               propose_ms=prop, propose_floor_bytes=propose_floor_bytes(spec, ctx), propose_device_ms=prop_dev,
               **spec_rounds(spec, ctx, SAMPLED, "sampled"), **spec_rounds(spec, ctx, PROCESSED, "processed"))
    apply_floors(res, bw)
    del plain, spec
    gc.collect()
    if with_sim:
        res["simulated"] = simulated_rounds(models, ctx, 96)
    print(json.dumps(res), flush=True)
    if with_peer:
        try:
            res["hf_eager_tokens_per_s"] = hf_peer(models, ctx)
            res["speedup_vs_hf"] = res["plain_tokens_per_s"] / res["hf_eager_tokens_per_s"]
        except Exception as exc:  # the peer is informative; never lose our own numbers to it
            res["hf_eager_error"] = repr(exc)
    del models
    torch.cuda.empty_cache()
    return res


def main(shapes=("qwen3-4b",), contexts=(1024,), peer=True, simulate=True, on_run=None) -> dict:
    bw = copy_bandwidth()  # measured again at the end: the floors use the higher reading
    # the device's UUID tells runs on the same machine apart: machines of the same kind differ by about 1% in decode
    uuid = str(getattr(torch.cuda.get_device_properties(0), "uuid", ""))
    results = {"device": torch.cuda.get_device_name(), "device_uuid": uuid, "torch": torch.__version__,
               "copy_bandwidth_Bps": bw, "copy_bandwidth_start_Bps": bw, "runs": []}
    for shape in shapes:
        for i, ctx in enumerate(contexts):
            r = bench_shape(shape, ctx, bw, with_peer=peer and i == 0, with_sim=simulate and i == 0)
            results["runs"].append(r)
            if on_run is not None:
                on_run(results)
            print(f"{shape} ctx {ctx} (window {r['max_model_len']}): prefill {r['prefill_ttft_ms']:.1f} ms, plain {r['plain_decode_ms']:.2f} ms/token ({r['fraction_of_floor']:.0%} of floor "
                  f"{r['floor_ms']:.2f} ms), verify(1) {r['verify_ms'][1]:.2f} verify(8) {r['verify_ms'][8]:.2f} ms, "
                  f"propose {r['propose_ms']:.2f} ms (device {r['propose_device_ms'] or 0:.2f}, floor "
                  f"{r['propose_floor_ms']:.2f}), sampled: plain "
                  f"{r['plain_sampled_decode_ms']:.2f} ms/token, spec {r['spec_sampled_ms_per_round']:.2f} ms/round, "
                  f"processed: plain {r['plain_processed_decode_ms']:.2f} ms/token, spec "
                  f"{r['spec_processed_ms_per_round']:.2f} ms/round",
                  flush=True)
    # a lower reading at one end (seen: 4.14 TB/s at a run's start, 4.24 in the next process on the same machine)
    # would flatter every fraction of the floor
    end = results["copy_bandwidth_end_Bps"] = copy_bandwidth()
    results["copy_bandwidth_Bps"] = max(bw, end)
    for r in results["runs"]:
        apply_floors(r, results["copy_bandwidth_Bps"])
    print(f"copy bandwidth {bw / 1e12:.3f} TB/s at the start, {end / 1e12:.3f} at the end; at the higher: " + ", ".join(
        f"{r['shape']} ctx {r['ctx']} {r['fraction_of_floor']:.1%} of floor {r['floor_ms']:.3f} ms" for r in results["runs"]))
    return results
