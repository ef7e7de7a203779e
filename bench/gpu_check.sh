#!/usr/bin/env bash
# GPU burn-in check for a lent accelerator machine (H100/H200), about 4-5 minutes in all.
#
#   1. bench/burn_reference.py: plain torch.matmul bf16 at 8192, best window per GPU
#   2. gpuready certify --burn 60s --burn-backend cublas --burn-dtype bf16 --json
#   3. the same with --burn-backend torch
#   4. per GPU and backend: burn TFLOPS, ratio to the torch reference (target >= 0.95) and
#      to the datasheet dense bf16 peak (H100/H200 SXM 989 TFLOPS; target >= 0.75),
#      correctness counters, and NVML sampler facts (peak power, temperatures, clocks).
#
# Everything lands under ${OUT:-/tmp/gpuready-bench}: reference.json, certify-<backend>.json,
# their stderr and exit codes, and summary.txt (also printed).
#
# Knobs (environment): BURN (60s), REF_SECONDS (10 per GPU), PEAK_BF16 (989), PYTHON
# (python3), GPUREADY (the command, split on spaces; default: gpuready if it is on PATH, else
# "$PYTHON -c 'import sys; from validator.cli.main import main; sys.exit(main())'" from the
# repository root, for a machine where the package is not installed).
set -euo pipefail

OUT_DIR="${OUT:-/tmp/gpuready-bench}"
BURN="${BURN:-60s}"
REF_SECONDS="${REF_SECONDS:-10}"
PEAK_BF16="${PEAK_BF16:-989}"
PY="${PYTHON:-python3}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [[ -n "${GPUREADY:-}" ]]; then
    read -r -a GPUREADY_CMD <<<"$GPUREADY"
elif command -v gpuready >/dev/null; then
    GPUREADY_CMD=(gpuready)
else
    export PYTHONPATH="$HERE/..${PYTHONPATH:+:$PYTHONPATH}"
    GPUREADY_CMD=("$PY" -c "import sys; from validator.cli.main import main; sys.exit(main())")
fi
mkdir -p "$OUT_DIR"

step() { echo "== $(date +%H:%M:%S) $*" >&2; }

step "devices"
timeout 30 nvidia-smi -L >"$OUT_DIR/nvidia-smi-L.txt" 2>&1 || true
cat "$OUT_DIR/nvidia-smi-L.txt" >&2

step "torch reference (${REF_SECONDS}s per GPU)"
ref_rc=0
timeout 170 "$PY" "$HERE/burn_reference.py" --seconds "$REF_SECONDS" \
    >"$OUT_DIR/reference.json" 2>"$OUT_DIR/reference.stderr" || ref_rc=$?
echo "$ref_rc" >"$OUT_DIR/reference.rc"

for backend in cublas torch; do
    step "gpuready certify --burn $BURN --burn-backend $backend"
    rc=0
    # certify exits 1 when the node is not certified: the JSON is still the report.
    timeout 200 "${GPUREADY_CMD[@]}" certify --burn "$BURN" --burn-backend "$backend" \
        --burn-dtype bf16 --json \
        >"$OUT_DIR/certify-$backend.json" 2>"$OUT_DIR/certify-$backend.stderr" || rc=$?
    echo "$rc" >"$OUT_DIR/certify-$backend.rc"
    tail -n 5 "$OUT_DIR/certify-$backend.stderr" >&2 || true
done

step "summary"
"$PY" - "$OUT_DIR" "$PEAK_BF16" <<'PYEOF' | tee "$OUT_DIR/summary.txt"
import json
import pathlib
import sys

out = pathlib.Path(sys.argv[1])
peak = float(sys.argv[2])


def load(name):
    path = out / name
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return {"error": f"{name}: {exc}"}


def number(value):
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def fmt(value, spec=".1f"):
    return format(value, spec) if value is not None else "n/a"


reference = load("reference.json")
ref = {g["index"]: number(g.get("tflops")) for g in reference.get("gpus", [])}
print(f"torch reference: {reference.get('error') or ''}")
for index, tflops in sorted(ref.items()):
    print(f"  gpu{index}: {fmt(tflops)} TFLOPS  ({fmt(tflops / peak if tflops is not None else None, '.2f')} of {peak:.0f} peak)")

for backend in ("cublas", "torch"):
    report = load(f"certify-{backend}.json")
    rc = (out / f"certify-{backend}.rc").read_text().strip() if (out / f"certify-{backend}.rc").exists() else "?"
    print(f"\n{backend} burn (certify exit {rc})")
    if "error" in report and "nodes" not in report:
        print(f"  no report: {report['error']}")
        continue
    try:
        burn = report["nodes"][0]["facts"]["burn"]
    except (KeyError, IndexError, TypeError) as exc:
        print(f"  no burn in the report: {exc!r}")
        continue
    if not burn:
        print("  burn is empty")
        continue
    if burn.get("error"):
        print(f"  burn error: {burn['error']}")
    print(
        f"  backend={burn.get('backend')} dtype={burn.get('dtype')} n={burn.get('matrix_size')} "
        f"elapsed={burn.get('elapsed_s')}s sampler={burn.get('sampler')}"
    )
    for gpu in burn.get("gpus", []):
        index = gpu.get("index")
        tflops = number(gpu.get("tflops"))
        r = ref.get(index)
        vs_ref = tflops / r if tflops is not None and r else None
        vs_peak = tflops / peak if tflops is not None else None
        verdict_ref = "ok" if vs_ref is not None and vs_ref >= 0.95 else "BELOW 0.95"
        verdict_peak = "ok" if vs_peak is not None and vs_peak >= 0.75 else "BELOW 0.75"
        print(
            f"  gpu{index}: status={gpu.get('status')} {fmt(tflops)} TFLOPS  "
            f"vs torch ref {fmt(vs_ref, '.3f')} [{verdict_ref}]  vs peak {fmt(vs_peak, '.3f')} [{verdict_peak}]"
        )
        if gpu.get("detail"):
            print(f"    detail: {gpu['detail']}")
        print(
            f"    iterations={gpu.get('iterations')} mismatched={gpu.get('mismatched_elements')} "
            f"nonfinite={gpu.get('nonfinite_elements')} reference_ok={gpu.get('reference_ok')} "
            f"ref_err={gpu.get('reference_max_error')} digest={gpu.get('digest')}"
        )
        windows = [w for w in gpu.get("tflops_windows", []) if number(w) is not None]
        if windows:
            print(f"    windows: n={len(windows)} min={min(windows):.1f} max={max(windows):.1f}")
        samples = gpu.get("samples", [])

        def series(key):
            return [v for v in (number(s.get(key)) for s in samples) if v is not None]

        power = series("power_w")
        temp = series("temperature_gpu_c")
        mem_temp = series("temperature_memory_c")
        sm = series("sm_clock_mhz")
        reasons = sorted(
            {r for s in samples if isinstance(s.get("clock_event_reasons"), list) for r in s["clock_event_reasons"]}
        )
        print(
            f"    nvml: samples={len(samples)} peak_power={fmt(max(power) if power else None)} W "
            f"max_temp={fmt(max(temp) if temp else None, '.0f')} C "
            f"max_mem_temp={fmt(max(mem_temp) if mem_temp else None, '.0f')} C "
            f"sm_clock={fmt(min(sm) if sm else None, '.0f')}-{fmt(max(sm) if sm else None, '.0f')} MHz "
            f"reasons={','.join(reasons) or '-'}"
        )
PYEOF
