"""Speculative rejection sampling is lossless in distribution (spec §12.3).

A target with a 12-token vocabulary and a random drafter (γ = 3, so drafts are accepted and rejected
often) generate 5 tokens for 800 requests with distinct seeds, in one batch. The empirical joint
distribution of (token 1, token 2) and the marginals of tokens 3 and 4 are compared by chi-square
goodness-of-fit with the EXACT distributions, enumerated with the target itself (Hugging Face forward on
every prefix). Seeds are fixed, so every verdict is deterministic. The same statistic, on the same data
size, must reject a deliberately biased acceptance rule (the test has teeth), and must accept plain
sampling; `exact` mode must equal plain sampling token for token.
"""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from helpers import make_draft, make_target
from sparkdec import LLM, SamplingParams

N = 800  # requests per distribution run
N_EXACT = 300  # requests of the exact-mode run (compared token for token with plain sampling)
PROMPT = [3, 7, 1, 9]
MAX_TOKENS = 5  # round 1 verifies all 3 drafts (room - 1 = 4 - 1 = 3): tokens 2..4 can come from slots 0..2
ALPHA = 1e-3
GAMMA = 3
VOCAB = 12
T1 = dict(temperature=1.0)
FILTERED = dict(temperature=0.9, top_k=7, top_p=0.85)
# logit processing (sparkdec/penalties.py): the output's history moves every next distribution
PROCESSING = dict(repetition_penalty=1.6, presence_penalty=0.7, frequency_penalty=0.4, logit_bias={5: 1.5}, min_p=0.04)
PROCESSED = dict(temperature=1.0, top_p=0.95, **PROCESSING)

# ------------------------------------------------------------------------------------------ statistics


def gamma_q(a: float, x: float) -> float:
    """Regularised upper incomplete gamma Q(a, x) (series for x < a + 1, Lentz continued fraction otherwise)."""
    if x <= 0:
        return 1.0
    log_front = -x + a * math.log(x) - math.lgamma(a)
    if x < a + 1:
        term = total = 1.0 / a
        ap = a
        for _ in range(100000):
            ap += 1
            term *= x / ap
            total += term
            if abs(term) < abs(total) * 1e-16:
                break
        return max(0.0, 1.0 - total * math.exp(log_front))
    tiny = 1e-300
    b = x + 1 - a
    c, d = 1 / tiny, 1 / b
    h = d
    for i in range(1, 100000):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1 / d
        delta = d * c
        h *= delta
        if abs(delta - 1) < 1e-16:
            break
    return math.exp(log_front) * h


def chi2_sf(stat: float, df: int) -> float:
    return gamma_q(df / 2.0, stat / 2.0)


def chi_square(counts: dict, probs: dict, n: int, min_expected: float = 5.0) -> tuple[float, int, float]:
    """Pearson chi-square of observed counts against exact cell probabilities; cells with expected count
    below min_expected are pooled (smallest first) until the pool reaches it. -> (statistic, df, p-value)."""
    assert abs(sum(probs.values()) - 1) < 1e-9
    outside = sum(c for cell, c in counts.items() if probs.get(cell, 0.0) == 0.0)
    assert outside == 0, f"{outside} samples fell in cells of probability 0"
    cells = sorted(probs, key=lambda c: probs[c])
    groups, pool_e, pool_o = [], 0.0, 0
    for cell in cells:
        e, o = probs[cell] * n, counts.get(cell, 0)
        if pool_e < min_expected and (e < min_expected or pool_e > 0):
            pool_e, pool_o = pool_e + e, pool_o + o
            if pool_e >= min_expected:
                groups.append((pool_e, pool_o))
                pool_e, pool_o = 0.0, 0
            continue
        groups.append((e, o))
    if pool_e > 0:  # leftover tail: fold into the smallest group
        e0, o0 = groups.pop(0) if groups else (0.0, 0)
        groups.append((e0 + pool_e, o0 + pool_o))
    stat = sum((o - e) ** 2 / e for e, o in groups)
    df = len(groups) - 1
    return stat, df, chi2_sf(stat, df)


def test_chi2_sf_known_values():
    assert chi2_sf(3.841458820694124, 1) == pytest.approx(0.05, rel=1e-6)
    assert chi2_sf(18.307038053275146, 10) == pytest.approx(0.05, rel=1e-6)
    assert chi2_sf(124.34211340400407, 100) == pytest.approx(0.05, rel=1e-6)
    assert chi2_sf(2.0, 2) == pytest.approx(math.exp(-1.0), rel=1e-12)
    assert chi2_sf(0.0, 5) == 1.0
    assert chi2_sf(300.0, 20) < 1e-40
    reference = {(0.5, 1): 0.47950012218695337, (7.3, 3): 0.06292623645904312, (55.0, 40): 0.05745735167659182,
                 (150.0, 99): 0.0007204453957169282, (12.0, 30): 0.9985996461666381,
                 (250.0, 60): 4.901747961563307e-25, (40.0, 11): 3.577512452765525e-05}  # scipy.stats.chi2.sf
    for (stat, df), expected in reference.items():
        assert chi2_sf(stat, df) == pytest.approx(expected, rel=1e-9)


# ------------------------------------------------------------------------------------------ the exact distribution


def filtered_probs(logits: torch.Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """Plain sampling's distribution (written here from the usual definitions, in float64): temperature, then
    keep the top_k logits (ties at the k-th kept), then the smallest most-probable prefix with mass >= top_p."""
    x = logits.double() / temperature
    if top_k and top_k < x.shape[-1]:
        kth = torch.sort(x, descending=True).values[top_k - 1]
        x = torch.where(x >= kth, x, torch.full_like(x, -math.inf))
    p = torch.softmax(x, -1)
    if top_p < 1.0:
        order = sorted(range(p.shape[0]), key=lambda i: (-float(p[i]), i))
        keep, mass = [], 0.0
        for i in order:
            if mass >= top_p:
                break
            keep.append(i)
            mass += float(p[i])
        mask = torch.zeros_like(p)
        mask[keep] = 1.0
        p = p * mask
        p = p / p.sum()
    return p


def processed_logits(logits: torch.Tensor, prompt: list[int], output: list[int], temperature: float,
                     repetition_penalty: float = 1.0, presence_penalty: float = 0.0, frequency_penalty: float = 0.0,
                     logit_bias: dict | None = None, min_p: float = 0.0) -> torch.Tensor:
    """The logits a request's processing leaves (written here from vLLM's and OpenAI's definitions, float64): bias,
    repetition penalty over prompt and output, frequency and presence penalties over the output, then min_p's cut."""
    x = logits.double().clone()
    for t, b in (logit_bias or {}).items():
        x[t] += b
    for t in range(x.shape[0]):
        count = output.count(t)
        if count or t in prompt:
            x[t] = x[t] / repetition_penalty if x[t] > 0 else x[t] * repetition_penalty
        x[t] -= frequency_penalty * count + presence_penalty * (count > 0)
    p = torch.softmax(x / temperature, -1)
    return torch.where(p >= min_p * p.max(), x, torch.full_like(x, -math.inf))


@torch.no_grad()
def exact_distributions(target: Path, params: dict) -> dict:
    """{"t12": {(a, b): P}, "t3": {c: P}, "t4": {d: P}} by enumerating every prefix with the HF target."""
    from transformers import Qwen3ForCausalLM

    model = Qwen3ForCausalLM.from_pretrained(str(target), dtype=torch.float32, attn_implementation="eager").eval()

    filters = {k: v for k, v in params.items() if k not in PROCESSING}
    processing = {k: v for k, v in params.items() if k in PROCESSING}

    def next_probs(prefixes: list[list[int]]) -> torch.Tensor:
        logits = model(input_ids=torch.tensor(prefixes)).logits[:, -1].float()
        if processing:
            logits = torch.stack([processed_logits(row, PROMPT, prefix[len(PROMPT):], params["temperature"],
                                                   **processing) for row, prefix in zip(logits, prefixes)])
        return torch.stack([filtered_probs(row, **filters) for row in logits])  # [n, V]

    v = VOCAB
    p1 = next_probs([PROMPT])[0]
    p2 = next_probs([PROMPT + [a] for a in range(v)])  # [a, b]
    p3 = next_probs([PROMPT + [a, b] for a in range(v) for b in range(v)]).view(v, v, v)
    p4 = next_probs([PROMPT + [a, b, c] for a in range(v) for b in range(v) for c in range(v)]).view(v, v, v, v)
    j12 = p1[:, None] * p2
    j123 = j12[:, :, None] * p3
    j1234 = j123[..., None] * p4
    m3, m4 = j123.sum((0, 1)), j1234.sum((0, 1, 2))
    return {"t12": {(a, b): float(j12[a, b]) for a in range(v) for b in range(v)},
            "t3": {c: float(m3[c]) for c in range(v)}, "t4": {d: float(m4[d]) for d in range(v)}}


def verdict(outputs: list[list[int]], exact: dict) -> dict:
    """p-value of each statistic; the decision rule passes iff all exceed ALPHA."""
    assert all(len(o) == MAX_TOKENS for o in outputs)
    n = len(outputs)
    counts = {"t12": {}, "t3": {}, "t4": {}}
    for o in outputs:
        for key, cell in (("t12", (o[0], o[1])), ("t3", o[2]), ("t4", o[3])):
            counts[key][cell] = counts[key].get(cell, 0) + 1
    return {key: chi_square(counts[key], exact[key], n)[2] for key in counts}


# ------------------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Many tiny per-sequence ops: intra-op threads only add barrier waits (badly so on a loaded
    machine), so these runs use one thread; restored afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("tinyvocab")
    # one target layer (tap -1, the embedding output) keeps thousands of requests cheap; the acceptance
    # logic under test does not care how good the drafter's context is
    target = make_target(root / "target", seed=21, vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                         tie_word_embeddings=False)
    t = load_file(str(target / "model.safetensors"))
    t["lm_head.weight"] = t["lm_head.weight"] * 5.0  # peaked, non-degenerate next-token distributions
    save_file(t, str(target / "model.safetensors"), metadata={"format": "pt"})
    draft = make_draft(root / "draft", target, seed=4, block_size=GAMMA, markov_rank=8, taps=[-1], num_layers=1)
    return target, draft


@pytest.fixture(scope="module")
def exact(pair) -> dict:
    return {"t1": exact_distributions(pair[0], T1), "filtered": exact_distributions(pair[0], FILTERED),
            "processed": exact_distributions(pair[0], PROCESSED)}


def generate(pair, draft: bool, accept_mode: str = "rejection", params: dict = T1, n: int = N,
             setup=None, verified: set | None = None) -> list[list[int]]:
    target, drafter = pair
    llm = LLM(model=str(target), draft=str(drafter) if draft else None, device="cpu", accept_mode=accept_mode,
              max_num_seqs=n, kv_cache_tokens=n * 16 + 64, max_batched_tokens=n * (len(PROMPT) + GAMMA + 1))
    if setup is not None:
        setup(llm)
    plist = [SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True, seed=1_000_003 * i + 17, **params)
             for i in range(n)]
    outs = llm.generate([PROMPT] * n, plist, trace=verified is not None)
    if verified is not None:
        verified.update(r["num_verified"] for o in outs for r in o.rounds)
    if draft:
        rounds = sum(o.stats["rounds"] for o in outs)
        accepted = sum(o.stats["num_accepted_tokens"] for o in outs)
        verified = sum(o.stats["num_draft_tokens"] for o in outs)
        assert rounds >= n and verified > 0
        rate = accepted / verified
        assert 0.1 < rate < 0.9, rate  # drafts are both accepted and rejected often
    return [o.token_ids for o in outs]


@pytest.fixture(scope="module")
def plain_t1(pair) -> list[list[int]]:
    return generate(pair, draft=False)


# ------------------------------------------------------------------------------------------ tests


def test_exact_distribution_is_sane(exact):
    for dist in exact.values():
        for key in ("t12", "t3", "t4"):
            probs = dist[key].values()
            assert abs(sum(probs) - 1) < 1e-9
            assert max(probs) < 0.9  # not degenerate: sampling has something to test
    assert sum(p > 0 for p in exact["filtered"]["t3"].values()) >= 4


def test_plain_sampling_matches_exact_distribution(plain_t1, exact):
    p = verdict(plain_t1, exact["t1"])
    assert min(p.values()) > ALPHA, p


def test_plain_sampling_with_top_k_top_p_matches_exact_distribution(pair, exact):
    """Plain sampling draws every row through sampling.sample_rows, whose race skips top-p's renormalisation
    (the race does not depend on the scale): the filtered distribution must not move."""
    p = verdict(generate(pair, draft=False, params=FILTERED), exact["filtered"])
    assert min(p.values()) > ALPHA, p


@pytest.mark.parametrize("params", [dict(temperature=0.9), dict(temperature=0.7, top_k=5),
                                    dict(temperature=1.3, top_p=0.6), dict(temperature=0.8, top_k=50, top_p=0.9)])
def test_sample_rows_gives_each_row_what_one_row_gives(params):
    """A speculative round draws its verify rows in one batch (sample_rows); plain decoding draws one row at a
    time (sample_token): every row's token must be the same (seeds and positions keyed per row)."""
    from sparkdec.sampling import sample_rows, sample_token

    torch.manual_seed(0)
    logits = torch.randn(6, 300) * 3
    logits[2, 7] = logits[2, 9] = 40.0  # a row whose mass sits on two ids (top-p keeps just those)
    p = SamplingParams(max_tokens=1, **params)
    for seed, first in ((5, 0), (123456789, 1000)):
        rows = sample_rows(logits, p, seed, first).tolist()
        assert rows == [sample_token(logits[r], p, seed, first + r) for r in range(6)], (seed, rows)
    flat = (logits[:1] / 20).expand(64, -1)
    assert len(set(sample_rows(flat, p, 5, 0).tolist())) > 1  # the noise moves with the position


def test_draw_tokens_gives_each_row_what_one_row_gives():
    """sampling.draw_tokens (plain decoding's and the device draws' rows): every row sampling with one filter (one
    race over all rows, no argmax or gather), two filters, and a greedy row among them, against one row at a time."""
    from sparkdec.sampling import draw_tokens, sample_token

    torch.manual_seed(1)
    logits = torch.randn(5, 300) * 3
    a, b = SamplingParams(temperature=0.8, top_p=0.9), SamplingParams(temperature=1.2, top_k=20)
    for kinds in ([a] * 5, [a, b, a, b, b], [a, SamplingParams(), a, a, a]):
        draws = [(k, 17 + r, 40 + r) for r, k in enumerate(kinds)]
        want = [int(logits[r].argmax()) if k.greedy else sample_token(logits[r], k, 17 + r, 40 + r)
                for r, k in enumerate(kinds)]
        assert draw_tokens(logits, draws).tolist() == want
        assert draw_tokens(logits.t().contiguous().t(), draws).tolist() == want  # a strided view: the same tokens


def test_rejection_sampling_matches_exact_distribution(pair, exact):
    p = verdict(generate(pair, draft=True, accept_mode="rejection"), exact["t1"])
    assert min(p.values()) > ALPHA, p


def test_rejection_sampling_with_top_k_top_p(pair, exact):
    outs = generate(pair, draft=True, accept_mode="rejection", params=FILTERED)
    p = verdict(outs, exact["filtered"])
    assert min(p.values()) > ALPHA, p


def test_logit_processing_in_both_modes(pair, exact):
    """Penalties, bias and min_p (sparkdec/penalties.py) process each verify row with the drafts before it as
    history: plain sampling and rejection sampling both follow the processed distribution, and exact mode equals
    plain sampling token for token."""
    assert exact["processed"]["t12"] != exact["t1"]["t12"]
    plain = generate(pair, draft=False, params=PROCESSED)
    for outs in (plain, generate(pair, draft=True, accept_mode="rejection", params=PROCESSED)):
        p = verdict(outs, exact["processed"])
        assert min(p.values()) > ALPHA, p
    assert generate(pair, draft=True, accept_mode="exact", params=PROCESSED, n=N_EXACT) == plain[:N_EXACT]


def test_rejection_sampling_with_confidence_threshold(pair, exact):
    """The first-failure confidence threshold (spec §11.3) decides ℓ from confidences that depend on the drawn
    drafts; it is non-anticipating (§11.5), so the output distribution must not move."""
    lengths = set()
    p = verdict(generate(pair, draft=True, params=dict(T1, min_confidence=0.45), verified=lengths), exact["t1"])
    assert {0, 1, 2, 3} <= lengths, lengths  # the threshold really varies the verify length
    assert min(p.values()) > ALPHA, p


def test_exact_mode_equals_plain_sampling_token_for_token(pair, plain_t1):
    """Same seeds, same tokens: exact mode samples the target at each verify row with the plain sampler's noise."""
    assert generate(pair, draft=True, accept_mode="exact", n=N_EXACT) == plain_t1[:N_EXACT]


# ------------------------------------------------------------------------------------------ teeth


def q_from_base_logits(llm: LLM) -> None:
    """Spec §17.8 trap: drafts are still drawn from softmax(z / T), but verification is handed the base
    logits U (backbone -> lm_head, no Markov bias) as q."""
    drafter = llm.engine.drafter
    chain = drafter.markov_chain

    def markov_chain(h, anchors, pick, greedy=False, coupling=None):
        drafts, z, conf = chain(h, anchors, pick, greedy, coupling)
        b, g, _ = h.shape
        return drafts, drafter.base_logits(h.reshape(b * g, -1)).view(b, g, -1), conf

    drafter.markov_chain = markov_chain


def test_biased_rule_is_rejected(pair, exact):
    """Teeth: verifying against the base logits instead of the Markov-corrected z (a real trap, spec §17.8)
    fails the same statistic on the same data size (by a huge margin: p ~ 1e-160 on (token 1, token 2))."""
    p = verdict(generate(pair, draft=True, accept_mode="rejection", setup=q_from_base_logits), exact["t1"])
    assert min(p.values()) < ALPHA, p


def test_keyed_noise_is_splitmix64_per_index_and_uniform():
    """uniform_noise equals a pure-Python splitmix64 of key + (i + 1) * golden for every index (so CPU and CUDA,
    which run the same wrapping int64 arithmetic, draw identical bits), and looks uniform."""
    from sparkdec.sampling import _mix, uniform_noise

    mask = (1 << 64) - 1

    def reference(key: int, i: int) -> float:
        x = (key + (i + 1) * 0x9E3779B97F4A7C15) & mask
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & mask
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & mask
        x ^= x >> 31
        return ((x >> 12) + 0.5) * 2.0 ** -52

    u = uniform_noise(12345, 77, 2, 4096, "cpu")
    key = _mix(12345, 77, 2)
    assert [float(v) for v in u[:64]] == [reference(key, i) for i in range(64)]
    assert float(u[4095]) == reference(key, 4095)
    assert 0.0 < float(u.min()) and float(u.max()) < 1.0
    assert abs(float(u.mean()) - 0.5) < 0.02
    counts = torch.histc(u.float(), bins=16, min=0.0, max=1.0)
    assert float(((counts - 256.0) ** 2 / 256.0).sum()) < 45.0  # chi-square, 15 dof: p ~ 1e-4
    assert not torch.equal(u, uniform_noise(12345, 78, 2, 4096, "cpu"))
    from sparkdec.sampling import _shr  # the largest and smallest hash values still map strictly inside (0, 1)
    top = (_shr(torch.tensor([-1]), 12).double() + 0.5) * 2.0 ** -52
    bottom = (_shr(torch.tensor([0]), 12).double() + 0.5) * 2.0 ** -52
    assert 0.0 < float(bottom) and float(top) < 1.0
