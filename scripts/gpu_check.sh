#!/usr/bin/env bash
# The GPU check: one command on a lent GPU machine (python3 + torch 2.11, CMake, ninja, nvcc, g++; no network)
# that builds Baton from this checkout and gpu_kit/ (scripts/gpu_pack.sh) against the machine's own torch, then
# measures, and writes OUTDIR/gpu_report.json and OUTDIR/gpu_report.md (+ build.log, ctest.log, bench.log,
# transfer.log, traces.tar: at most 8 files of 16 MiB come back from the device tool). Parts: setup, build, env
# (nvidia-smi, --version), ctest -L cuda, transfer (bench_transfer --device), bench (bench/bench_gpu.py: step time
# and memory at real sizes, Baton in one process, its loss and gradients against diffusers + peft's, through the
# coordinator with the optimizer there or on the stages, two replicas with the allreduce exchange, each beside
# diffusers + peft eager at the same adapter precision; baton plan; the FLUX.2-dev slice with block swap; regional
# torch.compile last), traces (Kineto traces of both sides summarised here by bench/trace_summary.py, the raw ones
# packed into traces.tar). Each part runs under its own timeout inside one overall deadline (8 minutes), and each
# bench row under its own timeout inside the bench's, so a failing part or row still leaves a report that names it.
# --device cpu --small is the CPU rehearsal (scripts/gpu_rehearse.sh).
#
#   scripts/gpu_check.sh OUTDIR [--device cuda|cpu] [--small] [--kit DIR] [--build DIR] [--deadline S]
#                        [--parts setup,build,env,ctest_cuda,transfer,bench,traces] [--bench_args "ARGS"]
# --parts runs only the parts named (a follow-up call on a fresh machine still needs setup and build);
# --bench_args goes to bench/bench_gpu.py (e.g. "--only klein,pytorch"; traces go to the work folder's traces/).
# Environment: GPU_CHECK_JOBS (build parallelism, default nproc), GPU_CHECK_BUILD_TIMEOUT (s, default 270),
# GPU_CHECK_BENCH_TIMEOUT (s for the whole bench, default 420), GPU_CHECK_PART_TIMEOUT (s per bench row, default
# 120), GPU_CHECK_COMPILE_TIMEOUT (s for the torch.compile row, default 180).
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
OUT=""
DEVICE=cuda
SMALL=0
KIT=$REPO/gpu_kit
BUILD=$REPO/build-gpu
DEADLINE_S=480  # 8 minutes, build included: a second call fits in the session's 15 minutes of device time
PARTS=setup,build,env,ctest_cuda,transfer,bench,traces
BENCH_ARGS=""
while [ $# -gt 0 ]; do
  case "$1" in
    --device) DEVICE=$2; shift 2 ;;
    --small) SMALL=1; shift ;;
    --kit) KIT=$(realpath "$2"); shift 2 ;;
    --build) BUILD=$(realpath -m "$2"); shift 2 ;;
    --deadline) DEADLINE_S=$2; shift 2 ;;
    --parts) PARTS=$2; shift 2 ;;
    --bench_args) BENCH_ARGS=$2; shift 2 ;;
    -*) echo "gpu_check: unknown flag $1" >&2; exit 2 ;;
    *) OUT=$1; shift ;;
  esac
done
[ -n "$OUT" ] || { echo "usage: scripts/gpu_check.sh OUTDIR [--device cuda|cpu] [--small]" >&2; exit 2; }
mkdir -p "$OUT"
OUT=$(realpath "$OUT")
rm -f "$OUT"/{gpu_report.json,gpu_report.md,build.log,ctest.log,transfer.log,bench.log,traces.tar}
START=$(date +%s)
JOBS=${GPU_CHECK_JOBS:-$(nproc)}
WORK=$(mktemp -d /tmp/baton-gpu-check.XXXXXX)
STATUS=$WORK/parts.tsv  # name, rc, seconds, timed_out
: >"$STATUS"
PY=python3
KITROOT=/tmp/baton-gpu-kit  # fixed, so that a second run reuses the build's CMake cache

left() { echo $((DEADLINE_S - ($(date +%s) - START))); }
# run_part NAME MAX_SECONDS LOG CMD...: runs CMD under min(MAX, time left − 20 s for the report), records its rc.
run_part() {
  local name=$1 max=$2 log=$3
  shift 3
  case ",$PARTS," in *",$name,"*) ;; *) return 0 ;; esac
  local budget
  budget=$(left)
  budget=$((budget - 20))
  [ "$budget" -lt "$max" ] && max=$budget
  if [ "$max" -le 5 ]; then
    printf '%s\t%s\t%s\t%s\n' "$name" skipped 0 1 >>"$STATUS"
    echo "gpu_check: $name skipped (no time left)" | tee -a "$log"
    return 1
  fi
  echo "gpu_check: $name (up to ${max} s)" | tee -a "$log"
  local t0 rc
  t0=$(date +%s)
  if [ "$(type -t "$1")" = function ]; then  # timeout runs programs: a function runs in a child bash
    timeout --kill-after=10 "$max" bash -c "$1" >>"$log" 2>&1
  else
    timeout --kill-after=10 "$max" "$@" >>"$log" 2>&1
  fi
  rc=$?
  local timed_out=0
  [ "$rc" = 124 ] || [ "$rc" = 137 ] && timed_out=1
  printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "$(($(date +%s) - t0))" "$timed_out" >>"$STATUS"
  echo "gpu_check: $name rc=$rc in $(($(date +%s) - t0)) s" | tee -a "$log"
  return "$rc"
}

# ---- setup: the kit's prefix and wheels --------------------------------------------------------------------------
setup() {
  set -e
  local root=$KITROOT
  rm -rf "$root"
  mkdir -p "$root"
  if command -v xz >/dev/null; then
    tar -xJf "$KIT/prefix.tar.xz" -C "$root"
  else
    $PY -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$KIT/prefix.tar.xz" "$root"
  fi
  # torch 2.11's include/ ships its own google/protobuf headers (older than the kit's protoc) and comes first among
  # the -isystem folders; a -I folder holding only google/ -> the kit's is searched before all of them.
  mkdir -p "$root/first"
  ln -s ../usr/include/google "$root/first/google"
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$WORK/site" \
    "$KIT"/wheels/*.whl
  $PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "devices", torch.cuda.device_count())'
}
export PYTHONPATH=$WORK/site${PYTHONPATH:+:$PYTHONPATH}
export PREFIX=$KITROOT/usr
export LIBDIR=$PREFIX/lib/x86_64-linux-gnu BIN=$BUILD/bin
export REPO KIT KITROOT BUILD WORK JOBS PY
export -f setup
run_part setup 120 "$OUT/build.log" setup

# ---- build: only what the check runs -----------------------------------------------------------------------------
build() {
  set -e
  local torch_prefix
  torch_prefix=$($PY -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')
  export PKG_CONFIG_PATH=$LIBDIR/pkgconfig:$PREFIX/share/pkgconfig
  # A CMake 4 refuses the old cmake_minimum_required of some packaged configs unless CMAKE_POLICY_VERSION_MINIMUM
  # is set (older CMake ignores it).
  # libtorch 2.11's libtorch.so exports its own std::filesystem (2.15's does not); libstdc++ first in DT_NEEDED
  # keeps the binaries on libstdc++'s copy (libtorch's remove_all jumps to a null pointer: the coordinator
  # crashed at exit removing its TLS folder, seen in the rehearsal).
  local STDCXX_FIRST="-Wl,--push-state,--no-as-needed -lstdc++ -Wl,--pop-state"
  # CMake's build RPATH names each linked library's folder; --disable-new-dtags makes it DT_RPATH, which also
  # serves the kit libraries' own dependencies (libgrpc++ -> libgrpc -> libre2 ...) without LD_LIBRARY_PATH.
  cmake -S "$REPO" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBATON_WERROR=OFF \
    -DCMAKE_PREFIX_PATH="$PREFIX;$torch_prefix" -DPKG_CONFIG_EXECUTABLE="$PREFIX/bin/pkgconf" \
    -DBATON_PYTHON="$(command -v $PY)" -DCMAKE_CXX_FLAGS="-I$KITROOT/first -isystem $PREFIX/include/x86_64-linux-gnu" \
    -DCMAKE_POLICY_VERSION_MINIMUM=3.5 \
    -DCMAKE_EXE_LINKER_FLAGS="-L$LIBDIR -Wl,-rpath-link,$LIBDIR -Wl,--disable-new-dtags -Wl,-rpath,$LIBDIR $STDCXX_FIRST"
  cmake --build "$BUILD" -j"$JOBS" --target baton baton-tools coordinator stage_worker bench_vs_pytorch bench_transfer \
    baton_cuda_tests
}
export -f build
run_part build "${GPU_CHECK_BUILD_TIMEOUT:-270}" "$OUT/build.log" build

# ---- env: the machine and each binary's --version ----------------------------------------------------------------
envinfo() {
  {
    echo "## uname"; uname -a
    echo "## cpu"; echo "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cores"
    echo "## nvidia-smi"
    if command -v nvidia-smi >/dev/null; then
      nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader || true
    else
      echo "(no nvidia-smi)"
    fi
    echo "## torch"
    $PY -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda, "devices", torch.cuda.device_count())'
    echo "## versions"
    for b in coordinator stage_worker; do echo "$b: $("$BIN/$b" --version 2>&1 | head -3 | tr '\n' ' ')"; done
  } >"$WORK/env.txt" 2>&1
  cat "$WORK/env.txt"
}
export -f envinfo
run_part env 60 "$OUT/build.log" envinfo

# ---- ctest -L cuda ---------------------------------------------------------------------------------------------
run_part ctest_cuda 180 "$OUT/ctest.log" ctest --test-dir "$BUILD" -L cuda --no-tests=error --output-on-failure --timeout 150 -j1

# ---- transfer: device -> pinned host -> gRPC -> pinned host -> device ------------------------------------------
DEV_NAME=$DEVICE
[ "$DEVICE" = cuda ] && DEV_NAME=cuda:0
if [ "$SMALL" = 1 ]; then MAX_MIB=16; else MAX_MIB=256; fi
run_part transfer 90 "$OUT/transfer.log" "$BIN/bench_transfer" --device="$DEV_NAME" --reps=3 --max_mib=$MAX_MIB

# ---- bench: step time and memory at real sizes, baton plan, the FLUX.2-dev slice, PyTorch ----------------------
SMALL_FLAG=""
[ "$SMALL" = 1 ] && SMALL_FLAG=--small
# The bench knows its own budget (what the deadline leaves, at most 420 s): a row with too little time left is
# skipped and named instead of the whole part timing out.
BENCH_MAX=${GPU_CHECK_BENCH_TIMEOUT:-420}
BENCH_BUDGET=$(($(left) - 100))  # the traces part and the report after it
[ "$BENCH_BUDGET" -gt "$BENCH_MAX" ] && BENCH_BUDGET=$BENCH_MAX
run_part bench $BENCH_MAX "$OUT/bench.log" env PYTHONUNBUFFERED=1 $PY bench/bench_gpu.py --bin_dir "$BIN" \
  --device "$DEVICE" $SMALL_FLAG --out "$WORK/bench.json" --part_timeout "${GPU_CHECK_PART_TIMEOUT:-120}" \
  --compile_timeout "${GPU_CHECK_COMPILE_TIMEOUT:-180}" --time_budget "$BENCH_BUDGET" --trace_dir "$WORK/traces" \
  $BENCH_ARGS

# ---- traces: summarised here; the raw ones back compressed, smallest first, within the device tool's 16 MiB -------
traces() {
  set -e
  mkdir -p "$WORK/traces"
  $PY bench/trace_summary.py "$WORK/traces" >"$WORK/trace_summary.json"
  cd "$WORK/traces"
  # Python's gzip and tarfile (the GPU machine may lack xz), smallest first, within 15 MiB and 45 s.
  $PY -c 'import gzip, os, shutil, sys, tarfile, time
t0, total, kept = time.time(), 0, 0
with tarfile.open(sys.argv[1], "w") as tar:
    for f in sorted((f for f in os.listdir(".") if os.path.isfile(f)), key=os.path.getsize):
        if time.time() - t0 > 45:
            print(f"traces: {f} left out (out of time)")
            continue
        with open(f, "rb") as src, gzip.open(f + ".gz", "wb", compresslevel=6) as dst:
            shutil.copyfileobj(src, dst)
        size = os.path.getsize(f + ".gz")
        if total + size > 15 << 20:
            print(f"traces: {f} left out ({size} bytes compressed)")
            continue
        tar.add(f + ".gz")
        total, kept = total + size, kept + 1
print(f"traces: {kept} files, {total} bytes in {sys.argv[1]}")' "$OUT/traces.tar"
}
export -f traces
export OUT
run_part traces 75 "$OUT/bench.log" traces

# ---- report ---------------------------------------------------------------------------------------------------
$PY bench/gpu_report.py --work "$WORK" --out "$OUT" --device "$DEVICE" --small "$SMALL" \
  --wall "$(($(date +%s) - START))" --deadline "$DEADLINE_S"
rc=$?
rm -rf "$WORK"
echo "gpu_check: $(($(date +%s) - START)) s wall; report in $OUT/gpu_report.md"
exit $rc
