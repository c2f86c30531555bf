"""Model definitions (Qwen3 target, DSpark drafter) and checkpoint loading."""
