#!/usr/bin/env bash
# GPU burn-in check for a lent accelerator machine (one H200, or 8x H100/H200), one command,
# under 8 minutes in all (the machine allows 10). Nothing is downloaded or installed.
#
#   1. probes (each a few seconds): nvidia-smi -L, the GPU names
#      (nvidia-smi --query-gpu=name), bus ids / driver / power limit, whether gpuready
#      imports, whether pynvml imports, torch's version (or "not installed")
#   2. one GPU only: the single-GPU policy file (bench/gpu_check_summary.py write-policy;
#      why it is legitimate is written in the file)
#   3. bench/burn_reference.py: plain torch.matmul bf16 n=8192 on every GPU at once, the
#      burn's warm-up (a tenth of the burn, at most 10 s) then the rest of the burn's
#      duration in 1 s windows; per GPU median / p10 / p90 / best       (skipped: no torch)
#   4. gpuready certify --burn 60s --burn-backend cublas --burn-dtype bf16 --json
#   5. the same with --burn-backend torch                                (skipped: no torch)
#   6. bench/gpu_check_summary.py summarize: every figure against its target
#
# Every step runs under `timeout`, cut to what is left of an overall deadline (DEADLINE_S,
# 450 s from the start) minus what the later steps need (BURN_S + 40 s per certify still
# to come, 15 s for the summary), and the summary has 20 s of its own, so the script ends
# in under 8 minutes whatever hangs: worst case, every step at its limit, ~470 s. Caps:
# probes 15-40 s each (130 s together), reference BURN_S + 45 s, each certify BURN_S + 90 s.
# Expected on one H200: ~10 s probes + ~75 s reference + 2 x ~80 s certify = ~4 min.
#
# Everything lands under ${OUT:-/tmp/gpuready-bench}: for each step <step>.stdout,
# <step>.stderr, <step>.rc and <step>.cmd; steps.tsv (status, rc, start/end, timeout of
# each step); settings.tsv; single-gpu-policy.yaml (one GPU only); gpu_check.json (every
# figure, the targets, pass/fail per target, what could not be measured); summary.txt
# (also printed). certify's JSON report is certify-<backend>.stdout.
#
# Exit: 0 every target met, 1 a target missed, 2 something could not be measured (see
# bench/gpu_check_summary.py for the targets).
#
# Knobs (environment): BURN_S (60: burn seconds), PEAK_BF16 (989: the peak used for a
# model without a target), DEADLINE_S (450), PYTHON (python3), GPUREADY (the command,
# split on spaces; default: gpuready if it is on PATH, else "$PYTHON -c 'import sys; from
# validator.cli.main import main; sys.exit(main())'" with PYTHONPATH at the repository
# root, for a machine where the package is not installed).
set -uo pipefail # not -e: every step records its exit code; the summary decides.

OUT_DIR="${OUT:-/tmp/gpuready-bench}"
BURN_S="${BURN_S:-60}"
PEAK_BF16="${PEAK_BF16:-989}"
DEADLINE_S="${DEADLINE_S:-450}"
PY="${PYTHON:-python3}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"
STARTED="$(date +%s)"
END=$((STARTED + DEADLINE_S))

if ! [[ "$BURN_S" =~ ^[0-9]+$ ]] || ((BURN_S < 10)); then
    echo "BURN_S must be a whole number of seconds, at least 10 (got '$BURN_S')" >&2
    exit 2
fi
# The burn's own warm-up (validator/node/burnin/config.py): a tenth, at most 10 s.
REF_WARMUP=$((BURN_S / 10 < 10 ? BURN_S / 10 : 10))
REF_SECONDS=$((BURN_S - REF_WARMUP))
# What one certify needs beyond its burn: fact collection, set-up, checks (a guess that
# the deadline arithmetic below leaves room above).
CERTIFY_FLOOR=$((BURN_S + 40))

GPUREADY_KIND="on PATH"
if [[ -n "${GPUREADY:-}" ]]; then
    read -r -a GPUREADY_CMD <<<"$GPUREADY"
    GPUREADY_KIND="GPUREADY"
elif command -v gpuready >/dev/null; then
    GPUREADY_CMD=(gpuready)
else
    export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
    GPUREADY_CMD=("$PY" -c "import sys; from validator.cli.main import main; sys.exit(main())")
    GPUREADY_KIND="repository"
fi

mkdir -p "$OUT_DIR" || exit 2
# A re-run into the same folder must not read the last run's figures.
rm -f "$OUT_DIR"/*.stdout "$OUT_DIR"/*.stderr "$OUT_DIR"/*.rc "$OUT_DIR"/*.cmd \
    "$OUT_DIR/steps.tsv" "$OUT_DIR/settings.tsv" "$OUT_DIR/single-gpu-policy.yaml" \
    "$OUT_DIR/gpu_check.json" "$OUT_DIR/summary.txt" "$OUT_DIR/history.db"
printf 'name\tstatus\trc\tstart\tend\ttimeout_s\tnote\n' >"$OUT_DIR/steps.tsv"

say() { echo "== $(date +%H:%M:%S) $*" >&2; }

# budget CAP RESERVE: seconds a step may take: CAP, or less so that RESERVE seconds stay
# for the steps after it before the deadline.
budget() {
    local left=$((END - $(date +%s) - $2))
    echo $((left < $1 ? left : $1))
}

# run_step NAME LIMIT NOTE -- COMMAND...: run COMMAND under `timeout LIMIT`, keep its
# stdout, stderr and exit code, and append a line to steps.tsv.
run_step() {
    local name="$1" limit="$2" note="$3" rc=0 start end
    shift 4
    printf '%q ' "$@" >"$OUT_DIR/$name.cmd"
    echo >>"$OUT_DIR/$name.cmd"
    if ((limit < 5)); then
        skip_step "$name" "no time left before the deadline"
        return 0
    fi
    say "$name (limit ${limit}s)"
    start="$(date +%s.%N)"
    timeout -k 5 "$limit" "$@" >"$OUT_DIR/$name.stdout" 2>"$OUT_DIR/$name.stderr" || rc=$?
    end="$(date +%s.%N)"
    echo "$rc" >"$OUT_DIR/$name.rc"
    printf '%s\tran\t%s\t%s\t%s\t%s\t%s\n' "$name" "$rc" "$start" "$end" "$limit" "$note" \
        >>"$OUT_DIR/steps.tsv"
    if ((rc == 124 || rc == 137)); then
        say "$name: timed out after ${limit}s"
    fi
    return 0
}

skip_step() {
    say "$1: skipped: $2"
    echo "skipped" >"$OUT_DIR/$1.rc"
    printf '%s\tskipped\t\t\t\t\t%s\n' "$1" "$2" >>"$OUT_DIR/steps.tsv"
}

step_rc() { cat "$OUT_DIR/$1.rc" 2>/dev/null || echo missing; }

# ------------------------------------------------------------------ 1. probes (<= 130 s)
run_step nvidia-smi-L 15 "" -- nvidia-smi -L
run_step nvidia-smi-name 15 "" -- nvidia-smi --query-gpu=name --format=csv,noheader
run_step nvidia-smi-info 15 "index, pci.bus_id, driver_version, power.limit, clocks.max.sm" -- \
    nvidia-smi --query-gpu=index,pci.bus_id,driver_version,power.limit,clocks.max.sm \
    --format=csv,noheader
# No package can be installed here (nothing outside is reachable): a gpuready that does
# not import is reported, and the certify steps are skipped (exit 2).
if [[ "$GPUREADY_KIND" == "repository" ]]; then
    run_step import-validator 30 "python3 -c 'import validator.cli.main' (repository)" -- \
        "$PY" -c "import validator.cli.main"
else
    run_step import-validator 30 "${GPUREADY_CMD[*]} --help ($GPUREADY_KIND)" -- \
        "${GPUREADY_CMD[@]}" --help
fi
run_step import-pynvml 15 "" -- "$PY" -c "import pynvml; print(getattr(pynvml, '__file__', ''))"
run_step torch-info 40 "" -- "$PY" -c "
import json, torch
print(json.dumps({'version': torch.__version__, 'cuda': torch.version.cuda,
                  'cuda_available': torch.cuda.is_available(),
                  'device_count': torch.cuda.device_count()}))"
cat "$OUT_DIR/nvidia-smi-L.stdout" >&2

HAVE_TORCH=0
[[ "$(step_rc torch-info)" == 0 ]] && HAVE_TORCH=1
HAVE_GPUREADY=0
[[ "$(step_rc import-validator)" == 0 ]] && HAVE_GPUREADY=1
((HAVE_TORCH)) || say "torch not installed: no torch reference, no torch burn ($(tail -n 1 "$OUT_DIR/torch-info.stderr"))"
((HAVE_GPUREADY)) || say "gpuready does not import: $(tail -n 1 "$OUT_DIR/import-validator.stderr")"

# ------------------------------------------------------------------ 2. single-GPU policy
GPU_COUNT="$(grep -c '^GPU [0-9]*:' "$OUT_DIR/nvidia-smi-L.stdout" 2>/dev/null)" || GPU_COUNT=0
POLICY_ARGS=()
POLICY=""
if [[ "$GPU_COUNT" == 1 ]]; then
    POLICY="$OUT_DIR/single-gpu-policy.yaml"
    run_step policy 10 "$POLICY" -- "$PY" "$HERE/gpu_check_summary.py" write-policy "$POLICY"
    if [[ "$(step_rc policy)" == 0 ]]; then
        POLICY_ARGS=(--policy "$POLICY")
    else
        POLICY=""
    fi
fi

{
    printf 'started_epoch\t%s\n' "$STARTED"
    printf 'deadline_s\t%s\n' "$DEADLINE_S"
    printf 'burn_s\t%s\n' "$BURN_S"
    printf 'reference_warmup_s\t%s\n' "$REF_WARMUP"
    printf 'reference_seconds\t%s\n' "$REF_SECONDS"
    printf 'peak_bf16\t%s\n' "$PEAK_BF16"
    printf 'python\t%s\n' "$PY"
    printf 'gpuready\t%s (%s)\n' "${GPUREADY_CMD[*]}" "$GPUREADY_KIND"
    printf 'gpu_count\t%s\n' "$GPU_COUNT"
    printf 'policy\t%s\n' "$POLICY"
} >"$OUT_DIR/settings.tsv"

# ------------------------------------------------------------------ 3. torch reference
CERTIFY_RUNS=$((HAVE_GPUREADY * (1 + HAVE_TORCH)))
if ((HAVE_TORCH)); then
    run_step reference "$(budget $((BURN_S + 45)) $((CERTIFY_RUNS * CERTIFY_FLOOR + 15)))" \
        "torch.matmul bf16 n=8192, ${REF_WARMUP}s warm-up, ${REF_SECONDS}s of 1s windows" -- \
        "$PY" "$HERE/burn_reference.py" --seconds "$REF_SECONDS" --warmup "$REF_WARMUP" \
        --size 8192 --dtype bf16 --device all
else
    skip_step reference "torch not installed"
fi

# ------------------------------------------------------------------ 4-5. certify
for backend in cublas torch; do
    name="certify-$backend"
    if ((!HAVE_GPUREADY)); then
        skip_step "$name" "gpuready does not import here (see import-validator.stderr)"
        continue
    fi
    if [[ "$backend" == torch ]] && ((!HAVE_TORCH)); then
        skip_step "$name" "torch not installed"
        continue
    fi
    later=0 # certify runs still to come after this one
    [[ "$backend" == cublas ]] && later=$HAVE_TORCH
    # certify exits 1 when the node is not certified: its JSON is still the report.
    run_step "$name" "$(budget $((BURN_S + 90)) $((later * CERTIFY_FLOOR + 15)))" "" -- \
        "${GPUREADY_CMD[@]}" certify --burn "${BURN_S}s" --burn-backend "$backend" \
        --burn-dtype bf16 --json --db "$OUT_DIR/history.db" ${POLICY_ARGS[@]+"${POLICY_ARGS[@]}"}
    tail -n 3 "$OUT_DIR/$name.stderr" >&2 2>/dev/null || true
done

# ------------------------------------------------------------------ 6. summary
say "summary"
rc=0
timeout -k 5 20 "$PY" "$HERE/gpu_check_summary.py" summarize "$OUT_DIR" || rc=$?
if [[ ! -s "$OUT_DIR/gpu_check.json" ]]; then
    echo "the summary wrote no gpu_check.json (exit $rc)" | tee "$OUT_DIR/summary.txt" >&2
    exit 2
fi
# 0 / 1 / 2 from the summary; anything else (a crash, a timeout) is "not measured".
case "$rc" in
0 | 1 | 2) exit "$rc" ;;
*) exit 2 ;;
esac
