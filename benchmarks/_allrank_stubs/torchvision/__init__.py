"""Stand-in for torchvision, for importing allRank in benchmarks/bench_attn_step.py (see README.md)."""
