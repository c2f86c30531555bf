"""The CUDA-graph input staging (engine/graphs.py) writes exactly the metadata build_context computes (run on CPU)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from sparkdec.engine.context import build_context
from sparkdec.engine import graphs
from sparkdec.engine.graphs import ProposeGraphs, TargetGraphs

PS, TRASH = 16, 40


def fake_runner(gamma: int = 4):
    drafter = SimpleNamespace(_fused_markov_ok=lambda coupling=None: True)  # its graphs carry the coupled race
    return SimpleNamespace(device=torch.device("cpu"), page_size=PS, draft_cfg=SimpleNamespace(block_size=gamma),
                           drafter=drafter)


def test_target_staging_matches_build_context_and_skips_unchanged_tables():
    g = TargetGraphs(fake_runner(), max_seqs=4, max_positions=40 * PS, trash_page=TRASH, tiers=(16, 32))
    t1, t2 = [5, 9, 2, 7], [11, 3]
    pieces = [(t1, [10, 11, 12], [50, 51, 52]), (t2, [7], [20]), (t1[:1], [1, 2], [3, 4])]
    for _ in range(2):  # the second round reuses the staged buffers
        g._fill(pieces, [p[0] for p in pieces], 16)
        ctx = build_context([(bt, pos, False) for bt, _, pos in pieces], PS, "cpu")
        n = ctx.num_tokens
        assert g.ids[:n].tolist() == [t for _, toks, _ in pieces for t in toks]
        assert torch.equal(g.positions[:n], ctx.positions) and torch.equal(g.slots[:n], ctx.slot_mapping)
        assert g.row_seq[:n].tolist() == ctx.row_seq.tolist() and g.row_len[:n].tolist() == ctx.row_kv_len.tolist()
        assert g.slots[n:16].eq(TRASH * PS).all() and g.row_len[n:16].eq(1).all() and g.row_seq[n:16].eq(4).all()
        nb = len(ctx.blocks_host)  # the sequences' row blocks, then the padding rows as one more block
        assert list(zip(g.block_lead[:nb + 1].tolist(), g.block_rows[:nb + 1].tolist())) == ctx.blocks_host + [(n, 16 - n)]
        assert g.block_lead[nb + 1:16].eq(-1).all() and g.block_rows[nb + 1:16].eq(0).all()
        for i, (bt, _, _) in enumerate(pieces):
            assert g.tables[i, :len(bt)].tolist() == bt
    drafts = torch.tensor([70, 71, 72, 73])
    fill = ([1, 2], drafts, [2, 3])  # packed rows 1 and 2 take drafts[2] and drafts[3]
    assert g._fill(pieces, [p[0] for p in pieces], 16, fill) == 2
    g.ids.index_copy_(0, g.fill_rows[:2], drafts.index_select(0, g.fill_src[:2]))
    assert g.ids[:4].tolist() == [10, 72, 73, 7]
    g.tables[0, 0] = -1  # unchanged table: not copied again
    g._fill(pieces, [p[0] for p in pieces], 16)
    assert int(g.tables[0, 0]) == -1
    g._fill([(t2, [1], [5])] + pieces[1:], [t2] + [p[0] for p in pieces[1:]], 16)  # a different sequence in row 0
    assert g.tables[0, :2].tolist() == t2


def test_propose_staging_rows_and_padding():
    gamma = 4
    g = ProposeGraphs(fake_runner(gamma), max_seqs=4, max_positions=40 * PS, trash_page=TRASH)
    tables, anchors, starts = [[5, 9, 2, 7], [11, 3]], [100, 200], [30, 14]
    g._fill(tables, anchors, starts, 4)
    rows = [(bt, list(range(s, s + gamma)), True) for bt, s in zip(tables, starts)]
    ctx = build_context(rows, PS, "cpu")
    n = 2 * gamma
    assert torch.equal(g.positions[:n], ctx.positions) and torch.equal(g.slots[:n], ctx.slot_mapping)
    assert g.row_len[:n].tolist() == ctx.row_kv_len.tolist()
    assert g.anchors[:4].tolist() == [100, 200, 0, 0]
    assert g.slots[n:4 * gamma].eq(TRASH * PS).all() and g.row_len[n:4 * gamma].eq(gamma).all()
    assert g.tables[2:4].eq(TRASH).all()
    g._fill(tables[:1], anchors[:1], starts[:1], 2)  # fewer sequences: row 1 becomes a trash row again
    assert g.tables[1].eq(TRASH).all() and g.tables[0, :4].tolist() == tables[0]


def test_chained_propose_staging_equals_the_hosts_staging_of_the_accepted_round():
    """ProposeGraphs.run_chained stages, from the verify's tokens on the device (spec/chain.stage_reference on CPU; the
    CUDA kernel equals it: tests/triton_checks.check_chain_stage), what _fill stages from the host's acceptance."""
    gamma = 4
    g = ProposeGraphs(fake_runner(gamma), max_seqs=4, max_positions=40 * PS, trash_page=TRASH)
    replayed = []
    g.graphs = {4: (SimpleNamespace(replay=lambda: replayed.append(1)), "out")}
    tables, starts = [[5, 9, 2, 7], [11, 3]], [30, 14]
    drafts = torch.tensor([[1, 2, 3, 4], [6, 6, 6, 6]])
    first = torch.tensor([8, 1, 2, 9, 7, 7, 5, 6, 6])  # sequence 0: rows 0-4 (ℓ 4), sequence 1: rows 5-8 (ℓ 3)
    vals = torch.tensor([[0, 5], [4, 3], starts])
    assert g.run_chained(tables, first, drafts, vals, None, 4) == "out" and replayed == [1]
    chained = [t.clone() for t in (g.positions, g.slots, g.row_len, g.anchors)]
    g._fill(tables, [int(first[0]), int(first[5])], [30 + 1, 14 + 1], 4)  # none of 0's drafts kept, none of 1's
    assert all(torch.equal(a, b) for a, b in zip(chained, (g.positions, g.slots, g.row_len, g.anchors)))
    first[:2] = torch.tensor([1, 3])  # now 0 keeps one draft (then 3 != 2), 1 keeps two (then 5 != 6)
    first[5:8] = torch.tensor([6, 6, 5])
    g.run_chained(tables, first, drafts, vals, None, 4)
    chained = [t.clone() for t in (g.positions, g.slots, g.row_len, g.anchors)]
    g._fill(tables, [3, 5], [30 + 2, 14 + 3], 4)
    assert all(torch.equal(a, b) for a, b in zip(chained, (g.positions, g.slots, g.row_len, g.anchors)))


def test_propose_staging_of_the_coupled_race():
    """Coupled rows stage (key base, temperature, anchor position); argmax rows and padding temperature 0; a round
    with no coupled row clears what the last one staged."""
    g = ProposeGraphs(fake_runner(4), max_seqs=4, max_positions=40 * PS, trash_page=TRASH)
    assert g.couples
    g._stage_race([(-5, 0.7), None], [30, 14], 4)
    key, temp, apos = g.race
    assert key[:4].tolist() == [-5, 0, 0, 0] and apos[:4].tolist() == [30, 0, 0, 0]
    assert temp[:4].tolist() == [0.699999988079071, 0.0, 0.0, 0.0]
    g._stage_race(None, [30, 14], 4)
    assert temp.eq(0).all() and not g.race_live


def test_a_lone_short_row_replays_the_short_context_graph():
    """graph_for: the first short graph (engine/graphs.SHORT_BOUNDS) whose bound holds a lone row's keys, else the
    tier's own (also when no short graph was captured)."""
    from types import SimpleNamespace

    from sparkdec.engine import graphs

    g = SimpleNamespace(short={1: [(2048, "s2k"), (3072, "s3k")]}, graphs={1: "one", 8: "eight"})
    row = lambda pos, k=1: [([0], [5] * k, list(range(pos, pos + k)))]  # noqa: E731
    pick = graphs.TargetGraphs.graph_for
    assert pick(g, row(0), 1) == "s2k"
    assert pick(g, row(2047), 1) == "s2k"  # keys 0 .. 2047
    assert pick(g, row(2048), 1) == "s3k"
    assert pick(g, row(3071), 1) == "s3k"
    assert pick(g, row(3072), 1) == "one"
    assert pick(g, row(0, 8), 8) == "eight"
    g.short = {}
    assert pick(g, row(0), 1) == "one"
    g.short = {1: [(3072, "short")], 8: [(3072, "short8")]}  # SHORT_TIERS (1, 8): the longest row decides
    assert pick(g, row(0, 8), 8) == "short8"
    assert pick(g, row(0, 8) + row(3072, 1), 8) == "eight"


def test_short_graphs_are_captured_with_their_settings_and_restore_them(monkeypatch):
    """capture_short: each bound's warm-up and capture run under SHORT_PDL's PDL modes and the bound's settings, which
    are restored afterwards, also when the capture fails; off (SHORT_PDL {} or no bounds), nothing is captured."""
    import pytest

    from sparkdec.engine import graphs
    from sparkdec.ops import triton_attention, triton_gemm

    seen = []
    monkeypatch.setattr(graphs, "warm_up", lambda tiers, fwd: seen.append(("warm", dict(triton_gemm.PDL_KINDS))))
    monkeypatch.setattr(graphs, "capture_one", lambda fwd, t, pool: (seen.append(
        ("capture", t, triton_attention.PROGRAMS_ONE_ROW)) or ("graph", t)))
    monkeypatch.setattr(graphs, "SHORT_BOUNDS", ((100, {"PROGRAMS_ONE_ROW": 7}), (300, {})))
    monkeypatch.setattr(graphs, "SHORT_PDL_ONE_ROW", {})  # (the one-row modes: the test below)
    kinds, programs = dict(triton_gemm.PDL_KINDS), triton_attention.PROGRAMS_ONE_ROW
    assert graphs.capture_short((1,), None, None) == {1: [(100, ("graph", 1)), (300, ("graph", 1))]}
    assert seen[0] == ("warm", {**kinds, **graphs.SHORT_PDL}) and seen[1] == ("capture", 1, 7)
    assert seen[3] == ("capture", 1, programs)
    assert triton_gemm.PDL_KINDS == kinds and triton_attention.PROGRAMS_ONE_ROW == programs
    monkeypatch.setattr(graphs, "capture_one", lambda *a: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        graphs.capture_short((1,), None, None)
    assert triton_gemm.PDL_KINDS == kinds and triton_attention.PROGRAMS_ONE_ROW == programs
    monkeypatch.setattr(graphs, "SHORT_BOUNDS", ())
    assert graphs.capture_short((1,), None, None) == {}
    monkeypatch.setattr(graphs, "SHORT_PDL", {})
    monkeypatch.setattr(graphs, "SHORT_BOUNDS", ((100, {}),))
    assert graphs.capture_short((1,), None, None) == {}


def test_the_mlp_norm_takes_the_norms_pdl_mode_unless_it_has_its_own(monkeypatch):
    """triton_gemm.pdl_mode: "norm_mlp" (the RMSNorm before the MLP) falls back to "norm", then to PDL_MODE; PDL off
    is 0 for every kind."""
    from sparkdec.ops import triton_gemm

    monkeypatch.setattr(triton_gemm, "PDL_MODE", 1)
    monkeypatch.setattr(triton_gemm, "PDL_KINDS", {"norm": 2})
    assert triton_gemm.pdl_mode("norm_mlp") == 2 and triton_gemm.pdl_mode("rope") == 1
    monkeypatch.setattr(triton_gemm, "PDL_KINDS", {"norm": 2, "norm_mlp": 3})
    assert triton_gemm.pdl_mode("norm_mlp") == 3 and triton_gemm.pdl_mode("norm") == 2
    monkeypatch.setattr(triton_gemm, "PDL_KINDS", {})
    assert triton_gemm.pdl_mode("norm_mlp") == 1
    monkeypatch.setattr(triton_gemm, "PDL_MODE", 0)
    assert triton_gemm.pdl_mode("norm_mlp") == 0


def test_short_bound_settings_name_existing_module_settings():
    """engine/graphs.setting: "NAME" is ops/triton_attention's, "module.NAME" ops/module's; every setting the shipped
    short graphs patch exists (a misspelt one would be set on the module and silently change nothing)."""
    from sparkdec.ops import gluon_gemv, triton_attention

    assert graphs.setting("GLUON_SPLIT") == (triton_attention, "GLUON_SPLIT")
    assert graphs.setting("gluon_gemv.LONE_ROW_STAGES") == (gluon_gemv, "LONE_ROW_STAGES")
    for _, settings in graphs.SHORT_BOUNDS:
        for name in settings:
            module, attr = graphs.setting(name)
            assert hasattr(module, attr), name


def test_short_graphs_size_their_attention_for_their_bound_when_asked(monkeypatch):
    """SHORT_SIZED: the short graphs of those bounds get their bound as the most keys a row holds (the attention's
    max_kv_len); the others the window (keys None)."""
    seen = []
    monkeypatch.setattr(graphs, "warm_up", lambda tiers, forward: None)
    monkeypatch.setattr(graphs, "capture_one", lambda forward, t, pool: forward(t))
    monkeypatch.setattr(graphs, "SHORT_BOUNDS", ((100, {}), (300, {})))
    for sized, want in (((100, 300), [100, 300]), ((100,), [100, None]), ((), [None, None])):
        seen.clear()
        monkeypatch.setattr(graphs, "SHORT_SIZED", sized)
        graphs.capture_short([1], lambda t, keys=None: seen.append(keys), None)
        assert seen == want


def test_a_tier_gets_short_graphs_up_to_its_bound_only(monkeypatch):
    """SHORT_TIER_BOUND: a named tier is captured only for the bounds up to its own; other tiers for every bound, and
    rows past a tier's last short graph replay its own (graph_for)."""
    captured = []
    monkeypatch.setattr(graphs, "warm_up", lambda tiers, forward: None)
    monkeypatch.setattr(graphs, "capture_one", lambda forward, t, pool: captured.append(t) or f"g{t}")
    monkeypatch.setattr(graphs, "SHORT_BOUNDS", ((100, {}), (300, {})))
    monkeypatch.setattr(graphs, "SHORT_TIER_BOUND", {8: 100})
    short = graphs.capture_short([1, 8], lambda t, keys=None: None, None)
    assert short == {1: [(100, "g1"), (300, "g1")], 8: [(100, "g8")]}
    assert sorted(captured) == [1, 1, 8]


def test_decode_rows_moved_on_by_the_graph_equal_the_next_steps_staging(monkeypatch):
    """ADVANCE: after a greedy decode replay the graph has moved its rows on (ops/triton_argmax.Advance; here its
    torch reference in a fake replay). The next step for the same rows then stages nothing, and what the rows hold is
    what staging that step would write, across a page boundary too; a changed table or tokens from elsewhere (a
    sampled step) stage again."""
    from sparkdec.ops.triton_argmax import Advance, advance_reference

    g = TargetGraphs(fake_runner(), max_seqs=4, max_positions=40 * PS, trash_page=TRASH, tiers=(2, 4))
    g.advances = True  # as capture() sets it from graphs.ADVANCE
    g.ring = torch.zeros(graphs.RING_SLOTS, 4, dtype=torch.long)  # (RING_READBACK; pinned memory on CUDA)
    ref = TargetGraphs(fake_runner(), max_seqs=4, max_positions=40 * PS, trash_page=TRASH, tiers=(4,))
    argmax, seen = torch.zeros(4, dtype=torch.long), []

    class FakeGraph:
        def replay(self):
            seen.append(g.dev_stage.clone())  # what this replay read
            argmax.copy_(torch.tensor([100, 200, 300, 400]) + len(seen))  # its tokens
            advance_reference(argmax, Advance(g.advance_on[:4], g.ids[:4], g.positions[:4], g.slots[:4],
                                              g.row_len[:4], g.row_seq[:4], g.tables, PS, g.ring))

    monkeypatch.setattr(g, "graph_for", lambda pieces, tier: (FakeGraph(), (None, argmax)))
    tables, pos = [[5, 9, 2], [11, 3, 8]], [14, 30]  # row 0 enters its second page at 16
    g.run([(tables[i], [7 + i], [pos[i]]) for i in range(2)], 4, advance=True)
    for step in range(4):
        pos = [p + 1 for p in pos]
        turn = g._turn
        g.run([(tables[i], [0], [pos[i]]) for i in range(2)], 4, ([0, 1], argmax[:2], [0, 1]), advance=True)
        assert g._turn == turn  # nothing staged
        tokens = [101 + step, 201 + step]  # the previous replay's argmax
        ref._fill([(tables[i], [tokens[i]], [pos[i]]) for i in range(2)], tables, 4, advance=True)
        assert torch.equal(seen[-1][:5], ref.dev_stage[:5]) and torch.equal(seen[-1][7:9], ref.dev_stage[7:9]), step
        assert g.ring_slot == (step + 1) % graphs.RING_SLOTS and g.ring_tokens(g.ring_slot, 2) == argmax[:2].tolist()
    tables[0].append(4)  # a new page: staged again
    pos = [p + 1 for p in pos]
    g.run([(tables[i], [0], [pos[i]]) for i in range(2)], 4, ([0, 1], argmax[:2], [0, 1]), advance=True)
    assert g._turn != turn
    turn = g._turn
    other = argmax.clone()  # a sampled step's tokens: not the graph's argmax
    pos = [p + 1 for p in pos]
    g.run([(tables[i], [0], [pos[i]]) for i in range(2)], 4, ([0, 1], other[:2], [0, 1]), advance=True)
    assert g._turn != turn
    assert g.ring_tokens(g.ring_slot, 2) == argmax[:2].tolist() and not g.ring[:, 2:].any()  # padding rows: none

    def staged(pieces, tier=4, fill=None, advance=True) -> bool:
        turn = g._turn
        g.run(pieces, tier, fill, advance=advance)
        return g._turn != turn

    def step(rows=(0, 1), src=(0, 1), ahead=1, tier=4) -> bool:  # the next step of these rows -> staged?
        pos[:] = [p + ahead for p in pos]
        return staged([(tables[i], [0], [pos[i]]) for i in rows], tier, (list(range(len(rows))), argmax[:2], list(src)))

    assert not step() and not step()
    assert step(src=(1, 0))  # the rows' tokens swapped
    assert step(ahead=2) and not step() and step(tier=2) and step(rows=(0,), src=(0,))  # a position skipped, a tier, a row gone
    assert staged([(tables[0], [5, 6], [pos[0] + 1, pos[0] + 2])], advance=False) and not g.advance_on.any()  # verify
    assert step(ahead=2) and not step()  # the verify replay moved nothing: stage again, then move on
    assert pos[1] + 1 == len(tables[1]) * PS  # row 1's next position lies past its block table: staged (which fails)
    with pytest.raises(IndexError):
        step()


def test_short_graphs_of_one_row_alone_take_the_one_row_pdl_modes(monkeypatch):
    """capture_short: the one-row short graph is warmed up (its kernels compiled outside the capture) and captured
    under SHORT_PDL plus SHORT_PDL_ONE_ROW; the other tiers under SHORT_PDL alone; the modes are restored after."""
    from sparkdec.ops import triton_gemm

    seen = {"warm": [], "capture": []}
    monkeypatch.setattr(graphs, "warm_up", lambda tiers, fwd: seen["warm"].append((tuple(tiers), dict(
        triton_gemm.PDL_KINDS))))
    monkeypatch.setattr(graphs, "capture_one", lambda fwd, t, pool: seen["capture"].append((t, dict(
        triton_gemm.PDL_KINDS))) or ("graph", t))
    monkeypatch.setattr(graphs, "SHORT_BOUNDS", ((1280, {}),))
    monkeypatch.setattr(graphs, "SHORT_TIER_BOUND", {})
    before = dict(triton_gemm.PDL_KINDS)
    short = graphs.capture_short((1, 8), lambda t, keys=None: None, None)
    assert [b for b, _ in short[1]] == [1280] and [b for b, _ in short[8]] == [1280]
    shared = {**before, **graphs.SHORT_PDL}
    one_row = {**shared, **graphs.SHORT_PDL_ONE_ROW}
    assert graphs.SHORT_PDL_ONE_ROW and one_row != shared
    assert dict(seen["capture"]) == {8: shared, 1: one_row}
    assert seen["warm"] == [((8,), shared), ((1,), one_row)]  # each tier warmed up once, under its own modes
    assert triton_gemm.PDL_KINDS == before


def test_table_rows_point_past_a_shorter_table_at_the_trash_page():
    """A row that held a longer table (another sequence, or this one before a preemption) keeps none of its pages."""
    static = torch.full((3, 6), 99, dtype=torch.long)  # 99: the trash page
    rows = graphs.TableRows(static)
    rows.write([[1, 2, 3, 4], [5]])
    rows.write([[7, 8], [5, 6]])  # row 0: a shorter table; row 1: grown
    assert static.tolist() == [[7, 8, 99, 99, 99, 99], [5, 6, 99, 99, 99, 99], [99] * 6]
    assert rows.unchanged([[7, 8], [5, 6]])
