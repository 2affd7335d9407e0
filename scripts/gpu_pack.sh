#!/usr/bin/env bash
# The GPU check's kit: puts into ONE git-ignored folder (default gpu_kit/) everything the lent GPU machine lacks
# for scripts/gpu_check.sh. That machine (an H100/H200 with python3 + torch 2.11, CMake, ninja, nvcc and g++, no
# network) builds Baton there against its own torch from this kit:
#   gpu_kit/prefix.tar.xz  Debian 12 packages (gRPC, protobuf + protoc, Abseil, yaml-cpp, prometheus-cpp,
#                          nlohmann-json, GoogleTest, libpng, libjpeg, pkgconf and whatever they pull in that a
#                          bare Debian with python3/cmake/ninja/g++ lacks), unpacked with `dpkg -x` and pruned, plus
#                          a minimal FFmpeg 5.1 (Debian's own source, only the codecs core/video names) built here:
#                          Debian's FFmpeg drags ~170 MB of codec libraries (48 MB xz) that the check never calls.
#   gpu_kit/wheels/        diffusers (+ the few pure-Python packages it needs that the machine lacks) and peft,
#                          for the PyTorch side of the step comparison; installed there with --no-deps --target.
#   gpu_kit/MANIFEST.txt   what is inside, with versions.
# It prints the kit's size next to the checkout's and fails when both together exceed the 60 MiB that may travel.
#
#   scripts/gpu_pack.sh [KIT_DIR]        (root or sudo for apt-get; network to the Debian mirror and PyPI)
#   scripts/gpu_pack.sh --list           what the kit would carry and what it counts on the machine having, one
#                                        "kind name" a line; no network, no root, writes nothing (scripts/
#                                        check_gpu_kit.py checks the build's needs against it)
# Downloads and the FFmpeg build are cached in .gpu_cache/ (git-ignored); a second run takes seconds.
# Every symbolic link in the kit must resolve inside it: a development link into a runtime package the kit does not
# carry (libcurl.so -> libcurl.so.4.8.0 of cmake's libcurl4) brings that file along, and a link that still dangles
# after packing fails the run, naming it.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
LIST=0
[ "${1:-}" = --list ] && { LIST=1; shift; }
KIT=${1:-gpu_kit}
CACHE=${GPU_PACK_CACHE:-$REPO/.gpu_cache}
BUDGET=$((60 * 1024 * 1024))
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo

# What Baton's build needs (scripts/setup.sh's list, minus FFmpeg, plus GoogleTest and the image libraries), and
# everything they depend on. scripts/check_gpu_kit.py (ctest lint.gpu_kit) fails when something the CMake looks for
# is in neither this closure nor BASE's.
DEV="libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev prometheus-cpp-dev
     libyaml-cpp-dev nlohmann-json3-dev libgtest-dev libgmock-dev libpng-dev libjpeg-dev zlib1g-dev pkgconf libgloo-dev
     libssl-dev"
# What the target machine (and the rehearsal's root) already has: these and everything they depend on.
BASE="python3 python3-venv cmake ninja-build g++ ca-certificates"
# Python packages the PyTorch side needs beyond what that machine has (see /work/.library/device/KINDS.md's list:
# torch, transformers, accelerate, huggingface-hub, safetensors, numpy, regex, requests, pillow, psutil, pyyaml,
# tqdm, packaging, zipp, filelock, peft are there; peft is carried anyway so both sides pin the version we test).
WHEELS="diffusers==0.42.1 peft==0.21.2 importlib_metadata==10.2.0 zipp==4.1.2 lazy-importer==0.1.0"
FFMPEG_VERSION=5.1.9
# The libraries that FFmpeg build makes (the kit carries them instead of Debian's libav*-dev): core/CMakeLists.txt's
# pkg_check_modules names some of them. Checked after the build.
FFMPEG_LIBS="avcodec avformat avutil swscale swresample"
# Pruned from the unpacked packages: documentation, manuals, locales, and static archives nothing links (GoogleTest
# ships only .a: kept).
PRUNE_DIRS="usr/share/doc usr/share/man usr/share/locale usr/share/lintian usr/share/info usr/src etc"
KEEP_STATIC="libgtest* libgmock*"

closure() {
  apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces \
    --no-enhances "$@" | grep -v '^ ' | grep -v '^<' | sort -u
}
LISTS=$(mktemp -d)
trap 'rm -rf "$LISTS"' EXIT
closure $DEV >"$LISTS/dev.list"
{
  closure $BASE
  dpkg-query -W -f '${Package} ${Priority}\n' | awk '$2 == "required" {print $1}'
} | sort -u >"$LISTS/base.list"
comm -23 "$LISTS/dev.list" "$LISTS/base.list" >"$LISTS/need.list"
if [ "$LIST" = 1 ]; then
  echo "# scripts/gpu_pack.sh --list: kit = Debian packages unpacked into the kit (DEV's closure minus BASE's);"
  echo "# base = what the GPU machine is taken to have (BASE's closure and Debian's required packages); ffmpeg ="
  echo "# libraries of the kit's own FFmpeg build; pruned = folders removed from the kit; static_kept = the only"
  echo "# static archives kept"
  sed 's/^/kit /' "$LISTS/need.list"
  sed 's/^/base /' "$LISTS/base.list"
  for x in $FFMPEG_LIBS; do echo "ffmpeg $x"; done
  for x in $PRUNE_DIRS; do echo "pruned /$x"; done
  for x in $KEEP_STATIC; do echo "static_kept $x"; done
  exit 0
fi

t0=$(date +%s)
mkdir -p "$CACHE/debs" "$CACHE/wheels"
rm -rf "$KIT" "$CACHE/prefix" "$CACHE/runtime" "$CACHE/manifest"
mkdir -p "$KIT/wheels" "$CACHE/prefix"
cp "$LISTS"/{dev,base,need}.list "$CACHE/"
echo "gpu_pack: $(wc -l <"$CACHE/need.list") Debian packages: $(tr '\n' ' ' <"$CACHE/need.list")"
(cd "$CACHE/debs" && apt-get download $(cat "$CACHE/need.list") >/dev/null 2>&1 ||
  (cd "$CACHE/debs" && apt-get download $(cat "$CACHE/need.list")))
# The .deb of package $1 at apt's candidate version (the one `apt-get download` fetched; older ones may be cached).
deb_of() {
  local v
  v=$(apt-cache policy "$1" | awk '/Candidate:/ {print $2}')
  ls "$CACHE"/debs/"$1"_"${v/:/%3a}"_*.deb 2>/dev/null | head -1
}
for p in $(cat "$CACHE/need.list"); do
  deb=$(deb_of "$p")
  [ -n "$deb" ] || { echo "gpu_pack: no .deb for $p" >&2; exit 1; }
  dpkg -x "$deb" "$CACHE/prefix"
  echo "deb $(dpkg-deb -f "$deb" Package) $(dpkg-deb -f "$deb" Version)" >>"$CACHE/manifest"
done

# Minimal FFmpeg from Debian's source package (same upstream version as bookworm's libavcodec59).
FF="$CACHE/ffmpeg-min"
if [ ! -f "$FF/lib/libavcodec.so" ]; then
  mkdir -p "$CACHE/src"
  if [ ! -f "$CACHE/src/ffmpeg_${FFMPEG_VERSION}.orig.tar.xz" ]; then
    printf 'deb-src http://deb.debian.org/debian bookworm main\ndeb-src http://deb.debian.org/debian-security bookworm-security main\n' \
      >"$CACHE/src.list"
    mkdir -p "$CACHE/srclists/partial"
    O="-o Dir::Etc::SourceList=$CACHE/src.list -o Dir::Etc::SourceParts=/dev/null -o Dir::State::Lists=$CACHE/srclists"
    $SUDO apt-get $O update -qq
    (cd "$CACHE/src" && apt-get $O source --download-only ffmpeg)
  fi
  rm -rf "$CACHE/src/ffmpeg-$FFMPEG_VERSION"
  tar -xf "$CACHE/src/ffmpeg_${FFMPEG_VERSION}.orig.tar.xz" -C "$CACHE/src"
  (cd "$CACHE/src/ffmpeg-$FFMPEG_VERSION" &&
    ./configure --prefix="$FF" --disable-everything --disable-autodetect --disable-programs --disable-doc \
      --disable-static --enable-shared --disable-x86asm --disable-avdevice --disable-avfilter --disable-network \
      --enable-protocol=file --enable-encoder=mpeg4,mjpeg,png --enable-decoder=h264,hevc,mpeg4,mjpeg,png,vp8,vp9,rawvideo \
      --enable-demuxer=mov,matroska,avi,image2,rawvideo --enable-muxer=mp4,mov,avi \
      --enable-parser=h264,hevc,mpeg4video,mjpeg,vp9 --enable-zlib --enable-swscale >/dev/null &&
    make -j"$(nproc)" >/dev/null && make install >/dev/null)
fi
for x in $FFMPEG_LIBS; do
  [ -f "$FF/lib/lib$x.so" ] || { echo "gpu_pack: the FFmpeg build made no lib$x.so (FFMPEG_LIBS)" >&2; exit 1; }
done
cp -a "$FF"/include/. "$CACHE/prefix/usr/include/"
cp -a "$FF"/lib/*.so* "$CACHE/prefix/usr/lib/x86_64-linux-gnu/"
mkdir -p "$CACHE/prefix/usr/lib/x86_64-linux-gnu/pkgconfig"
for pc in "$FF"/lib/pkgconfig/*.pc; do  # FFmpeg writes absolute libdir/includedir: point them into the kit
  sed -E 's|^libdir=.*|libdir=${prefix}/lib/x86_64-linux-gnu|; s|^includedir=.*|includedir=${prefix}/include|' "$pc" \
    >"$CACHE/prefix/usr/lib/x86_64-linux-gnu/pkgconfig/$(basename "$pc")"
done
echo "built ffmpeg-minimal $FFMPEG_VERSION (libavcodec/avformat/avutil/swscale/swresample; codecs: mpeg4 mjpeg png h264 hevc vp8 vp9)" \
  >>"$CACHE/manifest"

# Prune (PRUNE_DIRS).
P="$CACHE/prefix"
for d in $PRUNE_DIRS; do rm -rf "${P:?}/$d"; done
# gRPC's and civetweb's CMake configs check that every program they export exists: the ones the build never runs
# become one-line stubs.
for b in "$P"/usr/bin/grpc_{php,python,ruby}_plugin "$P"/usr/bin/civetweb; do
  printf '#!/bin/sh\necho "%s: not carried by gpu_pack.sh" >&2\nexit 1\n' "$(basename "$b")" >"$b"
done
# Development symlinks that point outside the kit: into a runtime package of the base system (libcurl.so ->
# libcurl.so.4.8.0 of libcurl4, libssl.so -> libssl.so.3 of libssl3: cmake depends on both, so the kit counts on the
# machine having them, but under the runtime name only), or absolute (libz.so -> /lib/.../libz.so.1.2.13). Bring the
# file they name, from that runtime package at the version apt downloads (the one the -dev package's headers
# match; this machine's dpkg says which package), so CMake's find_library finds a real library on a machine whose
# own copy may be missing or elsewhere. (A relative link's `readlink -f` names a path inside the kit even when
# nothing is there: only a link that resolves counts as inside.)
for l in $(find "$P" -type l); do
  if [ -e "$l" ]; then
    case "$(readlink -f "$l")" in "$P"/*) continue ;; esac
  fi
  target=$(readlink "$l")
  case "$target" in
    /*) want=$target ;;
    *) want=$(dirname "${l#"$P"}")/$target ;;  # where the link points on an installed system
  esac
  real=$(readlink -f "$want" || true)  # the file itself, on this machine (a link may lead to a link)
  owner=$( (dpkg -S "$real" || dpkg -S "${real#/usr}") 2>/dev/null | head -1 | cut -d: -f1) || true
  if [ -z "$owner" ]; then
    echo "gpu_pack: ${l#"$P"} -> $target: $real belongs to no installed package here (scripts/setup.sh installs them)" >&2
    continue  # the check below names the link and fails
  fi
  rt="$CACHE/runtime/$owner"
  if [ ! -d "$rt" ]; then
    (cd "$CACHE/debs" && apt-get download "$owner" >/dev/null 2>&1 || apt-get download "$owner")
    mkdir -p "$rt"
    dpkg -x "$(deb_of "$owner")" "$rt"
  fi
  f=""
  for c in "$rt$real" "$rt${real#/usr}"; do [ -f "$c" ] && { f=$c; break; }; done
  if [ -z "$f" ]; then
    echo "gpu_pack: ${l#"$P"} -> $target: $real is not in $owner's .deb" >&2
    continue
  fi
  cp "$f" "$(dirname "$l")/$(basename "$real")"
  ln -sf "$(basename "$real")" "$l"
  echo "copied $(basename "$real") from $(basename "$(deb_of "$owner")") (for $(basename "$l"))" >>"$CACHE/manifest"
done
keep=()
for g in $KEEP_STATIC; do keep+=(! -name "$g"); done
find "$P" -name '*.a' "${keep[@]}" -delete
# Relocatable .pc files: their prefix follows wherever the kit is unpacked.
for pc in "$P"/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc "$P"/usr/share/pkgconfig/*.pc; do
  [ -f "$pc" ] || continue
  case "$pc" in
    */usr/share/pkgconfig/*) rel='${pcfiledir}/../..' ;;
    *) rel='${pcfiledir}/../../..' ;;
  esac
  sed -i -E "s|^prefix=.*|prefix=$rel|" "$pc"
done
# protoc and grpc_cpp_plugin load libprotoc/libprotobuf from the kit: wrap them so CMake's custom commands find
# those libraries without an LD_LIBRARY_PATH that would also reach the machine's own programs.
for b in "$P"/usr/bin/protoc "$P"/usr/bin/protoc-* "$P"/usr/bin/grpc_cpp_plugin "$P"/usr/bin/pkgconf; do
  [ -f "$b" ] && [ ! -L "$b" ] || continue
  mv "$b" "$b.real"
  cat >"$b" <<'EOF'
#!/bin/sh
d=$(cd "$(dirname "$0")/.." && pwd)
LD_LIBRARY_PATH="$d/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$0.real" "$@"
EOF
  chmod +x "$b"
done
strip --strip-unneeded "$P"/usr/lib/x86_64-linux-gnu/*.so.* 2>/dev/null || true
# No link in the kit may dangle (pruned, or pointing where the GPU machine has nothing): fail, naming each.
dangling=$(find "$P" -xtype l -printf '/%P -> %l\n')
if [ -n "$dangling" ]; then
  echo "gpu_pack: symbolic links in the kit that point to nothing:" >&2
  echo "$dangling" | sed 's/^/  /' >&2
  exit 1
fi
cp "$CACHE/manifest" "$KIT/MANIFEST.txt"
rm -f "$CACHE/manifest"
tar -C "$P" -cf - usr | xz -T"$(nproc)" -6 >"$KIT/prefix.tar.xz"

# Wheels for the machine's Python 3.12 (pure Python; no dependency resolution: torch 2.11 and the rest are there).
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform any -d "$CACHE/wheels" $WHEELS
for w in $WHEELS; do
  name=${w%%==*}
  f=$(ls "$CACHE"/wheels/"${name//-/_}"-"${w##*==}"-*.whl 2>/dev/null | head -1)
  [ -n "$f" ] || { echo "gpu_pack: wheel $w not downloaded" >&2; exit 1; }
  cp "$f" "$KIT/wheels/"
  echo "wheel $(basename "$f")" >>"$KIT/MANIFEST.txt"
done

kit_bytes=$(du -sb "$KIT" | cut -f1)
checkout_bytes=$( (git ls-files -co --exclude-standard -z | xargs -0 du -cb 2>/dev/null || true) | awk '/\ttotal$/ {s += $1} END {print s + 0}')
total=$((kit_bytes + checkout_bytes))
mib() { awk -v b="$1" 'BEGIN {printf "%.1f", b / 1048576}'; }
echo "gpu_pack: $KIT/ $(mib "$kit_bytes") MiB (prefix.tar.xz $(mib "$(stat -c %s "$KIT/prefix.tar.xz")") MiB," \
  "wheels $(mib "$(du -sb "$KIT/wheels" | cut -f1)") MiB) + checkout $(mib "$checkout_bytes") MiB =" \
  "$(mib "$total") MiB of the 60 MiB that may travel; $(($(date +%s) - t0)) s"
if [ "$total" -gt "$BUDGET" ]; then
  echo "gpu_pack: over the 60 MiB budget" >&2
  exit 1
fi
