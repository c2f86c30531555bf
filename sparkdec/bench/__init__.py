"""Benchmarks: kernel/round cost model on the device and the speculative-vs-plain A/B harness."""
