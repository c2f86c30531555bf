"""An independent, naive DSpark drafter written from the spec (§2-§10), checked against the engine's propose.

Nothing here uses sparkdec's model code for the math: the drafter weights come straight from the
safetensors file, the target's taps from Hugging Face transformers (`output_hidden_states`, tap l =
hidden_states[l + 1]), and the block forward, the context K/V, the Markov chain and the confidence head are
plain Python loops over positions, slots and heads in float64. The engine is driven step by step and every
propose it makes (first round after prefill, and later rounds after verifies with accepted and rejected
drafts) is recomputed from the committed tokens alone.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from helpers import make_draft
from sparkdec import LLM, SamplingParams
from sparkdec.sampling import STREAM_DRAFT, sample_from

F64 = torch.float64
ATOL = RTOL = 1e-4

# ------------------------------------------------------------------------------------------ the naive drafter


class NaiveTarget:
    """The target as Hugging Face computes it: taps and the shared embedding / LM head."""

    def __init__(self, folder: Path):
        from transformers import Qwen3ForCausalLM

        self.model = Qwen3ForCausalLM.from_pretrained(str(folder), dtype=torch.float32,
                                                      attn_implementation="eager").eval()
        raw = load_file(str(folder / "model.safetensors"))
        self.embed = raw["model.embed_tokens.weight"].to(F64)
        self.lm_head = raw.get("lm_head.weight", raw["model.embed_tokens.weight"]).to(F64)

    @torch.no_grad()
    def taps(self, tokens: list[int], layer_ids: list[int]) -> list[torch.Tensor]:
        """Per position t < len(tokens): concat of the tapped layer outputs (tap l = hidden_states[l + 1])."""
        out = self.model(input_ids=torch.tensor([tokens]), output_hidden_states=True)
        hs = out.hidden_states
        return [torch.cat([hs[l + 1][0, t].to(F64) for l in layer_ids]) for t in range(len(tokens))]


def rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return w * (x / torch.sqrt((x * x).mean() + eps))


def rope(x: torch.Tensor, pos: int, theta: float) -> torch.Tensor:
    """Default Qwen3 RoPE of one head vector at an absolute position: pair (i, i + D/2) rotated by
    pos * theta^(-2i/D) (the rotate-half layout)."""
    half = x.shape[0] // 2
    angle = pos * theta ** (-2.0 * torch.arange(half, dtype=F64) / x.shape[0])
    c, s = torch.cos(angle), torch.sin(angle)
    lo, hi = x[:half], x[half:]
    return torch.cat([lo * c - hi * s, hi * c + lo * s])


class NaiveDrafter:
    def __init__(self, folder: Path, target: NaiveTarget):
        self.cfg = cfg = json.loads((folder / "config.json").read_text())
        self.w = {k: v.to(F64) for k, v in load_file(str(folder / "model.safetensors")).items()}
        self.target = target
        self.eps = cfg["rms_norm_eps"]
        self.theta = (cfg.get("rope_parameters") or {}).get("rope_theta", cfg.get("rope_theta"))
        self.hq, self.hkv, self.hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
        self.gamma, self.mask = cfg["block_size"], cfg["mask_token_id"]
        self.rank = cfg["markov_rank"]
        self.kind = cfg.get("markov_head_type", "vanilla")
        self.conf = cfg.get("enable_confidence_head", False)
        self.conf_markov = cfg.get("confidence_head_with_markov", False)

    def head(self, vec: torch.Tensor, h: int) -> torch.Tensor:
        return vec[h * self.hd:(h + 1) * self.hd]

    def block(self, tokens: list[int]) -> torch.Tensor:
        """tokens = committed tokens 0..s (the last is the anchor x0 at s). Returns h [γ, d] (final-normed)."""
        w, s, gamma = self.w, len(tokens) - 1, self.gamma
        taps = self.target.taps(tokens[:s], self.cfg["target_layer_ids"])  # context rows: positions < s only
        ctx = [rms(w["fc.weight"] @ tap, w["hidden_norm.weight"], self.eps) for tap in taps]  # spec §5
        ids = [tokens[s]] + [self.mask] * (gamma - 1)
        positions = [s + k for k in range(gamma)]
        h = [self.target.embed[i].clone() for i in ids]  # the target's embedding, not the checkpoint copy
        group = self.hq // self.hkv
        for i in range(self.cfg["num_hidden_layers"]):
            p = f"layers.{i}."
            wq, wk, wv, wo = (w[p + f"self_attn.{n}_proj.weight"] for n in "qkvo")
            qn, kn = w[p + "self_attn.q_norm.weight"], w[p + "self_attn.k_norm.weight"]
            keys, values = [], []  # per visible row: list over KV heads
            for t in range(s):  # context K/V: this layer's k_proj / k_norm / RoPE and v_proj on ctx (spec §6.4)
                k_vec, v_vec = wk @ ctx[t], wv @ ctx[t]
                keys.append([rope(rms(self.head(k_vec, g), kn, self.eps), t, self.theta) for g in range(self.hkv)])
                values.append([self.head(v_vec, g) for g in range(self.hkv)])
            normed = [rms(x, w[p + "input_layernorm.weight"], self.eps) for x in h]
            queries = []
            for k in range(gamma):  # block rows: queries, keys and values at the block positions
                q_vec, k_vec, v_vec = wq @ normed[k], wk @ normed[k], wv @ normed[k]
                queries.append([rope(rms(self.head(q_vec, j), qn, self.eps), positions[k], self.theta)
                                for j in range(self.hq)])
                keys.append([rope(rms(self.head(k_vec, g), kn, self.eps), positions[k], self.theta)
                             for g in range(self.hkv)])
                values.append([self.head(v_vec, g) for g in range(self.hkv)])
            new_h = []
            for k in range(gamma):  # every block row sees all context rows < s and all γ block rows
                heads = []
                for j in range(self.hq):
                    g = j // group
                    scores = [float(queries[k][j] @ keys[r][g]) / math.sqrt(self.hd) for r in range(len(keys))]
                    top = max(scores)
                    ex = [math.exp(x - top) for x in scores]
                    total = sum(ex)
                    out = torch.zeros(self.hd, dtype=F64)
                    for r in range(len(keys)):
                        out += (ex[r] / total) * values[r][g]
                    heads.append(out)
                x = h[k] + wo @ torch.cat(heads)
                y = rms(x, w[p + "post_attention_layernorm.weight"], self.eps)
                gate = w[p + "mlp.gate_proj.weight"] @ y
                up = w[p + "mlp.up_proj.weight"] @ y
                x = x + w[p + "mlp.down_proj.weight"] @ (gate * torch.sigmoid(gate) * up)
                new_h.append(x)
            h = new_h
        return torch.stack([rms(x, w["norm.weight"], self.eps) for x in h])

    def chain(self, tokens: list[int], forced: list[int] | None = None):
        """Markov chain over the slots (spec §9.3) and confidences (§10). Greedy drafts unless `forced` gives
        the drafted tokens (sampled drafts): then prev follows them. Returns drafts, z [γ, V], conf [γ]."""
        w, h = self.w, self.block(tokens)
        prev = tokens[-1]
        state = torch.zeros(self.rank, dtype=F64)
        drafts, zs, confs = [], [], []
        for k in range(self.gamma):
            z = self.target.lm_head @ h[k]  # U_k with the target's LM head
            e = None
            if self.rank:
                e = w["markov_head.markov_w1.weight"][prev]
                if self.kind == "vanilla":
                    v = e
                elif self.kind == "gated":
                    g = torch.sigmoid(w["markov_head.gate_proj.weight"] @ torch.cat([h[k], e])
                                      + w["markov_head.gate_proj.bias"])
                    v = g * e
                else:
                    gco = (w["markov_head.joint_proj.weight"] @ torch.cat([state, e, h[k]])
                           + w["markov_head.joint_proj.bias"])
                    g, c, o = gco[:self.rank], gco[self.rank:2 * self.rank], gco[2 * self.rank:]
                    state = torch.sigmoid(g) * state + (1 - torch.sigmoid(g)) * torch.tanh(c)
                    v = torch.tanh(o)
                z = z + w["markov_head.markov_w2.weight"] @ v
            if self.conf:
                feats = torch.cat([h[k], e]) if self.conf_markov else h[k]
                bias = w.get("confidence_head.proj.bias", torch.zeros(1, dtype=F64))
                confs.append(float(torch.sigmoid(w["confidence_head.proj.weight"][0] @ feats + bias[0])))
            else:
                confs.append(1.0)
            best = max(range(z.shape[0]), key=lambda t: (float(z[t]), -t))  # first maximum
            d = forced[k] if forced is not None else best
            drafts.append(d)
            zs.append(z)
            prev = d
        return drafts, torch.stack(zs), torch.tensor(confs, dtype=F64)


# ------------------------------------------------------------------------------------------ driving the engine


def record_proposals(llm: LLM) -> list[dict]:
    """Wrap the engine's propose so every call (one per round, batched over sequences) is recorded together
    with the sequences it served and their committed length at that moment."""
    rounds, runner = llm.engine.rounds, llm.engine.runner
    # NOTE: every propose through RoundRunner.propose: no propose queued ahead during the readback (spec/chain.py;
    # tests/test_lookahead.py checks that one drafts exactly what this one drafts)
    rounds.ahead = False
    inner_round, inner_runner = rounds.propose, runner.propose
    calls, current = [], {}

    def runner_propose(tables, anchors, anchor_positions, pick, *args, **kwargs):
        drafts, z, conf = inner_runner(tables, anchors, anchor_positions, pick, *args, **kwargs)
        assert z.dtype == torch.float32 and conf.dtype == torch.float32  # spec §9.3 / §10.1: float32 heads
        current.update(anchors=list(anchors), positions=list(anchor_positions), drafts=drafts.tolist(),
                       z=z.detach().double().cpu().clone(), conf=conf.detach().double().cpu().clone())
        return drafts, z, conf

    def round_propose(seqs, *args, **kwargs):
        current.clear()
        lengths = [len(s.prompt_ids) + len(s.output_ids) for s in seqs]
        out = inner_round(seqs, *args, **kwargs)
        calls.append(dict(current, seqs=list(seqs), lengths=lengths))
        return out

    runner.propose, rounds.propose = runner_propose, round_propose
    return calls


def run_steps(llm: LLM, prompts, params, steps: int):
    eng = llm.engine
    plist = params if isinstance(params, list) else [params] * len(prompts)
    seqs = [eng.add_request(p, sp, trace=True) for p, sp in zip(prompts, plist)]
    calls = record_proposals(llm)
    for _ in range(steps):
        if not eng.has_unfinished():
            break
        eng.step()
    return seqs, calls


def committed(seq) -> list[int]:
    return list(seq.prompt_ids) + list(seq.output_ids)


def check_call(naive: NaiveDrafter, call: dict, temperature: float | None = None) -> None:
    """Recompute one recorded propose, row by row, from the committed tokens of each sequence at that time."""
    for row, seq in enumerate(call["seqs"]):
        tokens = committed(seq)[:call["lengths"][row]]  # committed tokens 0..s; the last is the anchor
        s = len(tokens) - 1
        assert (call["anchors"][row], call["positions"][row]) == (tokens[-1], s)
        forced = call["drafts"][row] if temperature is not None else None
        drafts, z, conf = naive.chain(tokens, forced)
        assert call["drafts"][row] == drafts, (row, s)
        torch.testing.assert_close(call["z"][row], z, atol=ATOL, rtol=RTOL)
        torch.testing.assert_close(call["conf"][row], conf, atol=ATOL, rtol=RTOL)
        if temperature is not None:  # d_{k+1} ~ softmax(z_k / T), noise keyed on (seed, s + k + 1, draft stream)
            for k, d in enumerate(call["drafts"][row]):
                q = torch.softmax(call["z"][row][k].float() / temperature, dim=-1)
                assert d == sample_from(q, seq.seed, s + k + 1, STREAM_DRAFT), (row, k)


# ------------------------------------------------------------------------------------------ tests

PROMPTS = [[3, 17, 4, 99, 250, 8, 61], [5, 9, 2, 140, 77, 33, 12, 41, 6, 200, 13, 7, 88], [45, 46, 47, 1]]

VARIANTS = [
    ("untied_gqa4_odd_vocab", dict(markov_head_type="vanilla")),
    ("untied_gqa4_odd_vocab", dict(markov_head_type="vanilla", with_markov=False)),
    ("untied_gqa4_odd_vocab", dict(markov_head_type="gated")),
    ("untied_gqa4_odd_vocab", dict(markov_head_type="gated", with_markov=False)),
    ("untied_gqa4_odd_vocab", dict(markov_head_type="rnn")),
    ("untied_gqa4_odd_vocab", dict(markov_head_type="rnn", with_markov=False)),
    ("untied_gqa4_odd_vocab", dict(markov_rank=0, confidence=False)),  # DFlash baseline: no heads
    ("untied_gqa4_odd_vocab", dict(markov_rank=0)),  # confidence on h alone
    ("tied_gqa2", dict(markov_head_type="vanilla", taps=[-1, 1], block_size=3)),  # embedding tap, tied head
    ("untied_mha", dict(markov_head_type="rnn", taps=[0], block_size=5, num_layers=1)),
]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny tensors only: intra-op threads add barrier waits (badly so on a loaded machine); restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def hf_targets(targets):
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = NaiveTarget(targets[name])
        return cache[name]

    return get


IDS = [f"{n}-{'-'.join(f'{k}={v}' for k, v in d.items())}" for n, d in VARIANTS]


@pytest.mark.parametrize("name,variant", VARIANTS, ids=IDS)
def test_propose_matches_naive_first_and_second_round(targets, hf_targets, tmp_path, name, variant):
    """Round 1 (anchor = first sampled token at s = P, context = prompt taps) and round 2 (context includes
    the verified rows; rejected rows from the verify must not be visible), batched over three sequences."""
    target = targets[name]
    draft = make_draft(tmp_path / "draft", target, seed=7, **variant)
    llm = LLM(model=str(target), draft=str(draft), device="cpu", kv_cache_tokens=1024)
    seqs, calls = run_steps(llm, PROMPTS, SamplingParams(max_tokens=16, ignore_eos=True), steps=3)
    assert len(calls) == 2  # step 1 is the prefill (first token sampled from row P-1), steps 2-3 are rounds
    first = calls[0]
    assert first["positions"] == [len(p) for p in PROMPTS]
    assert first["anchors"] == [s.output_ids[0] for s in seqs]
    assert calls[1]["positions"] != first["positions"]
    naive = NaiveDrafter(draft, hf_targets(name))
    for call in calls:
        check_call(naive, call)


def bigram_follow(sequences: list[list[int]], vocab: int) -> dict[int, int]:
    from collections import Counter, defaultdict

    follows = defaultdict(Counter)
    for seq in sequences:
        for a, b in zip(seq, seq[1:]):
            follows[a][b] += 1
    return {a: c.most_common(1)[0][0] for a, c in follows.items()}


def accepting_draft(folder: Path, target: Path, sequences: list[list[int]], kind: str) -> Path:
    """A drafter whose Markov head knows the target's greedy habits (W1 = I, W2 = 6 * next-token table plus
    noise; the gated head scales the column by its gate) on top of a live random backbone, so rounds accept
    some drafts and reject others."""
    vocab = json.loads((target / "config.json").read_text())["vocab_size"]
    make_draft(folder, target, seed=3, markov_rank=vocab, markov_head_type=kind, block_size=4)
    t = load_file(str(folder / "model.safetensors"))
    g = torch.Generator().manual_seed(5)
    w2 = torch.randn(vocab, vocab, generator=g) * 0.05
    for a, b in bigram_follow(sequences, vocab).items():
        w2[b, a] += 6.0
    t["markov_head.markov_w1.weight"] = torch.eye(vocab)
    t["markov_head.markov_w2.weight"] = w2
    save_file(t, str(folder / "model.safetensors"))
    return folder


@pytest.mark.parametrize("kind", ["vanilla", "gated"])
def test_later_rounds_after_partial_acceptance(targets, hf_targets, tmp_path, kind):
    """Several rounds with accepted and rejected drafts (and a sequence verifying only 2 of 4 drafts): every
    propose equals the naive drafter run on the committed tokens only, and the output equals plain greedy."""
    name = "untied_gqa4_odd_vocab"
    target = targets[name]
    greedy = SamplingParams(max_tokens=24, ignore_eos=True)
    plain = LLM(model=str(target), device="cpu", kv_cache_tokens=1024).generate(PROMPTS, greedy)
    draft = accepting_draft(tmp_path / "draft", target, [p + o.token_ids for p, o in zip(PROMPTS, plain)], kind)
    llm = LLM(model=str(target), draft=str(draft), device="cpu", kv_cache_tokens=1024)
    params = [greedy, SamplingParams(max_tokens=24, ignore_eos=True, verify_len=2), greedy]
    seqs, calls = run_steps(llm, PROMPTS, params, steps=6)
    rounds = [r for s in seqs for r in s.rounds]
    assert any(r["num_accepted"] >= 1 for r in rounds), rounds  # verified drafts enter the context
    assert any(r["num_accepted"] < r["num_verified"] for r in rounds), rounds  # stale rejected rows exist
    assert any(r["num_verified"] < 4 for r in rounds)  # block rows beyond the verified ones
    naive = NaiveDrafter(draft, hf_targets(name))
    for call in calls:
        check_call(naive, call)
    for s, ref in zip(seqs, plain):
        assert s.output_ids == ref.token_ids[:len(s.output_ids)]


def test_sampled_drafts_in_rejection_mode(targets, hf_targets, tmp_path):
    """accept_mode=rejection at T > 0: drafts are drawn from softmax(z_k / T) (the Markov-corrected logits), the
    chain follows the drawn tokens, and z / confidences still match the naive drafter."""
    name = "untied_gqa4_odd_vocab"
    target = targets[name]
    draft = make_draft(tmp_path / "draft", target, seed=11, markov_head_type="gated", block_size=4)
    llm = LLM(model=str(target), draft=str(draft), device="cpu", kv_cache_tokens=1024, accept_mode="rejection")
    params = [SamplingParams(max_tokens=16, ignore_eos=True, temperature=0.8, seed=100 + i) for i in range(3)]
    seqs, calls = run_steps(llm, PROMPTS, params, steps=4)
    assert len(calls) == 3
    naive = NaiveDrafter(draft, hf_targets(name))
    for call in calls:
        check_call(naive, call, temperature=0.8)


def test_chunked_prefill_and_requests_joining_mid_run(targets, hf_targets, tmp_path):
    """Context rows written by prefill chunks, and by prefill rows packed with other sequences' verify rows,
    are the same context the naive drafter computes from the committed tokens."""
    name = "untied_gqa4_odd_vocab"
    target = targets[name]
    draft = make_draft(tmp_path / "draft", target, seed=13, markov_head_type="vanilla", block_size=4)
    naive = NaiveDrafter(draft, hf_targets(name))
    greedy = SamplingParams(max_tokens=12, ignore_eos=True)

    # one sequence at a time, at most 5 rows per step: the 13-token prompt is prefilled in chunks 5, 5, 3
    llm = LLM(model=str(target), draft=str(draft), device="cpu", kv_cache_tokens=1024, max_num_seqs=1,
              max_batched_tokens=4)
    seqs, calls = run_steps(llm, [PROMPTS[1]], greedy, steps=6)
    assert len(calls) == 3 and calls[0]["positions"] == [len(PROMPTS[1])]
    for call in calls:
        check_call(naive, call)

    # a request joins while another decodes: its prefill rows share the packed forward with verify rows
    llm = LLM(model=str(target), draft=str(draft), device="cpu", kv_cache_tokens=1024)
    eng = llm.engine
    first = eng.add_request(PROMPTS[0], greedy)
    calls = record_proposals(llm)
    eng.step()
    eng.step()
    late = eng.add_request(PROMPTS[2], greedy)
    for _ in range(3):
        eng.step()
    assert any(late in c["seqs"] and first in c["seqs"] for c in calls)
    for call in calls:
        check_call(naive, call)
