"""ForwardContext: everything a model forward needs to know about a packed, ragged batch of tokens."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from sparkdec.env import flag

# prompt rows through the prefill attention kernel (ops/triton_prefill.py) and steps with prompt rows eager.
# On by default (H200: an 8k-token prompt 387 -> 268 ms); SPARKDEC_PREFILL_KERNEL=0 sends them to the split kernel
PREFILL_KERNEL = flag("SPARKDEC_PREFILL_KERNEL", True)
BLOCK_ROWS = 16  # consecutive rows of one sequence that attention handles together (shared key/value loads)


@dataclass(slots=True)
class Segment:
    """The rows of one sequence in a packed forward, grouped by how many keys they see."""

    seq_index: int  # row of block_tables
    row_groups: list[tuple[int, int, int]]  # (row start, row stop, kv_len); rows in a group share kv_len
    max_kv_len: int


@dataclass(slots=True)
class ForwardContext:
    positions: torch.Tensor  # [T] int64 absolute positions
    slot_mapping: torch.Tensor  # [T] int64 KV slot each row writes
    block_tables: torch.Tensor  # [S, max_pages] int64
    page_size: int
    segments: list[Segment] = field(default_factory=list)  # host-side row groups (reference attention)
    row_seq: torch.Tensor | None = None  # [T] row of block_tables for each token (kernel attention)
    row_kv_len: torch.Tensor | None = None  # [T] keys each token sees
    max_kv_len: int = 0  # bound on row_kv_len (sizes the kernel grid; a graph uses the context limit)
    row_kv_len_host: list[int] | None = None  # row_kv_len on the host (eager contexts; None inside graphs)
    # row blocks for kernel attention: block b covers rows block_lead[b] .. + block_rows[b] - 1 (lead -1: none)
    block_lead: torch.Tensor | None = None  # [G] int32
    block_rows: torch.Tensor | None = None  # [G] int32
    blocks_host: list[tuple[int, int]] | None = None  # (lead, rows) on the host (eager contexts)
    # prompt rows (CUDA): rows from prompt_row on are prompt rows; they take the prefill kernel in their own
    # blocks (the blocks above then cover the rows before prompt_row only). None: no prompt rows
    prompt_row: int | None = None
    prompt_lead: torch.Tensor | None = None  # [Gp] int32
    prompt_rows: torch.Tensor | None = None  # [Gp] int32

    @property
    def num_tokens(self) -> int:
        return int(self.positions.shape[0])


def build_context(rows: list[tuple[list[int], list[int], bool]], page_size: int,
                  device: torch.device | str, prompt_from: int | None = None) -> ForwardContext:
    """rows: per sequence (block_table, positions, is_block). Causal rows see keys up to their own
    position; a block (drafter) sees everything up to the end of the block. prompt_from: index of the first
    entry that is a prompt chunk (all later entries are too); their rows take the prefill attention kernel."""
    positions: list[int] = []
    slots: list[int] = []
    segments: list[Segment] = []
    width = max(len(bt) for bt, _, _ in rows)
    tables = torch.zeros(len(rows), width, dtype=torch.long)
    for i, (table, pos, is_block) in enumerate(rows):
        tables[i, :len(table)] = torch.tensor(table, dtype=torch.long)
        start = len(positions)
        positions.extend(pos)
        slots.extend(table[p // page_size] * page_size + p % page_size for p in pos)
        if is_block:
            end = max(pos) + 1
            groups = [(start, start + len(pos), end)]
        else:
            groups = [(start + j, start + j + 1, p + 1) for j, p in enumerate(pos)]
        segments.append(Segment(i, groups, max(g[2] for g in groups)))
    spans = [(seg.row_groups[0][0], seg.row_groups[-1][1]) for seg in segments]
    cut = len(spans) if prompt_from is None else prompt_from
    blocks, prompt_blocks = row_blocks(spans[:cut]), row_blocks(spans[cut:])
    row_seq = [seg.seq_index for seg in segments for a, b, _ in seg.row_groups for _ in range(a, b)]
    row_len = [n for seg in segments for a, b, n in seg.row_groups for _ in range(a, b)]
    return ForwardContext(
        positions=torch.tensor(positions, dtype=torch.long, device=device),
        slot_mapping=torch.tensor(slots, dtype=torch.long, device=device),
        block_tables=tables.to(device),
        page_size=page_size,
        segments=segments,
        row_seq=torch.tensor(row_seq, dtype=torch.int32, device=device),
        row_kv_len=torch.tensor(row_len, dtype=torch.int32, device=device),
        max_kv_len=max(row_len),
        row_kv_len_host=row_len,
        block_lead=torch.tensor([a for a, _ in blocks], dtype=torch.int32, device=device),
        block_rows=torch.tensor([n for _, n in blocks], dtype=torch.int32, device=device),
        blocks_host=blocks,
        prompt_row=spans[cut][0] if cut < len(spans) else None,
        prompt_lead=torch.tensor([a for a, _ in prompt_blocks], dtype=torch.int32, device=device),
        prompt_rows=torch.tensor([n for _, n in prompt_blocks], dtype=torch.int32, device=device),
    )


def row_blocks(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Row spans [start, stop) of the sequences -> (lead row, rows) blocks of at most BLOCK_ROWS rows each."""
    return [(j, min(BLOCK_ROWS, stop - j)) for start, stop in spans for j in range(start, stop, BLOCK_ROWS)]
