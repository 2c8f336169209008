#!/usr/bin/env bash
# bench-preload.sh: upgrade-repo preload against the current upgrade script's pipeline,
# `zstdcat ARCHIVE | ctr -n k8s.io images import --no-unpack -`, side by side in one run, each
# into a fresh containerd (Debian's, with its own root and socket).
#
# Two releases are generated once into .cache/bench-preload and packed into ISOs:
#   one:   one archive of >= 500 MB holding several images that share layers;
#   split: as many bytes in BENCH_SPLIT archives, which the pipeline imports one after the other
#          (as the upgrade script does) and preload BENCH_CONCURRENCY at a time.
# Each side runs BENCH_ROUNDS times in alternating order; the fastest run of each counts (the
# machine is shared), peak RSS is the largest seen. Reports cold import time for both and their
# ratio, CPU time, the warm re-run time and peak RSS, ending with name=value lines.
#
# Knobs: BENCH_IMAGES (6), BENCH_BASE_MB (200), BENCH_MID_MB (100), BENCH_OWN_MB (40),
# BENCH_SPLIT (3, 0 skips that release), BENCH_CONCURRENCY (2, the command's default),
# BENCH_ROUNDS (3), BIN (bin/upgrade-repo).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin/upgrade-repo}
CACHE=.cache/bench-preload
IMAGES=${BENCH_IMAGES:-6}
BASE_MB=${BENCH_BASE_MB:-200}
MID_MB=${BENCH_MID_MB:-100}
OWN_MB=${BENCH_OWN_MB:-40}
SPLIT=${BENCH_SPLIT:-3}
CONCURRENCY=${BENCH_CONCURRENCY:-2}
ROUNDS=${BENCH_ROUNDS:-3}
if [ "$(id -u)" -ne 0 ]; then echo "bench-preload: needs root (it starts containerd)" >&2; exit 1; fi
for tool in containerd ctr zstd zstdcat xorriso /usr/bin/time; do
  command -v "$tool" >/dev/null || { echo "bench-preload: $tool missing (make deps)" >&2; exit 1; }
done
[ -x "$BIN" ] || { echo "bench-preload: $BIN missing (make build)" >&2; exit 1; }
mkdir -p "$CACHE"

# make_release DIR ISO N IMAGES BASE MID OWN: a release of N archives (seeds 0..N-1) and its ISO.
make_release() {
  local dir=$1 iso=$2 n=$3 images=$4 base=$5 mid=$6 own=$7 i
  [ -s "$iso" ] && return 0
  echo "bench-preload: generating $iso ($n archives of $images images, layers $base/$mid/$own MiB)" >&2
  rm -rf "$dir" && mkdir -p "$dir/bundle/common/images" "$dir/bundle/common/images-lists"
  echo "images:" >"$dir/bundle/metadata.yaml"
  echo "  common:" >>"$dir/bundle/metadata.yaml"
  for i in $(seq 0 $((n - 1))); do
    go run ./preload/preloadtest/benchrelease -seed "$i" -images "$images" -base-mb "$base" -mid-mb "$mid" \
      -own-mb "$own" -list "$dir/bundle/common/images-lists/bench-$i.txt" \
      | zstd -q -3 -T0 -o "$dir/bundle/common/images/bench-$i.tar.zst"
    printf '  - list: /common/images-lists/bench-%s.txt\n    archive: /common/images/bench-%s.tar.zst\n' "$i" "$i" \
      >>"$dir/bundle/metadata.yaml"
  done
  printf 'harvester: v0.0.0-bench\nkubernetes: v1.32.7+rke2r1\n' >"$dir/harvester-release.yaml"
  xorriso -abort_on FAILURE -as mkisofs -quiet -R -J -o "$iso.tmp" "$dir" 2>/dev/null
  mv "$iso.tmp" "$iso"
}

scenarios=(one)
one_dir=$CACHE/one-$IMAGES-$BASE_MB-$MID_MB-$OWN_MB
make_release "$one_dir" "$one_dir.iso" 1 "$IMAGES" "$BASE_MB" "$MID_MB" "$OWN_MB"
if [ "$SPLIT" -gt 1 ]; then
  scenarios+=(split)
  per=$(( (IMAGES + SPLIT - 1) / SPLIT ))
  split_dir=$CACHE/split-$SPLIT-$per-$((BASE_MB / SPLIT))-$((MID_MB / SPLIT))-$OWN_MB
  make_release "$split_dir" "$split_dir.iso" "$SPLIT" "$per" $((BASE_MB / SPLIT)) $((MID_MB / SPLIT)) "$OWN_MB"
fi

work=$(mktemp -d /tmp/bench-preload.XXXXXX)
pid=""
stop_containerd() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; pid=""; fi
}
cleanup() { stop_containerd; rm -rf "$work"; }
trap cleanup EXIT

# start_containerd NAME: a fresh daemon under $work/NAME; sets $sock and $pid.
start_containerd() {
  local d=$work/$1
  mkdir -p "$d"
  sock=$d/c.sock
  cat >"$d/config.toml" <<TOML
version = 2
root = "$d/root"
state = "$d/state"
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]
[grpc]
  address = "$sock"
[ttrpc]
  address = "$sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "$d/opt"
TOML
  containerd --config "$d/config.toml" --log-level warn >"$d/containerd.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 300); do
    ctr -a "$sock" version >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "bench-preload: containerd did not start" >&2; cat "$d/containerd.log" >&2; exit 1
}

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b - a }'; }
# /usr/bin/time writes "peak-RSS-KiB user-seconds system-seconds" into the file it is given.
TIMEFMT='%M %U %S'
kib_of() { tail -1 "$1" | awk '{print $1}'; }
cpu_of() { tail -1 "$1" | awk '{printf "%.2f", $2 + $3}'; }
bench_images() { ctr -a "$sock" -n k8s.io images ls -q | grep -c '/rancher/bench-' || true; }

# run_pipeline SCENARIO ROUND and run_preload SCENARIO ROUND import the scenario's release cold
# into a fresh containerd and append "seconds peak-RSS-KiB cpu-seconds images" to
# $work/SCENARIO.pipeline or $work/SCENARIO.preload (and the warm re-run to $work/SCENARIO.warm).
run_pipeline() {
  local dir=${1}_dir t0 t1 a rss=0 cpu=0
  start_containerd "$1-pipeline-$2"
  t0=$(now)
  for a in "${!dir}"/bundle/common/images/*.tar.zst; do
    /usr/bin/time -f "$TIMEFMT" -o "$work/zstdcat.rss" zstdcat "$a" \
      | /usr/bin/time -f "$TIMEFMT" -o "$work/ctr.rss" ctr -a "$sock" -n k8s.io images import --no-unpack - >"$work/ctr.out"
    rss=$(( rss > $(kib_of "$work/zstdcat.rss") + $(kib_of "$work/ctr.rss") ? rss : $(kib_of "$work/zstdcat.rss") + $(kib_of "$work/ctr.rss") ))
    cpu=$(awk -v c="$cpu" -v a="$(cpu_of "$work/zstdcat.rss")" -v b="$(cpu_of "$work/ctr.rss")" 'BEGIN { printf "%.2f", c + a + b }')
  done
  t1=$(now)
  echo "$(elapsed "$t0" "$t1") $rss $cpu $(bench_images)" >>"$work/$1.pipeline"
  stop_containerd
}
run_preload() {
  local dir=${1}_dir t0 t1
  start_containerd "$1-preload-$2"
  t0=$(now)
  /usr/bin/time -f "$TIMEFMT" -o "$work/preload.rss" "$BIN" preload --iso "${!dir}.iso" --containerd-sock "$sock" \
    --concurrency "$CONCURRENCY" >"$work/preload.out"
  t1=$(now)
  echo "$(elapsed "$t0" "$t1") $(kib_of "$work/preload.rss") $(cpu_of "$work/preload.rss") $(bench_images)" >>"$work/$1.preload"
  # The warm re-run: everything is present, nothing is read.
  t0=$(now)
  /usr/bin/time -f "$TIMEFMT" -o "$work/warm.rss" "$BIN" preload --iso "${!dir}.iso" --containerd-sock "$sock" >"$work/warm.out"
  t1=$(now)
  if grep -q '^import' "$work/warm.out" || ! grep -q '^skip' "$work/warm.out"; then
    echo "bench-preload: the warm run did not skip every archive:" >&2; cat "$work/warm.out" >&2; exit 1
  fi
  echo "$(elapsed "$t0" "$t1") $(kib_of "$work/warm.rss")" >>"$work/$1.warm"
  stop_containerd
}

for s in "${scenarios[@]}"; do
  dir=${s}_dir
  cat "${!dir}"/bundle/common/images/*.tar.zst "${!dir}.iso" >/dev/null # both sides read from the page cache
  for round in $(seq 1 "$ROUNDS"); do
    echo "bench-preload: $s: round $round of $ROUNDS" >&2
    if [ $((round % 2)) -eq 1 ]; then run_pipeline "$s" "$round"; run_preload "$s" "$round"
    else run_preload "$s" "$round"; run_pipeline "$s" "$round"; fi
  done
done

# best COLUMN FILE: field COLUMN of the fastest run; maxcol COLUMN FILE: the largest value.
best() { sort -n -k1,1 "$2" | head -1 | awk -v c="$1" '{print $c}'; }
maxcol() { awk -v c="$1" 'BEGIN {m = 0} $c > m {m = $c} END {print m}' "$2"; }
mbps() { awk -v n="$1" -v s="$2" 'BEGIN { printf "%.1f", n / 1048576 / s }'; }
echo "bench-preload: runs (seconds peak-RSS-KiB cpu-seconds images):" >&2
lines=()
for s in "${scenarios[@]}"; do
  dir=${s}_dir
  sed "s/^/  $s pipeline /" "$work/$s.pipeline" >&2; sed "s/^/  $s preload  /" "$work/$s.preload" >&2
  bytes=$(cat "${!dir}"/bundle/common/images/*.tar.zst | wc -c)
  narch=$(ls "${!dir}"/bundle/common/images/*.tar.zst | wc -l)
  listed=$(cat "${!dir}"/bundle/common/images-lists/*.txt | grep -c .)
  p_cold=$(best 1 "$work/$s.pipeline"); p_cpu=$(best 3 "$work/$s.pipeline"); p_rss=$(maxcol 2 "$work/$s.pipeline"); p_img=$(best 4 "$work/$s.pipeline")
  u_cold=$(best 1 "$work/$s.preload"); u_cpu=$(best 3 "$work/$s.preload"); u_rss=$(maxcol 2 "$work/$s.preload"); u_img=$(best 4 "$work/$s.preload")
  warm=$(best 1 "$work/$s.warm"); warm_rss=$(maxcol 2 "$work/$s.warm")
  if [ "$u_img" != "$listed" ] || [ "$p_img" != "$listed" ]; then
    echo "bench-preload: $s: imported $u_img (preload) and $p_img (pipeline) of $listed images" >&2; exit 1
  fi
  ratio=$(awk -v a="$p_cold" -v b="$u_cold" 'BEGIN { printf "%.2f", a / b }')
  cat <<EOF2

$s: $narch archive(s), $bytes bytes compressed, $listed images sharing layers
  pipeline (zstdcat | ctr import --no-unpack): ${p_cold}s cold (best of $ROUNDS), $(mbps "$bytes" "$p_cold") MiB/s, CPU ${p_cpu}s, peak RSS $((p_rss / 1024)) MiB (zstdcat + ctr)
  upgrade-repo preload --iso:                   ${u_cold}s cold (best of $ROUNDS), $(mbps "$bytes" "$u_cold") MiB/s, CPU ${u_cpu}s, peak RSS $((u_rss / 1024)) MiB
  speed-up ${ratio}x; warm re-run ${warm}s (peak RSS $((warm_rss / 1024)) MiB)
EOF2
  lines+=(
    "${s}_archives=$narch" "${s}_archive_bytes=$bytes" "${s}_images=$listed"
    "${s}_pipeline_cold_seconds=$p_cold" "${s}_preload_cold_seconds=$u_cold" "${s}_preload_speedup=$ratio"
    "${s}_preload_warm_seconds=$warm"
    "${s}_pipeline_cpu_seconds=$p_cpu" "${s}_preload_cpu_seconds=$u_cpu"
    "${s}_pipeline_peak_rss_bytes=$((p_rss * 1024))" "${s}_preload_peak_rss_bytes=$((u_rss * 1024))"
    "${s}_preload_warm_peak_rss_bytes=$((warm_rss * 1024))"
  )
done
echo
printf '%s\n' "rounds=$ROUNDS" "concurrency=$CONCURRENCY" "load_average=$(cut -d' ' -f1 /proc/loadavg)" "${lines[@]}"
