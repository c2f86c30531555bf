"""Training-side tools: the text corpus, the tokenizer, and (later) target and drafter training loops."""
