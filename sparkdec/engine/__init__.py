"""The runtime: sequences, paged KV cache, scheduler, runner and the engine loop."""
