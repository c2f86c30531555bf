"""Device check: the attention rows-in-blocks == rows-alone bits test under the split kernel's variants (session 15).
usage: python scripts/check_split_variants.py"""
import sparkdec.ops.triton_attention as ta
from test_gpu import test_attention_rows_in_blocks_equal_rows_alone

VARIANTS = {"pages_early": dict(PAGES_EARLY=True), "qt16_w1": dict(QUERY_TILE_ONE_ROW=16, SPLIT_WARPS_ONE_ROW=1),
            "qt32_w2": dict(QUERY_TILE_ONE_ROW=32, SPLIT_WARPS_ONE_ROW=2)}
for name, knobs in VARIANTS.items():
    saved = {k: getattr(ta, k) for k in knobs}
    for k, v in knobs.items():
        setattr(ta, k, v)
    try:
        test_attention_rows_in_blocks_equal_rows_alone()
        print(name, "bits: rows alone == rows in blocks")
    except AssertionError as e:
        print(name, "bits DIFFER at row", e)
    finally:
        for k, v in saved.items():
            setattr(ta, k, v)
