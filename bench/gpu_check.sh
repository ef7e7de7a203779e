#!/usr/bin/env bash
# GPU burn-in and interconnect check for a lent accelerator machine (one H200, or 8x
# H100/H200), one command, about 8 minutes at most (the machine allows 10). Nothing is
# downloaded or installed.
#
#   1. probes (each a few seconds): nvidia-smi -L, the GPU names
#      (nvidia-smi --query-gpu=name), bus ids / driver / power limit, whether gpuready
#      imports, whether pynvml imports, torch's version (or "not installed")
#   2. one GPU only: the single-GPU policy file (bench/gpu_check_summary.py write-policy;
#      why it is legitimate is written in the file)
#   2b. interconnect: python3 -m validator.node.bandwidth.live (the agent's own
#      measurement, stdlib + libcudart + libnccl through ctypes, the repository on
#      PYTHONPATH): per GPU H2D and D2H with pinned memory and a copy within HBM; with two
#      or more GPUs also the peer matrix and NCCL all-reduce (they need several GPUs: one
#      GPU has no peer). Capped at INTERCONNECT_S, its own deadline 10 s inside that.
#   3. bench/burn_reference.py: plain torch.matmul bf16 n=8192 on every GPU at once, the
#      burn's warm-up (a tenth of the burn, at most 10 s) then the rest of the burn's
#      duration in 1 s windows; per GPU median / p10 / p90 / best       (skipped: no torch)
#   4. gpuready certify --burn 60s --burn-backend cublas --burn-dtype bf16 --json
#   5. the same with --burn-backend torch                                (skipped: no torch)
#   6. bench/gpu_check_summary.py summarize: every figure against its target
#   7. the interconnect report: each GPU's H2D, D2H and HBM figure against the datasheet
#      (H200: HBM 4800 GB/s, H100 SXM: 3350 GB/s; PCIe Gen5 x16: 32 GT/s x 16 lanes x
#      128/130 / 8 = 63.02 GB/s per direction, raw), the ratios printed, the peer matrix
#      and all-reduce summarised where there are several GPUs; into interconnect.json and
#      gpu_check.json ("interconnect"), appended to summary.txt
#
# Every step runs under `timeout`, cut to what is left of an overall deadline (DEADLINE_S,
# 450 s from the start) minus what the later steps need (BURN_S + 5 s for the reference,
# BURN_S + 40 s per certify still to come, 15 s for the summary); the summary has 20 s of
# its own and the interconnect report 10 s, so the script ends in about 8 minutes whatever
# hangs: worst case, every step at its limit, ~480 s. Caps: probes 15-40 s each (130 s
# together), interconnect INTERCONNECT_S (60 s), reference BURN_S + 45 s, each certify
# BURN_S + 90 s. Expected on one H200: ~10 s probes + ~15 s interconnect + ~75 s reference
# + 2 x ~80 s certify = ~4.5 min.
#
# Everything lands under ${OUT:-/tmp/gpuready-bench}: for each step <step>.stdout,
# <step>.stderr, <step>.rc and <step>.cmd; steps.tsv (status, rc, start/end, timeout of
# each step); settings.tsv; single-gpu-policy.yaml (one GPU only); gpu_check.json (every
# figure, the targets, pass/fail per target, what could not be measured); summary.txt
# (also printed). certify's JSON report is certify-<backend>.stdout; the interconnect's
# figures (validator.model.Interconnect as JSON) are interconnect.stdout, judged in
# interconnect.json.
#
# Exit: 0 every target met, 1 a target missed, 2 something could not be measured (see
# bench/gpu_check_summary.py for the targets; an interconnect figure that could not be
# measured is also 2; its ratios to the datasheet are reported, without a target).
#
#   bash bench/gpu_check.sh --interconnect-report DIR   runs step 7 alone on DIR.
#
# Knobs (environment): BURN_S (60: burn seconds), PEAK_BF16 (989: the peak used for a
# model without a target), DEADLINE_S (450), INTERCONNECT_S (60), PYTHON (python3),
# GPUREADY (the command, split on spaces; default: gpuready if it is on PATH, else
# "$PYTHON -c 'import sys; from validator.cli.main import main; sys.exit(main())'" with
# PYTHONPATH at the repository root, for a machine where the package is not installed).
set -uo pipefail # not -e: every step records its exit code; the summary decides.

OUT_DIR="${OUT:-/tmp/gpuready-bench}"
BURN_S="${BURN_S:-60}"
PEAK_BF16="${PEAK_BF16:-989}"
DEADLINE_S="${DEADLINE_S:-450}"
INTERCONNECT_S="${INTERCONNECT_S:-60}"
PY="${PYTHON:-python3}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"
STARTED="$(date +%s)"
END=$((STARTED + DEADLINE_S))

if ! [[ "$BURN_S" =~ ^[0-9]+$ ]] || ((BURN_S < 10)); then
    echo "BURN_S must be a whole number of seconds, at least 10 (got '$BURN_S')" >&2
    exit 2
fi
# The burn's own warm-up (validator/node/burnin/burn_config.py): a tenth, at most 10 s.
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

# ------------------------------------------------------------------ the interconnect report
# interconnect_report DIR: step 7. Reads DIR/interconnect.stdout (the Interconnect as JSON),
# DIR/steps.tsv and DIR/nvidia-smi-name.stdout; writes DIR/interconnect.json, adds it to
# DIR/gpu_check.json (its exit code becomes 2 when an interconnect figure is missing),
# appends its lines to DIR/summary.txt and prints them. Exit 0 measured, 2 not.
interconnect_report() {
    "$PY" - "$1" <<'PYTHON'
import json, os, re, statistics, sys
from pathlib import Path

out = Path(sys.argv[1])
# PCIe Gen5 x16, one direction, before protocol overhead: 32 GT/s x 16 lanes x 128/130 / 8.
PCIE_GEN5_X16_GB_S = round(32 * 16 * 128 / 130 / 8, 2)
DATASHEETS = (  # HBM bandwidth (GB/s), validator/judge/skus.yaml's memory_bandwidth_gbs
    (re.compile(r"\bH200\b"), "H200", 4800.0),
    (re.compile(r"\bH100\b.*(HBM3|SXM)"), "H100 SXM", 3350.0),
)


def read(name):
    try:
        return (out / name).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def figure(value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def why(value):
    if isinstance(value, dict) and "unavailable" in value:
        return value["unavailable"] + (f": {value['detail']}" if value.get("detail") else "")
    return "absent" if value is None else f"not a figure: {value!r}"


step = {"status": "absent", "rc": None}
for line in read("steps.tsv").splitlines():
    parts = line.split("\t")
    if len(parts) >= 3 and parts[0] == "interconnect":
        step = {"status": parts[1], "rc": int(parts[2]) if parts[2].isdigit() else None}
names = [line.strip() for line in read("nvidia-smi-name.stdout").splitlines() if line.strip()]
model = None
for pattern, label, hbm in DATASHEETS:
    if names and model is None and pattern.search(names[0].upper()):
        model = (label, hbm)
try:
    facts = json.loads(read("interconnect.stdout"))
except ValueError:
    facts = None
missing, lines, report = [], [], {"step": step, "gpu_names": names}
if model:
    report["datasheet"] = {"model": model[0], "hbm_gb_s": model[1],
                           "pcie": "Gen5 x16", "pcie_gb_s": PCIE_GEN5_X16_GB_S}
    sheet = (f"datasheet {model[0]}: HBM {model[1]:g} GB/s, PCIe Gen5 x16 "
             f"{PCIE_GEN5_X16_GB_S} GB/s per direction raw")
else:
    sheet = f"no datasheet figures here for {names[0] if names else 'an unnamed GPU'}: ratios not computed"
if not isinstance(facts, dict):
    missing.append(f"interconnect: no figures (step {step['status']}, rc {step['rc']}): "
                   + (read("interconnect.stderr").strip().splitlines() or ["no output"])[-1])
    gpus = []
else:
    report.update({k: facts.get(k) for k in ("source", "error", "idle_wait_s", "busy_gpus")})
    if facts.get("error"):
        missing.append(f"interconnect: {facts['error']}")
    gpus = facts.get("gpus") if isinstance(facts.get("gpus"), list) else []
count = len(gpus) or len(names)
lines.append(f"interconnect ({count} GPU{'s' if count != 1 else ''}; {sheet})")
rows = []
for gpu in gpus:
    row = {"index": gpu.get("index"), "numa_node": gpu.get("numa_node")}
    for key, label, reference in (("h2d", "H2D", "pcie"), ("d2h", "D2H", "pcie"), ("hbm", "HBM", "hbm")):
        value = figure((gpu.get(key) or {}).get("gb_s"))
        row[f"{key}_gb_s"] = value
        if value is None:
            detail = why((gpu.get(key) or {}).get("gb_s"))
            missing.append(f"interconnect gpu{row['index']} {key}: {detail}")
            lines.append(f"  gpu{row['index']} {label}: NOT MEASURED: {detail}")
            continue
        against = None
        if model:
            against = PCIE_GEN5_X16_GB_S if reference == "pcie" else model[1]
        ratio = round(value / against, 3) if against else None
        row[f"{key}_ratio"] = ratio
        where = (f"{ratio:.3f} of PCIe Gen5 x16 ({PCIE_GEN5_X16_GB_S} GB/s)" if reference == "pcie"
                 else f"{ratio:.3f} of the datasheet's {against:g} GB/s") if ratio is not None else "no datasheet figure"
        lines.append(f"  gpu{row['index']} {label} {value:9.2f} GB/s  {where}")
    numa = row["numa_node"]
    lines.append(f"  gpu{row['index']} pinned host memory on NUMA node "
                 + (str(numa) if isinstance(numa, int) else f"? ({why(numa)})"))
    rows.append(row)
report["gpus"] = rows
if isinstance(facts, dict) and facts.get("busy_gpus"):
    lines.append(f"  still busy after the idle gate: GPU {facts['busy_gpus']} (figures may be low)")
several = ["peer matrix", "NCCL all-reduce"]
if count <= 1:
    report["needs_several_gpus"] = several
    for part in several:
        lines.append(f"  {part}: needs two or more GPUs (this machine has {count})")
elif isinstance(facts, dict):
    peers = facts.get("peers")
    if isinstance(peers, list):
        report["peers"] = {}
        for key in ("unidirectional", "bidirectional"):
            values = [figure(p[key]["gb_s"]) for p in peers]
            bad = [f"{p['src']}->{p['dst']}: {why(p[key]['gb_s'])}" for p, v in zip(peers, values) if v is None]
            good = [v for v in values if v is not None]
            missing.extend(f"interconnect peer {b} ({key})" for b in bad)
            if good:
                report["peers"][key] = {"pairs": len(good), "min_gb_s": min(good),
                                        "median_gb_s": statistics.median(good), "max_gb_s": max(good)}
                lines.append(f"  peers {key}: {len(good)} pairs, min {min(good):.2f} / median "
                             f"{statistics.median(good):.2f} / max {max(good):.2f} GB/s")
    else:
        missing.append(f"interconnect peers: {why(peers)}")
    reduce = facts.get("all_reduce")
    points = reduce.get("points") if isinstance(reduce, dict) else None
    if isinstance(points, list) and points:
        last = points[-1]
        report["all_reduce"] = {"ranks": reduce.get("ranks"), "nccl_version": reduce.get("nccl_version"),
                                "largest_size_bytes": last["size_bytes"], "busbw_gb_s": last["busbw_gb_s"],
                                "busbw_in_place_gb_s": last.get("busbw_in_place_gb_s"),
                                "wrong": points[0].get("wrong")}
        lines.append(f"  all-reduce: {reduce.get('ranks')} ranks, busbw {last['busbw_gb_s']:.2f} GB/s "
                     f"at {last['size_bytes']} B, wrong {points[0].get('wrong')}")
    else:
        missing.append(f"interconnect all-reduce: {why(points if isinstance(reduce, dict) else reduce)}")
report["missing"] = missing
report["exit_code"] = 2 if missing else 0
lines.append("interconnect: " + (f"NOT MEASURED (exit 2): {len(missing)} figure(s)" if missing else "measured"))
for line in missing:
    lines.append(f"  NOT MEASURED: {line}")
text = "\n".join(lines) + "\n"
(out / "interconnect.json").write_text(json.dumps(report, indent=1) + "\n")
document_path = out / "gpu_check.json"
try:
    document = json.loads(document_path.read_text())
except (OSError, ValueError):
    document = None
if isinstance(document, dict):
    document["interconnect"] = report
    if missing and document.get("exit_code") in (0, 1):
        document["exit_code"], document["outcome"] = 2, "NOT MEASURED"
    document.setdefault("missing", []).extend(missing)
    temporary = document_path.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(document, indent=1) + "\n")
    os.replace(temporary, document_path)
with open(out / "summary.txt", "a", encoding="utf-8") as summary:
    summary.write(text)
sys.stdout.write(text)
sys.exit(report["exit_code"])
PYTHON
}

if [[ "${1:-}" == --interconnect-report ]]; then
    if [[ -z "${2:-}" ]]; then
        echo "usage: bash bench/gpu_check.sh --interconnect-report DIR" >&2
        exit 2
    fi
    interconnect_report "$2"
    exit $?
fi

mkdir -p "$OUT_DIR" || exit 2
# A re-run into the same folder must not read the last run's figures.
rm -f "$OUT_DIR"/*.stdout "$OUT_DIR"/*.stderr "$OUT_DIR"/*.rc "$OUT_DIR"/*.cmd \
    "$OUT_DIR/steps.tsv" "$OUT_DIR/settings.tsv" "$OUT_DIR/single-gpu-policy.yaml" \
    "$OUT_DIR/gpu_check.json" "$OUT_DIR/summary.txt" "$OUT_DIR/history.db" \
    "$OUT_DIR/interconnect.json"
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
    printf 'interconnect_s\t%s\n' "$INTERCONNECT_S"
} >"$OUT_DIR/settings.tsv"

# ------------------------------------------------------------------ 2b. interconnect
# Before the burns (the GPUs are idle; the measurement's idle gate waits otherwise), with
# the later steps' floors kept back: the torch reference's burn and each certify's.
CERTIFY_RUNS=$((HAVE_GPUREADY * (1 + HAVE_TORCH)))
IC_LIMIT="$(budget "$INTERCONNECT_S" $((HAVE_TORCH * (BURN_S + 5) + CERTIFY_RUNS * CERTIFY_FLOOR + 15)))"
IC_SECONDS=$((IC_LIMIT > 20 ? IC_LIMIT - 10 : IC_LIMIT / 2)) # it ends itself before `timeout`
SEVERAL="$GPU_COUNT GPU(s): per-GPU copies only; the peer matrix and NCCL all-reduce need two or more GPUs"
((GPU_COUNT > 1)) && SEVERAL="$GPU_COUNT GPUs: per-GPU copies, the peer matrix and NCCL all-reduce"
run_step interconnect "$IC_LIMIT" "$SEVERAL" -- \
    env PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" \
    "$PY" -m validator.node.bandwidth.live --seconds "$IC_SECONDS"
say "interconnect: $SEVERAL"

# ------------------------------------------------------------------ 3. torch reference
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

# ------------------------------------------------------------------ 7. interconnect report
say "interconnect report"
ic_rc=0
timeout -k 5 10 bash "$HERE/gpu_check.sh" --interconnect-report "$OUT_DIR" || ic_rc=$?
# 0 / 1 / 2 from the summary; anything else (a crash, a timeout) is "not measured", and
# so is an interconnect figure that is missing (it wins over a missed target).
if ((ic_rc != 0)) && [[ "$rc" == 0 || "$rc" == 1 ]]; then
    rc=2
fi
case "$rc" in
0 | 1 | 2) exit "$rc" ;;
*) exit 2 ;;
esac
