"""The CPU lab: a tiny local model and tokenizer, generated problems, and the experiments built on them."""
