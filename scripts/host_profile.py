"""Host time of one Engine.step on CPU with fake CUDA graphs (the model forward stubbed): where the round's
non-device time goes. usage: python scripts/host_profile.py plain|spec [B] [stop] [--cprofile] [--no-ahead]
NOTE: with the lookahead on (the default), a speculative round also runs the device-side acceptance and propose
staging of spec/chain.py, which here execute on the CPU; on a GPU they are queued, so --no-ahead gives the
comparable host figure.
"""
import sys, time, functools, cProfile, pstats, io, statistics
import torch
torch.set_num_threads(1)
from sparkdec.engine.llm_engine import Engine, EngineConfig, DEFAULT_PAIR
from sparkdec.engine.graphs import TargetGraphs, ProposeGraphs, TIERS
from sparkdec.sampling import SamplingParams
import sparkdec.engine.runner as runner_mod
import sparkdec.spec.round as round_mod

MODE = sys.argv[1]            # plain | spec
B = int(sys.argv[2]) if len(sys.argv) > 2 else 1
STOP = len(sys.argv) > 3 and sys.argv[3] == "stop"
PROMPT = "def parse(line):"

# 1. a realistic token stream from the real tiny target (greedy)
real = Engine(EngineConfig(model=str(DEFAULT_PAIR / "target"), device="cpu", threads=1))
seq = real.add_request(PROMPT, SamplingParams(max_tokens=400, ignore_eos=True))
while real.has_unfinished():
    real.step()
S = list(seq.prompt_ids) + list(seq.output_ids)
S = S + S[len(seq.prompt_ids):] * 8
del real

cfg = EngineConfig(model=str(DEFAULT_PAIR / "target"), draft=str(DEFAULT_PAIR / "draft") if MODE == "spec" else None,
                   device="cpu", threads=1, max_num_seqs=64, spec_bypass=False, lookahead="--no-ahead" not in sys.argv)
eng = Engine(cfg)
r = eng.runner
V = eng.target_cfg.vocab_size
T = {}  # timers
def acc(k, dt):
    a = T.setdefault(k, [0.0, 0]); a[0] += dt; a[1] += 1

class FakeTargetGraph:
    def __init__(self, g, argmax): self.g, self.argmax = g, argmax
    def replay(self):
        t = time.perf_counter()
        pos = self.g.positions[:self.argmax.shape[0]].tolist()
        self.argmax.copy_(torch.tensor([S[p + 1] for p in pos]))
        acc("~replay_target(fake, excluded)", time.perf_counter() - t)

class FakeProposeGraph:
    step = 0
    def __init__(self, pg, out): self.pg, self.out = pg, out
    def replay(self):
        t = time.perf_counter()
        drafts, z, conf = self.out
        b, g = drafts.shape
        pos = self.pg.positions[:b * g].tolist()
        FakeProposeGraph.step += 1
        a = FakeProposeGraph.step % (g + 1)          # accepted drafts cycle 0..γ -> AL ~ (γ+2)/2
        d = [[S[pos[i * g] + k + 1] if k < a else (S[pos[i * g] + k + 1] + 1) % V for k in range(g)] for i in range(b)]
        drafts.copy_(torch.tensor(d))
        acc("~replay_propose(fake, excluded)", time.perf_counter() - t)

tg = TargetGraphs(r, cfg.max_num_seqs, r.max_positions, r.trash_page)
tg.graphs = {t: (None, (torch.zeros(t, V), torch.zeros(t, dtype=torch.long))) for t in TIERS}
for t in TIERS:
    tg.graphs[t] = (FakeTargetGraph(tg, tg.graphs[t][1][1]), tg.graphs[t][1])
r.graphs = tg
if MODE == "spec":
    pg = ProposeGraphs(r, cfg.max_num_seqs, r.max_positions, r.trash_page)
    g = pg.gamma
    outs = {}
    for b in pg.tiers:
        out = (torch.zeros(b, g, dtype=torch.long), torch.zeros(b, g, V), torch.rand(b, g))
        pg.graphs[b] = (FakeProposeGraph(pg, out), out)
    r.propose_graphs = pg

# 2. timing wrappers
def wrap(obj, name, label):
    f = getattr(obj, name)
    @functools.wraps(f)
    def w(*a, **k):
        t = time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            acc(label, time.perf_counter() - t)
    setattr(obj, name, w)

INSTR = "--noinstr" not in sys.argv
LT = {}
if INSTR:
    wrap(eng.scheduler, "schedule", "scheduler.schedule")
    wrap(eng.rounds, "step", "RoundRunner.step")
    wrap(eng.rounds, "propose", "RoundRunner.propose (incl replay)")
    wrap(eng.rounds, "_verify_lengths", "RoundRunner._verify_lengths")
    wrap(eng.rounds, "accept", "RoundRunner.accept")
    wrap(eng.rounds, "_record", "RoundRunner._record")
    wrap(r, "verify", "ModelRunner.verify (incl replay)")
    wrap(tg, "run", "TargetGraphs.run (incl replay)")
    wrap(tg, "_fill", "TargetGraphs._fill")
    if MODE == "spec":
        wrap(pg, "run", "ProposeGraphs.run (incl replay)")
    wrap(runner_mod, "apply_fill", "apply_fill")
    wrap(round_mod, "commit_tokens", "commit_tokens (incl decode)")
    wrap(eng.tokenizer, "decode", "Tokenizer.decode")

params = SamplingParams(max_tokens=1500, ignore_eos=True, stop=("\n\n\n\n\nZZQ",) if STOP else None)
for i in range(B):
    eng.add_request(PROMPT, params)
# prefill + warmup
for _ in range(5):
    eng.step()
T.clear(); LT.clear()
N = 150 if MODE == "spec" else 600
tot = []
prof = cProfile.Profile() if "--cprofile" in sys.argv else None
if prof: prof.enable()
for _ in range(N):
    t = time.perf_counter()
    eng.step()
    tot.append(time.perf_counter() - t)
if prof:
    prof.disable()
    s = io.StringIO(); pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(30); print(s.getvalue())
excl = sum(v[0] for k, v in T.items() if k.startswith("~"))
toks = sum(len(s.output_ids) for s in eng.scheduler.running)
print(f"MODE={MODE} B={B} stop={STOP} instr={INSTR} steps={N} tokens/seq now={toks // B}")
print(f"Engine.step wall mean {statistics.mean(tot)*1e6:.1f} us, median {statistics.median(tot)*1e6:.1f} us; host (minus fake replays) {(sum(tot)-excl)/N*1e6:.1f} us/step")
for k, (s_, n) in sorted(T.items(), key=lambda kv: -kv[1][0]):
    print(f"  {k:40s} {s_/N*1e6:8.1f} us/step  ({n/N:.2f} calls/step, {s_/n*1e6:.1f} us/call)")

for k, (s_, n) in sorted(LT.items(), key=lambda kv: -kv[1][0]):
    print(f"  {k:58s} {s_/N*1e6:8.1f} us/step  ({n/N:.2f}/step)")
