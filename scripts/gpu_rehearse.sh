#!/usr/bin/env bash
# The GPU check's CPU rehearsal: gpu_pack.sh's kit + `gpu_check.sh --device cpu --small`, inside a clean Debian 12
# root that holds only what the lent GPU machine has: python3 (with its headers), cmake, ninja, g++, the CUDA toolkit (bind-mounted
# from /usr/local/cuda, as that machine has nvcc) and a venv with torch 2.11 plus the Python packages that machine
# lists (numpy, safetensors, huggingface-hub, transformers, accelerate, ...; not diffusers or peft, which the kit
# carries). The checkout goes in as the device tool sends it (tracked and untracked-not-ignored files) with gpu_kit/,
# and the run ends with a report of the same form as on the GPU. Needs root (debootstrap, chroot, mount) and,
# the first time, the Debian mirror and PyPI (~3 GB of wheels: PyPI's torch 2.11.0 is the CUDA build).
#
#   scripts/gpu_rehearse.sh [OUTDIR]     (default out/gpu_rehearsal; root file system in gpu_rehearsal/)
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
OUT=$(realpath -m "${1:-out/gpu_rehearsal}")
R=$REPO/gpu_rehearsal
ROOT=$R/root
CUDA=$(realpath /usr/local/cuda)
[ "$(id -u)" = 0 ] || { echo "gpu_rehearse: needs root (debootstrap, chroot, mount)" >&2; exit 1; }
[ -x "$CUDA/bin/nvcc" ] || { echo "gpu_rehearse: no CUDA toolkit at /usr/local/cuda (the GPU machine has one)" >&2; exit 1; }
t0=$(date +%s)

# 1. A minimal Debian 12 with only the target's tools.
if [ ! -x "$ROOT/usr/bin/g++" ]; then
  command -v debootstrap >/dev/null || apt-get install -y debootstrap
  rm -rf "$ROOT"
  debootstrap --variant=minbase --include=python3,python3-dev,python3-venv,cmake,ninja-build,g++,ca-certificates bookworm \
    "$ROOT" http://deb.debian.org/debian
fi
# 2. The venv: torch 2.11.0 and the packages the GPU machine has (wheels fetched here, installed offline there).
TARGET_PY="numpy safetensors==0.8.0 huggingface_hub==1.33.0 transformers==5.17.0 accelerate==1.15.0 regex requests
           pillow psutil pyyaml tqdm packaging"
if [ ! -x "$ROOT/opt/torch/bin/python" ]; then
  mkdir -p "$R/wheels"
  PIP_FIND_LINKS= python3 -m pip download -q -d "$R/wheels" --python-version 3.11 --only-binary=:all: \
    torch==2.11.0 $TARGET_PY
  mkdir -p "$ROOT/wheels"
  mount --bind "$R/wheels" "$ROOT/wheels"
  chroot "$ROOT" env -i PATH=/usr/bin:/bin sh -c "python3 -m venv /opt/torch &&
    /opt/torch/bin/pip install -q --no-index --find-links /wheels torch==2.11.0 $(echo $TARGET_PY)" ||
    { umount "$ROOT/wheels"; exit 1; }
  umount "$ROOT/wheels"
fi
# 3. The kit, and the checkout as it would travel.
[ -f gpu_kit/prefix.tar.xz ] || scripts/gpu_pack.sh
# build-gpu/ survives a rerun (as on a warm GPU machine) unless GPU_REHEARSE_FRESH=1.
[ "${GPU_REHEARSE_FRESH:-0}" = 1 ] && rm -rf "$ROOT/work/build-gpu" "$ROOT/work/baton/build-gpu"
[ -d "$ROOT/work/baton/build-gpu" ] && mv "$ROOT/work/baton/build-gpu" "$ROOT/work/build-gpu"
rm -rf "$ROOT/work/baton"
mkdir -p "$ROOT/work/baton" "$OUT" "$ROOT/out" "$ROOT/usr/local/cuda" "$ROOT/proc" "$ROOT/dev"
git ls-files -co --exclude-standard -z | while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
  tar --null -T - -cf - | tar -xf - -C "$ROOT/work/baton"
cp -a gpu_kit "$ROOT/work/baton/"
[ -d "$ROOT/work/build-gpu" ] && mv "$ROOT/work/build-gpu" "$ROOT/work/baton/build-gpu"
cleanup() {
  for m in out usr/local/cuda dev proc; do
    mountpoint -q "$ROOT/$m" && { umount "$ROOT/$m" 2>/dev/null || umount -l "$ROOT/$m"; }
  done
  return 0
}
cleanup  # leftovers of an interrupted run
trap cleanup EXIT
mount -t proc proc "$ROOT/proc"
mount --bind /dev "$ROOT/dev"
mount --bind -o ro "$CUDA" "$ROOT/usr/local/cuda"
mount --bind "$OUT" "$ROOT/out"
# 4. The check, as the GPU machine runs it, on CPU at tiny sizes (2 cores here: longer timeouts for the build, the
# bench and its torch.compile row, whose Inductor C++ compiles took 200 s on 2 busy cores).
t1=$(date +%s)
set +e
chroot "$ROOT" env -i PATH=/opt/torch/bin:/usr/local/cuda/bin:/usr/bin:/bin HOME=/root LANG=C.UTF-8 \
  GPU_CHECK_BUILD_TIMEOUT="${GPU_CHECK_BUILD_TIMEOUT:-2400}" GPU_CHECK_JOBS="${GPU_CHECK_JOBS:-$(nproc)}" \
  GPU_CHECK_BENCH_TIMEOUT="${GPU_CHECK_BENCH_TIMEOUT:-1500}" GPU_CHECK_PART_TIMEOUT="${GPU_CHECK_PART_TIMEOUT:-300}" \
  GPU_CHECK_COMPILE_TIMEOUT="${GPU_CHECK_COMPILE_TIMEOUT:-600}" \
  bash /work/baton/scripts/gpu_check.sh /out --device cpu --small --deadline "${GPU_REHEARSE_DEADLINE:-3300}"
rc=$?
set -e
echo "gpu_rehearse: check rc=$rc in $(($(date +%s) - t1)) s (all: $(($(date +%s) - t0)) s); kit $(du -sh gpu_kit | cut -f1);" \
  "report: $OUT/gpu_report.md"
exit $rc
