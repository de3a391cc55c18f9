"""Stand-in for gcsfs (allRank's ``utils/file_utils.py`` imports it for Google Cloud Storage paths,
which benchmarks/bench_attn_step.py never uses; see README.md)."""
