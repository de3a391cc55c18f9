#!/usr/bin/env bash
# The GPU checks and timings in one call, for a machine with a CUDA GPU (docs/benchmarks.md, "GPU"):
#   1. the tests marked `gpu` (tests/e2e/test_gpu.py): every neural model trains, predicts and exports on
#      CUDA; bf16 autocast; fp16 with the gradient scaler; a run killed on CUDA resumes with CUDA's RNG;
#      the CLI trains on CUDA and the model predicts on the CPU;
#   2. bench_attn_step.py --device cuda: `attn`'s training step against allRank's own model (needs
#      allRank installed apart: ALLRANK_DIR, see bench_attn_step.py; without it those rows are skipped);
#   3. bench_train_throughput.py --device cuda --parts models: every neural model's training step.
# Each part has its own time limit; logs, JSON and the GPU's identity go to OUTDIR, and the tables are
# printed last. Exit status: that of the tests (the benchmarks' failures are printed, not hidden).
#
#   benchmarks/gpu_checks.sh OUTDIR [ALLRANK_DIR]        (PYTHON=... picks the interpreter)
set -u
out=${1:?usage: benchmarks/gpu_checks.sh OUTDIR [ALLRANK_DIR]}
allrank=${2:-}
py=${PYTHON:-python3}
cd "$(dirname "$0")/.." || exit 2
mkdir -p "$out"
"$py" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device visible to torch')" || exit 2
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv \
  >"$out/nvidia-smi.csv" 2>&1
"$py" -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda, torch.cuda.get_device_name(0))" \
  | tee "$out/torch.txt"

timeout 120 "$py" -m pytest -q -m gpu tests/e2e/test_gpu.py -p no:cacheprovider --junitxml "$out/gpu-tests.xml" \
  >"$out/gpu-tests.log" 2>&1
tests=$?

ar=()
[ -n "$allrank" ] && ar=(--allrank "$allrank")
timeout 100 "$py" benchmarks/bench_attn_step.py --device cuda "${ar[@]}" --isolate none --threads 1 --rounds 3 --warmup 5 \
  --repeats 20 --json "$out/attn_step_cuda.json" >"$out/attn_step_cuda.log" 2>&1
attn=$?
timeout 120 "$py" benchmarks/bench_train_throughput.py --device cuda --isolate none --parts models --threads 1 --warmup 5 \
  --repeats 20 --json "$out/train_throughput_cuda.json" >"$out/train_throughput_cuda.log" 2>&1
throughput=$?

for part in attn_step_cuda train_throughput_cuda; do
  echo; echo "=== $part"; sed '/^```json/,$d' "$out/$part.log" | grep -v '^  round \|^  [a-z0-9-]*: [0-9.]* ms/step' | tail -n 40
done
echo; echo "=== GPU tests"; tail -n 25 "$out/gpu-tests.log"
echo "exit: tests $tests, attn step $attn, throughput $throughput (124 = timed out)"
exit "$tests"
