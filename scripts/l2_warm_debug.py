"""Capture the tiny target's decode graph with ops/l2_warm on and print the whole exception chain if it fails."""
import sys
import traceback

import torch

from helpers import make_target
from sparkdec import LLM
from sparkdec.engine.graphs import TargetGraphs
from sparkdec.ops import l2_warm

l2_warm.COLS = 256
model = make_target(sys.argv[1], vocab_size=509, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                    num_attention_heads=8, num_key_value_heads=2, head_dim=128, tie_word_embeddings=False,
                    max_position_embeddings=4096)
llm = LLM(model=str(model), device="cuda", dtype="bfloat16", cuda_graphs=False)
r = llm.engine.runner
try:
    g = TargetGraphs(r, 4, r.max_positions, r.trash_page)
    g.capture()
    print("captured", sorted(g.graphs))
except Exception as exc:
    traceback.print_exception(exc)
    print("context:", repr(exc.__context__))
