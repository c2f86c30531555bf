"""Speculative decoding: propose, choose verify lengths, verify, accept and commit."""
