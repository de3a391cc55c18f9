#!/usr/bin/env bash
# The CPU benchmarks whose runs are stored as evidence, one after the other at their evidence settings,
# for an otherwise IDLE machine (docs/benchmarks.md, "CPU benchmarks stored as evidence"). Each step has
# its own time limit (expected seconds on an idle 2-core machine, then the limit; about 10 minutes
# expected in all, at most the sum of the limits, 27 minutes); a step that fails or runs out of time is
# reported and the others still run. Writes STEP.json and STEP.log of each step into OUTDIR; then
#   python benchmarks/cpu_evidence.py --store OUTDIR
# stores the runs as evidence/bench/NAME-DATE.json and rewrites the docs' blocks from them.
#
#   1. pipeline-graph  bench_pipeline_graph.py: the whole-pipeline ONNX graph against LightGBM's predict
#                      plus the re-ranker's graph, MQ2008's test fold and 1,000-item lists,
#                      both again with nearly every initial score tied                        190 s (400)
#   2. serving-avx512  bench_inference.py --serving-only --models qilcm: the served graph against the
#                      same-MAC matrix product, the CPU's own instruction set                   45 s (150)
#   3. serving-avx2    the same with torch's kernels and MKL restricted to AVX2 (ONNX Runtime's are
#                      not: MLAS picks them from the CPU's flags, recorded in the JSON)        45 s (150)
#   4. serve           bench_serve.py: /rank and the KServe v2 binary route at 1, 8, 64 clients
#                      against in-process session.run                                          80 s (200)
#   5. startup         bench_startup.py: predict on an ONNX file, the estimators' import       140 s (240)
#   6. batch-predict   bench_batch_predict.py: Ray Data with 1 and 2 workers vs one process     60 s (240)
#   7. clicks-step     bench_clicks.py: a training step with each train.debias method against
#                      naive training, context models and short linear steps                  60 s (240)
#
# LIMIT_SCALE=N multiplies every limit (a slower or busy machine, e.g. the --quick check beside other work).
# --quick runs every step at tiny sizes (seconds each): a check that the steps run; its JSON files are
# marked quick and cpu_evidence.py refuses them. Exit status: 0 when every step wrote its JSON, else 1.
#
#   benchmarks/cpu_checks.sh OUTDIR [--quick]        (PYTHON=... picks the interpreter)
set -u
usage="usage: benchmarks/cpu_checks.sh OUTDIR [--quick]"
out=${1:?$usage}
quick=${2:-}
if [ -n "$quick" ] && [ "$quick" != --quick ]; then echo "$usage" >&2; exit 2; fi
cd "$(dirname "$0")/.." || exit 2
default_py=python3
[ -x .venv/bin/python ] && default_py=.venv/bin/python
py=${PYTHON:-$default_py}
mkdir -p "$out" || exit 2
out=$(cd "$out" && pwd)
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
quick_args=()
scale=${LIMIT_SCALE:-1}
case $scale in '' | *[!0-9]* | 0) echo "LIMIT_SCALE must be a positive integer, got '$scale'" >&2; exit 2 ;; esac
[ -n "$quick" ] && quick_args=(--quick)

load=$(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo unknown)
echo "cpu_checks: $(date '+%F %T'), load average $load, $(getconf _NPROCESSORS_ONLN) CPUs, $py, into $out${quick:+ (quick: not evidence)}"
case $load in 0.[0-4]*) ;; *) echo "cpu_checks: WARNING: the machine is not idle (load $load): its timings are no evidence" ;; esac

failed=0
summary=()
step() {  # NAME EXPECTED_S LIMIT_S [VAR=VALUE ...] -- SCRIPT [ARGS ...]
  local name=$1 expected=$2 limit=$(($3 * scale))
  shift 3
  local vars=()
  while [ "$1" != -- ]; do vars+=("$1"); shift; done
  shift
  rm -f "$out/$name.json"
  echo "[$(date +%T)] $name: running (expected ${expected} s, limit ${limit} s)"
  local t0=$SECONDS
  env ${vars[@]+"${vars[@]}"} timeout "$limit" "$py" "$@" ${quick_args[@]+"${quick_args[@]}"} \
    --json "$out/$name.json" >"$out/$name.log" 2>&1
  local rc=$? took=$((SECONDS - t0)) state
  if [ $rc -eq 0 ] && [ -s "$out/$name.json" ]; then
    state="ok"
  elif [ $rc -eq 124 ]; then
    state="TIMED OUT after ${limit} s (see $out/$name.log)"
  else
    state="FAILED, exit $rc (see $out/$name.log: $(tail -n 1 "$out/$name.log" | cut -c1-160))"
  fi
  [ "$state" = ok ] || failed=1
  echo "[$(date +%T)] $name: $state, ${took} s"
  summary+=("$(printf '%-15s %5s s  %s' "$name" "$took" "$state")")
}

step pipeline-graph 190 400 -- benchmarks/bench_pipeline_graph.py --rounds 5
step serving-avx512 45 150 -- benchmarks/bench_inference.py --serving-only --models qilcm
step serving-avx2 45 150 ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 -- \
  benchmarks/bench_inference.py --serving-only --models qilcm
step serve 80 200 -- benchmarks/bench_serve.py --seconds 5
step startup 140 240 -- benchmarks/bench_startup.py --repeats 20
step batch-predict 60 240 -- benchmarks/bench_batch_predict.py --queries 400 --items 50 --shards 8 --repeats 3
step clicks-step 60 240 -- benchmarks/bench_clicks.py --threads 1

echo
echo "cpu_checks: done in ${SECONDS} s"
printf '%s\n' "${summary[@]}"
if [ -z "$quick" ]; then
  echo "next: $py benchmarks/cpu_evidence.py --store $out    (copies the runs into evidence/bench/, rewrites the docs)"
fi
exit $failed
