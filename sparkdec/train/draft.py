"""Drafter recipe (spec §15): the DSpark training forward over packed anchor blocks, the DSpark loss, a trainer
against a frozen Hugging Face target, and the DeepSpec-format (`Qwen3DSparkModel`) writer.

The training forward uses DSparkDrafter's own parameter modules and reproduces the engine's inference
computation (context K/V from hidden_norm(fc(taps)) at positions < anchor, block rows [x0, M, ...] at
s..s+γ-1, bidirectional inside the block, blocks never see each other); tests/test_train_draft.py checks it.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import save_file

from sparkdec.ops.rope import RotaryTable


@dataclass(frozen=True)
class DraftRecipe:
    num_layers: int = 3
    target_layer_ids: tuple[int, ...] = (1, 3, 5)
    block_size: int = 7
    markov_rank: int = 64
    markov_head_type: str = "vanilla"
    num_anchors: int = 256  # anchors drawn per training sequence (config.json records 512, DeepSpec's value)
    seq_len: int = 512
    batch_size: int = 32
    lr: float = 1.5e-3
    min_lr_ratio: float = 0.1
    warmup: float = 0.04
    weight_decay: float = 0.0
    loss_decay_gamma: float = 4.0
    ce_alpha: float = 0.1
    l1_alpha: float = 0.9
    conf_alpha: float = 1.0
    seconds: float = 120.0
    max_steps: int = 0
    eval_every_s: float = 20.0
    seed: int = 0


# ---------------------------------------------------------------- config and modules

def draft_config_dict(target_cfg: dict, recipe: DraftRecipe, mask_token_id: int) -> dict:
    """The target's HF config with the DeepSpec DSpark overrides (spec §13.1)."""
    cfg = json.loads(json.dumps(target_cfg))
    for key in ("auto_map", "transformers_version", "_name_or_path"):
        cfg.pop(key, None)
    rank = recipe.markov_rank
    cfg.update(architectures=["Qwen3DSparkModel"], model_type="qwen3", num_hidden_layers=recipe.num_layers,
               num_target_layers=target_cfg["num_hidden_layers"], target_layer_ids=list(recipe.target_layer_ids),
               block_size=recipe.block_size, mask_token_id=mask_token_id, num_anchors=512,
               layer_types=["full_attention"] * recipe.num_layers, markov_rank=rank,
               markov_head_type=recipe.markov_head_type, enable_confidence_head=True,
               confidence_head_with_markov=rank > 0, tie_word_embeddings=False, dtype="bfloat16",
               loss_decay_gamma=recipe.loss_decay_gamma)
    cfg.pop("torch_dtype", None)
    return cfg


def build_drafter(cfg_dict: dict, target_cfg_dict: dict, seed: int = 0):
    """A freshly initialised DSparkDrafter (float32) for a draft config dict; validated like a checkpoint."""
    from sparkdec.config import TargetConfig
    from sparkdec.models.draft_loader import draft_config
    from sparkdec.models.dspark import DSparkDrafter

    dcfg = draft_config(cfg_dict, TargetConfig.from_hf(target_cfg_dict), Path("<new drafter>"))
    torch.manual_seed(seed)
    drafter = DSparkDrafter(dcfg)
    std = float(target_cfg_dict.get("initializer_range", 0.02))
    with torch.no_grad():
        for name, p in drafter.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            elif "markov_w2" in name or "confidence_head" in name:
                p.zero_()  # start with no Markov bias and c = 0.5
            elif "markov_w1" in name:
                p.normal_(0, 1.0 / math.sqrt(max(dcfg.markov_rank, 1)))
            else:
                p.normal_(0, std)
    return drafter, dcfg


def save_drafter(drafter, cfg_dict: dict, out_dir: str | Path, shared: dict[str, torch.Tensor] | None = None) -> Path:
    """config.json + model.safetensors (bf16, DeepSpec names). `shared` adds the embed_tokens/lm_head copies."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().to(torch.bfloat16).cpu().contiguous() for k, v in drafter.state_dict().items()}
    for name, w in (shared or {}).items():
        tensors[f"{name}.weight"] = w.detach().to(torch.bfloat16).cpu().contiguous()
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(cfg_dict, indent=2) + "\n")
    return out


# ---------------------------------------------------------------- anchors (spec §15.2)

def select_anchors(loss_mask: torch.Tensor, num_anchors: int, generator: torch.Generator | None = None):
    """loss_mask [B, T] bool -> anchors [B, A] (sorted positions) and keep [B, A] (False = dummy block).
    A position p is a valid anchor iff loss_mask[p] and loss_mask[p + 1]."""
    b, t = loss_mask.shape
    valid = torch.zeros_like(loss_mask)
    valid[:, :-1] = loss_mask[:, :-1] & loss_mask[:, 1:]
    a = min(num_anchors, t)
    scores = torch.rand(b, t, generator=generator, device="cpu").to(loss_mask.device)
    scores = scores.masked_fill(~valid, -1.0)
    top, idx = scores.topk(a, dim=1)
    keep = top >= 0
    idx = torch.where(keep, idx, torch.full_like(idx, t))  # dummies sort last
    idx, order = idx.sort(dim=1)
    keep = keep.gather(1, order)
    return torch.where(keep, idx, torch.zeros_like(idx)), keep


# ---------------------------------------------------------------- training forward (spec §15.3)

class BlockBatch:
    """Index tensors of a packed batch of anchor blocks: every tensor is [B, A, γ]."""

    def __init__(self, input_ids: torch.Tensor, anchors: torch.Tensor, keep: torch.Tensor, gamma: int, mask_id: int,
                 loss_mask: torch.Tensor | None = None):
        b, t = input_ids.shape
        k = torch.arange(gamma, device=input_ids.device)
        self.positions = anchors[..., None] + k  # [B, A, γ]: block row k sits at p + k
        self.anchors, self.keep, self.gamma = anchors, keep, gamma
        label_pos = self.positions + 1
        inside = label_pos < t
        safe = label_pos.clamp(max=t - 1)
        self.labels = input_ids.gather(1, safe.flatten(1)).view_as(safe)  # token at p + k + 1
        supervised = inside & keep[..., None]
        if loss_mask is not None:
            supervised &= loss_mask.gather(1, safe.flatten(1)).view_as(safe)
        self.mask = supervised.long().cumprod(-1).bool()  # contiguous from slot 0
        prev_pos = self.positions.clamp(max=t - 1)
        self.prev = input_ids.gather(1, prev_pos.flatten(1)).view_as(prev_pos)  # [x0, label_1, ..., label_{γ-1}]
        ids = torch.full_like(self.positions, mask_id)
        ids[..., 0] = torch.where(keep, input_ids.gather(1, anchors), torch.full_like(anchors, mask_id))
        self.block_ids = ids
        self.target_rows = prev_pos  # target row p + k predicts the token at p + k + 1


def attention_mask(anchors: torch.Tensor, keep: torch.Tensor, seq_len: int, gamma: int) -> torch.Tensor:
    """[B, 1, A*γ, T + A*γ] bool: a block row sees context keys < its anchor and its own block's rows."""
    b, a = anchors.shape
    dev = anchors.device
    row_anchor = anchors.repeat_interleave(gamma, dim=1)  # [B, A*γ]
    ctx = torch.arange(seq_len, device=dev)[None, None, :] < row_anchor[..., None]  # [B, Aγ, T]
    blk_of_row = torch.arange(a * gamma, device=dev) // gamma
    own = blk_of_row[:, None] == blk_of_row[None, :]  # [Aγ, Aγ]
    mask = torch.cat([ctx, own[None].expand(b, -1, -1)], dim=-1)
    return mask[:, None]


def _heads(x: torch.Tensor, n: int, d: int) -> torch.Tensor:
    return x.view(*x.shape[:-1], n, d)


def draft_hidden(drafter, embed_weight: torch.Tensor, taps: torch.Tensor, bb: BlockBatch,
                 rope: RotaryTable) -> torch.Tensor:
    """taps [B, T, m*d] of the target on the sequence -> final-normed block hidden h [B, A, γ, d]."""
    b, t, _ = taps.shape
    _, a, gamma = bb.positions.shape
    lc = drafter.config.layers
    hq, hkv, hd = lc.num_attention_heads, lc.num_key_value_heads, lc.head_dim
    ctx = drafter.hidden_norm(F.linear(taps, drafter.fc.weight))  # [B, T, d]
    ctx_pos = torch.arange(t, device=taps.device).expand(b, t).reshape(-1)
    blk_pos = bb.positions.reshape(-1)
    mask = attention_mask(bb.anchors, bb.keep, t, gamma)
    h = F.embedding(bb.block_ids.reshape(b, a * gamma), embed_weight)  # [B, Aγ, d]
    for layer in drafter.layers:
        att = layer.self_attn
        x = layer.input_layernorm(h)
        q = att.q_norm(_heads(F.linear(x, att.q_proj.weight), hq, hd))
        q = rope.apply(q.reshape(-1, hq, hd), blk_pos).view(b, a * gamma, hq, hd)
        k_blk = att.k_norm(_heads(F.linear(x, att.k_proj.weight), hkv, hd))
        k_blk = rope.apply(k_blk.reshape(-1, hkv, hd), blk_pos).view(b, a * gamma, hkv, hd)
        v_blk = _heads(F.linear(x, att.v_proj.weight), hkv, hd)
        k_ctx = att.k_norm(_heads(F.linear(ctx, att.k_proj.weight), hkv, hd))
        k_ctx = rope.apply(k_ctx.reshape(-1, hkv, hd), ctx_pos).view(b, t, hkv, hd)
        v_ctx = _heads(F.linear(ctx, att.v_proj.weight), hkv, hd)
        k = torch.cat([k_ctx, k_blk], 1).transpose(1, 2).repeat_interleave(hq // hkv, dim=1)  # [B, Hq, T+Aγ, D]
        v = torch.cat([v_ctx, v_blk], 1).transpose(1, 2).repeat_interleave(hq // hkv, dim=1)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.to(q.dtype), v.to(q.dtype), attn_mask=mask,
                                           scale=hd ** -0.5)
        h = h + F.linear(o.transpose(1, 2).reshape(b, a * gamma, hq * hd), att.o_proj.weight)
        x = layer.post_attention_layernorm(h)
        mlp = layer.mlp
        h = h + F.linear(F.silu(F.linear(x, mlp.gate_proj.weight)) * F.linear(x, mlp.up_proj.weight),
                         mlp.down_proj.weight)
    return drafter.norm(h).view(b, a, gamma, -1)


def heads_forward(drafter, lm_head_weight: torch.Tensor, h: torch.Tensor, prev: torch.Tensor):
    """Teacher-forced heads: h [B, A, γ, d], prev [B, A, γ] -> base logits U, corrected z (float32) and the
    confidence logits [B, A, γ] (float32)."""
    u = F.linear(h, lm_head_weight).float()
    z, feats = u, h
    if drafter.markov_head is not None:
        e = drafter.markov_head.markov_w1(prev)  # [B, A, γ, r]
        if drafter.markov_head.kind != "vanilla":
            raise NotImplementedError("the training recipe implements the vanilla Markov head")
        z = u + F.linear(e, drafter.markov_head.markov_w2.weight).float()
        if drafter.config.confidence_head_with_markov:
            feats = torch.cat([h, e.to(h.dtype)], -1)
    conf_logit = None
    if drafter.confidence_head is not None:
        proj = drafter.confidence_head.proj
        conf_logit = feats.float() @ proj.weight.float()[0] + proj.bias.float()[0]
    return u, z, conf_logit


def dspark_loss(z: torch.Tensor, target_logits: torch.Tensor, conf_logit: torch.Tensor | None, bb: BlockBatch,
                recipe: DraftRecipe) -> tuple[torch.Tensor, dict]:
    """0.1 CE + 0.9 L1 (= 2 TV) to the target distribution + 1.0 BCE(confidence, 1 - TV) (spec §15.4), fp32."""
    k = torch.arange(bb.gamma, device=z.device, dtype=torch.float32)
    w = torch.exp(-k / recipe.loss_decay_gamma) * bb.mask.float()  # [B, A, γ]
    wsum = w.sum().clamp(min=1e-6)
    logq = torch.log_softmax(z.float(), -1)
    q = logq.exp()
    p = torch.softmax(target_logits.float(), -1)
    ce = -logq.gather(-1, bb.labels[..., None])[..., 0]
    l1 = (q - p).abs().sum(-1)
    loss = recipe.ce_alpha * (w * ce).sum() / wsum + recipe.l1_alpha * (w * l1).sum() / wsum
    stats = {}
    with torch.no_grad():
        acc = (1 - 0.5 * l1).clamp(0, 1)
        match = (z.argmax(-1) == target_logits.argmax(-1)) & bb.mask
        m = bb.mask.float()
        stats["ce"] = ((w * ce).sum() / wsum).item()
        stats["l1"] = ((w * l1).sum() / wsum).item()
        stats["accept_per_slot"] = ((acc * m).sum((0, 1)) / m.sum((0, 1)).clamp(min=1)).tolist()
        stats["greedy_match_per_slot"] = (match.float().sum((0, 1)) / m.sum((0, 1)).clamp(min=1)).tolist()
        full = bb.mask.all(-1)
        if full.any():
            stats["expected_al"] = (1 + acc[full].cumprod(-1).sum(-1)).mean().item()
            stats["greedy_al"] = (1 + match[full].long().cumprod(-1).sum(-1).float()).mean().item()
    if conf_logit is not None:
        cstar = (1 - 0.5 * l1).clamp(0, 1).detach()
        bce = F.binary_cross_entropy_with_logits(conf_logit.float(), cstar, reduction="none")
        loss = loss + recipe.conf_alpha * (w * bce).sum() / wsum
        stats["bce"] = ((w * bce).sum() / wsum).item()
    return loss, stats


# ---------------------------------------------------------------- trainer

class DraftData:
    """Training sequences for the drafter: random corpus windows, or target continuations (prompt + generated,
    loss mask on the generated part)."""

    def __init__(self, device, seq_len: int, seed: int, stream: np.ndarray | None = None,
                 rows: np.ndarray | None = None, prompt_lens: np.ndarray | None = None):
        self.device, self.seq_len = device, seq_len
        self.gen = torch.Generator().manual_seed(seed)
        self.stream = torch.from_numpy(stream.astype(np.int64)) if stream is not None else None
        self.rows = torch.from_numpy(rows.astype(np.int64))[:, :seq_len] if rows is not None else None
        self.prompt_lens = torch.from_numpy(prompt_lens.astype(np.int64)) if prompt_lens is not None else None

    def sample(self, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.stream is not None:
            starts = torch.randint(0, len(self.stream) - self.seq_len, (batch,), generator=self.gen)
            ids = self.stream[starts[:, None] + torch.arange(self.seq_len)]
            mask = torch.ones_like(ids, dtype=torch.bool)
        else:
            pick = torch.randint(0, len(self.rows), (batch,), generator=self.gen)
            ids = self.rows[pick]
            mask = torch.arange(ids.shape[1])[None, :] >= self.prompt_lens[pick][:, None]
        return ids.to(self.device), mask.to(self.device)


@torch.no_grad()
def target_features(target, input_ids: torch.Tensor, taps: tuple[int, ...]):
    """Frozen HF target on [B, T] -> concatenated taps [B, T, m*d] (residual outputs of the tapped layers,
    HF hidden_states[l + 1]) and logits [B, T, V]."""
    out = target(input_ids=input_ids, output_hidden_states=True)
    hs = out.hidden_states
    return torch.cat([hs[l + 1] for l in taps], -1), out.logits


def block_logits(drafter, target, input_ids, loss_mask, recipe: DraftRecipe, rope, generator=None):
    """One training forward: returns (loss, stats)."""
    dcfg = drafter.config
    anchors, keep = select_anchors(loss_mask, recipe.num_anchors, generator)
    bb = BlockBatch(input_ids, anchors, keep, dcfg.block_size, dcfg.mask_token_id, loss_mask)
    taps, tlogits = target_features(target, input_ids, dcfg.target_layer_ids)
    embed = target.model.embed_tokens.weight
    h = draft_hidden(drafter, embed, taps, bb, rope)
    _, z, conf = heads_forward(drafter, target.lm_head.weight, h, bb.prev)
    b = input_ids.shape[0]
    t_at = tlogits.gather(1, bb.target_rows.reshape(b, -1, 1).expand(-1, -1, tlogits.shape[-1]))
    return dspark_loss(z, t_at.view(*bb.positions.shape, -1), conf, bb, recipe)


def load_hf_target(target_dir: str | Path, device, dtype=torch.bfloat16):
    from transformers import Qwen3ForCausalLM

    target = Qwen3ForCausalLM.from_pretrained(str(target_dir), dtype=dtype).to(device).eval()
    for p in target.parameters():
        p.requires_grad_(False)
    return target


def train_draft(target_dir: str | Path, data: DraftData, out_dir: str | Path, recipe: DraftRecipe = DraftRecipe(),
                device: str = "cuda", log=print, val: dict[str, DraftData] | None = None, include_shared: bool = True,
                mask_token_id: int | None = None) -> dict:
    from sparkdec.train.target import Clock, step_lr
    from sparkdec.train.tokenizer import load_tokenizer, special_token_ids

    torch.manual_seed(recipe.seed)
    target_cfg = json.loads((Path(target_dir) / "config.json").read_text())
    mask_id = mask_token_id if mask_token_id is not None else special_token_ids(load_tokenizer(target_dir)).mask
    cfg_dict = draft_config_dict(target_cfg, recipe, mask_id)
    drafter, dcfg = build_drafter(cfg_dict, target_cfg, recipe.seed)
    drafter = drafter.to(device).train()
    target = load_hf_target(target_dir, device, torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32)
    rope = RotaryTable(dcfg.layers.head_dim, dcfg.layers.rope_theta, recipe.seq_len + dcfg.block_size + 1, device)
    n_params = sum(p.numel() for p in drafter.parameters())
    log(f"drafter: {n_params / 1e6:.2f} M trainable parameters, recipe {json.dumps(asdict(recipe))}")
    opt = torch.optim.AdamW(drafter.parameters(), lr=recipe.lr, betas=(0.9, 0.95), weight_decay=recipe.weight_decay,
                            fused=torch.device(device).type == "cuda")
    use_amp = torch.device(device).type == "cuda"
    gen = torch.Generator().manual_seed(recipe.seed + 1)
    clock, step, history, next_eval = Clock(recipe.seconds, recipe.max_steps), 0, [], recipe.eval_every_s
    while True:
        progress = clock.progress(step)
        if progress >= 1.0:
            break
        lr = step_lr(opt, progress, recipe)
        ids, mask = data.sample(recipe.batch_size)
        with torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16, enabled=use_amp):
            loss, stats = block_logits(drafter, target, ids, mask, recipe, rope, gen)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(drafter.parameters(), 1.0)
        opt.step()
        step += 1
        if clock.elapsed() >= next_eval or clock.progress(step) >= 1.0:
            next_eval += recipe.eval_every_s
            rec = {"step": step, "s": round(clock.elapsed(), 1), "lr": lr, "loss": loss.item(), "train": stats}
            rec["val"] = {name: evaluate_blocks(drafter, target, d, recipe, rope) for name, d in (val or {}).items()}
            history.append(rec)
            line = f"draft step {step} {clock.elapsed():.0f}s lr {lr:.2e} loss {loss.item():.3f}"
            for name, v in [("train", stats)] + list(rec["val"].items()):
                line += (f" | {name} ce {v['ce']:.3f} l1 {v['l1']:.3f} E[AL] {v.get('expected_al', 0):.2f}"
                         f" greedy AL {v.get('greedy_al', 0):.2f}")
            log(line)
    shared = None
    if include_shared:
        shared = {"embed_tokens": target.model.embed_tokens.weight, "lm_head": target.lm_head.weight}
    save_drafter(drafter, cfg_dict, out_dir, shared)
    summary = {"params": n_params, "steps": step, "seconds": round(clock.elapsed(), 1), "history": history,
               "recipe": asdict(recipe)}
    (Path(out_dir) / "training_log.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


@torch.no_grad()
def evaluate_blocks(drafter, target, data: DraftData, recipe: DraftRecipe, rope, batches: int = 4) -> dict:
    """Teacher-forced block statistics on fixed validation batches (same seed every call)."""
    was = drafter.training
    drafter.eval()
    saved = data.gen.get_state()
    data.gen.manual_seed(1234)
    gen = torch.Generator().manual_seed(4321)
    agg: dict = {}
    dev = torch.device(data.device)
    for _ in range(batches):
        ids, mask = data.sample(recipe.batch_size)
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda"):
            _, stats = block_logits(drafter, target, ids, mask, recipe, rope, gen)
        for k, v in stats.items():
            agg.setdefault(k, []).append(v)
    data.gen.set_state(saved)
    drafter.train(was)
    return {k: (np.mean(v, axis=0).tolist() if isinstance(v[0], list) else float(np.mean(v))) for k, v in agg.items()}


def package_drafter(src_dir: str | Path, target_dir: str | Path, out_dir: str | Path) -> Path:
    """Write a drafter trained with --no-shared as a complete DeepSpec folder: its tensors plus the copies of the
    target's embedding and LM head (`embed_tokens.weight`, `lm_head.weight`) that DeepSpec checkpoints carry."""
    from safetensors.torch import load_file

    from sparkdec.models.loader import read_tensors

    src, out = Path(src_dir), Path(out_dir)
    tensors = load_file(str(src / "model.safetensors"))
    target = read_tensors(Path(target_dir))
    embed = target["model.embed_tokens.weight"]
    tensors["embed_tokens.weight"] = embed.to(torch.bfloat16).clone()
    tensors["lm_head.weight"] = target.get("lm_head.weight", embed).to(torch.bfloat16).clone()
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text((src / "config.json").read_text())
    return out
