"""ops/tiled_weights.py: a weight stored tile by tile in place, on the CPU (the products' bits: tests/triton_checks.py
under the interpreter, tests/test_gpu.py on the H200)."""
from __future__ import annotations

import pytest
import torch

from sparkdec.ops import tiled_weights as tw


def test_each_tile_is_one_block_and_a_k_step_lies_side_by_side():
    w = torch.randn(128, 512).to(torch.bfloat16)
    t = tw.tiled_copy(w, 64, 128)
    assert t.shape == w.shape and t.is_contiguous()
    flat = t.view(-1)
    for i in range(2):  # row tiles
        for j in range(4):  # K steps
            at = (j * 2 + i) * 64 * 128
            assert torch.equal(flat[at:at + 64 * 128].view(64, 128), w[i * 64:(i + 1) * 64, j * 128:(j + 1) * 128])
    with pytest.raises(AssertionError, match="whole number"):
        tw.tiled_copy(w[:, :500], 64, 128)


def test_set_tiled_round_trips_in_place_and_views_share_it():
    w = torch.randn(192, 256)
    rows, ptr = w.clone(), w.data_ptr()
    tw.set_tiled_(w, (64, 128))
    assert w.data_ptr() == ptr and not torch.equal(w, rows)
    assert tw.tiles_of(w) == (64, 128) and tw.tiles_of(w.detach()) == (64, 128)  # a state_dict entry counts
    assert tw.tiles_of(w[:64]) is None and tw.tiles_of(w.t()) is None
    assert torch.equal(tw.row_major(w), rows) and torch.equal(tw.row_major(w.detach()), rows)
    tw.set_tiled_(w, (64, 128))  # already so: unchanged
    assert torch.equal(tw.row_major(w), rows)
    tw.set_tiled_(w, (32, 64))  # other tiles: through the rows
    assert tw.tiles_of(w) == (32, 64) and torch.equal(tw.row_major(w), rows)
    tw.set_tiled_(w, None)
    assert torch.equal(w, rows) and tw.tiles_of(w) is None and tw.row_major(w) is w


def test_a_parameter_that_requires_grad_is_tiled_in_place():
    w = torch.nn.Parameter(torch.randn(64, 256))
    rows = w.detach().clone()
    tw.set_tiled_(w, (64, 128))
    assert tw.tiles_of(w) == (64, 128) and torch.equal(tw.row_major(w), rows)


def test_a_freed_tensor_at_the_same_address_is_not_tiled():
    w = torch.randn(64, 128)
    tw.set_tiled_(w, (64, 128))
    entry = tw._TILED[w.data_ptr()]
    del w
    assert entry[0]() is None  # the registry keeps no tensor alive
    v = torch.randn(64, 128)  # where the allocator reuses the address: the entry's tensor is gone, so rows
    tw._TILED[v.data_ptr()] = entry
    try:
        assert tw.tiles_of(v) is None and tw.row_major(v) is v
    finally:
        tw._TILED.pop(v.data_ptr())


def test_row_major_state_dict_undoes_tiled_fused_weights():
    """Qwen3ForCausalLM.row_major_state_dict: o, down and the fused qkv and gate_up stored tile by tile (their q/k/v
    and gate/up parameters views of them) still give the model's weights' values."""
    from dataclasses import replace

    from sparkdec.bench.shapes import SHAPES
    from sparkdec.models.qwen3 import Qwen3ForCausalLM

    cfg = replace(SHAPES["qwen3-4b"], hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=64, vocab_size=64)
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(cfg)
    before = {name: t.clone() for name, t in model.state_dict().items()}
    for layer in model.model.layers:
        layer.fuse()
        for w in layer.tileable_weights():
            tw.set_tiled_(w, (64, 64))
    assert all(tw.tiles_of(w) == (64, 64) for w in model.model.layers[1].tileable_weights())
    after = model.row_major_state_dict()
    assert after.keys() == before.keys()
    assert all(torch.equal(after[name], t) for name, t in before.items())
