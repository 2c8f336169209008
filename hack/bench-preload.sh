#!/usr/bin/env bash
# bench-preload.sh: upgrade-repo preload against the current upgrade script's pipeline,
# `zstdcat ARCHIVE | ctr -n k8s.io images import --no-unpack -`, side by side in one run, each
# into a fresh containerd (Debian's, with its own root and socket). One archive of >= 500 MB with
# several images sharing layers is generated once into .cache/bench-preload and packed into a
# release ISO. Each side runs BENCH_ROUNDS times, in alternating order; the fastest run of each
# counts (the machine is shared), peak RSS is the largest seen. Reports cold import time for both
# and their ratio, CPU time, the warm re-run time and peak RSS, ending with name=value lines.
#
# Knobs: BENCH_IMAGES (6), BENCH_BASE_MB (200), BENCH_MID_MB (100), BENCH_OWN_MB (40),
# BENCH_CONCURRENCY (2), BENCH_ROUNDS (3), BIN (bin/upgrade-repo).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin/upgrade-repo}
CACHE=.cache/bench-preload
IMAGES=${BENCH_IMAGES:-6}
BASE_MB=${BENCH_BASE_MB:-200}
MID_MB=${BENCH_MID_MB:-100}
OWN_MB=${BENCH_OWN_MB:-40}
CONCURRENCY=${BENCH_CONCURRENCY:-2}
ROUNDS=${BENCH_ROUNDS:-3}
if [ "$(id -u)" -ne 0 ]; then echo "bench-preload: needs root (it starts containerd)" >&2; exit 1; fi
for tool in containerd ctr zstd zstdcat xorriso /usr/bin/time; do
  command -v "$tool" >/dev/null || { echo "bench-preload: $tool missing (make deps)" >&2; exit 1; }
done
[ -x "$BIN" ] || { echo "bench-preload: $BIN missing (make build)" >&2; exit 1; }

rel=$CACHE/release-$IMAGES-$BASE_MB-$MID_MB-$OWN_MB
archive=$rel/bundle/common/images/bench-images.tar.zst
iso=$CACHE/release-$IMAGES-$BASE_MB-$MID_MB-$OWN_MB.iso
if [ ! -s "$iso" ]; then
  echo "bench-preload: generating the release ($IMAGES images, layers $BASE_MB/$MID_MB/$OWN_MB MiB)" >&2
  rm -rf "$rel" && mkdir -p "$rel/bundle/common/images" "$rel/bundle/common/images-lists"
  go run ./preload/preloadtest/benchrelease -images "$IMAGES" -base-mb "$BASE_MB" -mid-mb "$MID_MB" \
    -own-mb "$OWN_MB" -list "$rel/bundle/common/images-lists/bench-images.txt" \
    | zstd -q -3 -T0 -o "$archive"
  cat >"$rel/bundle/metadata.yaml" <<'YAML'
images:
  common:
  - list: /common/images-lists/bench-images.txt
    archive: /common/images/bench-images.tar.zst
YAML
  printf 'harvester: v0.0.0-bench\nkubernetes: v1.32.7+rke2r1\n' >"$rel/harvester-release.yaml"
  xorriso -abort_on FAILURE -as mkisofs -quiet -R -J -o "$iso.tmp" "$rel" 2>/dev/null
  mv "$iso.tmp" "$iso"
fi
archive_bytes=$(stat -c %s "$archive")
images_listed=$(grep -c . "$rel/bundle/common/images-lists/bench-images.txt")
echo "bench-preload: archive $archive_bytes bytes compressed, $images_listed images" >&2
# Both sides read from the page cache.
cat "$archive" "$iso" >/dev/null

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

# run_pipeline and run_preload import the archive cold into a fresh containerd and append
# "seconds rss_kib cpu_seconds images" to $work/pipeline.runs or $work/preload.runs.
run_pipeline() {
  start_containerd "pipeline-$1"
  local t0 t1
  t0=$(now)
  /usr/bin/time -f "$TIMEFMT" -o "$work/zstdcat.rss" zstdcat "$archive" \
    | /usr/bin/time -f "$TIMEFMT" -o "$work/ctr.rss" ctr -a "$sock" -n k8s.io images import --no-unpack - >"$work/ctr.out"
  t1=$(now)
  echo "$(elapsed "$t0" "$t1") $(( $(kib_of "$work/zstdcat.rss") + $(kib_of "$work/ctr.rss") ))" \
    "$(awk -v a="$(cpu_of "$work/zstdcat.rss")" -v b="$(cpu_of "$work/ctr.rss")" 'BEGIN { printf "%.2f", a + b }')" \
    "$(ctr -a "$sock" -n k8s.io images ls -q | grep -c bench || true)" >>"$work/pipeline.runs"
  stop_containerd
}
run_preload() {
  start_containerd "preload-$1"
  local t0 t1
  t0=$(now)
  /usr/bin/time -f "$TIMEFMT" -o "$work/preload.rss" "$BIN" preload --iso "$iso" --containerd-sock "$sock" \
    --concurrency "$CONCURRENCY" >"$work/preload.out"
  t1=$(now)
  echo "$(elapsed "$t0" "$t1") $(kib_of "$work/preload.rss") $(cpu_of "$work/preload.rss")" \
    "$(ctr -a "$sock" -n k8s.io images ls -q | grep -c bench || true)" >>"$work/preload.runs"
  # The warm re-run: everything is present, nothing is read.
  t0=$(now)
  /usr/bin/time -f "$TIMEFMT" -o "$work/warm.rss" "$BIN" preload --iso "$iso" --containerd-sock "$sock" >"$work/warm.out"
  t1=$(now)
  grep -q '^skip' "$work/warm.out" || { echo "bench-preload: the warm run did not skip:" >&2; cat "$work/warm.out" >&2; exit 1; }
  echo "$(elapsed "$t0" "$t1") $(kib_of "$work/warm.rss")" >>"$work/warm.runs"
  stop_containerd
}

# Rounds alternate the order, so neither side always runs on the busier or the warmer machine.
for round in $(seq 1 "$ROUNDS"); do
  echo "bench-preload: round $round of $ROUNDS" >&2
  if [ $((round % 2)) -eq 1 ]; then run_pipeline "$round"; run_preload "$round"; else run_preload "$round"; run_pipeline "$round"; fi
done
# best COLUMN FILE: the row with the smallest first column (the fastest run), field COLUMN.
best() { sort -n -k1,1 "$2" | head -1 | awk -v c="$1" '{print $c}'; }
maxcol() { awk -v c="$1" 'BEGIN {m = 0} $c > m {m = $c} END {print m}' "$2"; }
pipeline_cold=$(best 1 "$work/pipeline.runs"); pipeline_cpu=$(best 3 "$work/pipeline.runs")
preload_cold=$(best 1 "$work/preload.runs"); preload_cpu=$(best 3 "$work/preload.runs")
pipeline_rss_kib=$(maxcol 2 "$work/pipeline.runs"); preload_rss_kib=$(maxcol 2 "$work/preload.runs")
pipeline_images=$(best 4 "$work/pipeline.runs"); preload_images=$(best 4 "$work/preload.runs")
preload_warm=$(best 1 "$work/warm.runs"); warm_rss_kib=$(maxcol 2 "$work/warm.runs")
echo "bench-preload: runs (seconds peak-RSS-KiB cpu-seconds images):" >&2
sed 's/^/  pipeline /' "$work/pipeline.runs" >&2; sed 's/^/  preload  /' "$work/preload.runs" >&2

if [ "$preload_images" != "$images_listed" ] || [ "$pipeline_images" != "$images_listed" ]; then
  echo "bench-preload: imported $preload_images (preload) and $pipeline_images (pipeline) of $images_listed images" >&2; exit 1
fi
ratio=$(awk -v a="$pipeline_cold" -v b="$preload_cold" 'BEGIN { printf "%.2f", a / b }')
mbps() { awk -v n="$1" -v s="$2" 'BEGIN { printf "%.1f", n / 1048576 / s }'; }
cat <<EOF2

archive: $archive_bytes bytes compressed, $images_listed images sharing layers
pipeline (zstdcat | ctr import --no-unpack): ${pipeline_cold}s cold (best of $ROUNDS), $(mbps "$archive_bytes" "$pipeline_cold") MiB/s, peak RSS $((pipeline_rss_kib / 1024)) MiB, CPU ${pipeline_cpu}s (zstdcat + ctr), $pipeline_images images
upgrade-repo preload --iso:                   ${preload_cold}s cold (best of $ROUNDS), $(mbps "$archive_bytes" "$preload_cold") MiB/s, peak RSS $((preload_rss_kib / 1024)) MiB, CPU ${preload_cpu}s, $preload_images images
speed-up: ${ratio}x; warm re-run ${preload_warm}s (peak RSS $((warm_rss_kib / 1024)) MiB)

archive_bytes=$archive_bytes
images=$images_listed
rounds=$ROUNDS
pipeline_cold_seconds=$pipeline_cold
preload_cold_seconds=$preload_cold
preload_speedup=$ratio
preload_warm_seconds=$preload_warm
pipeline_peak_rss_bytes=$((pipeline_rss_kib * 1024))
preload_peak_rss_bytes=$((preload_rss_kib * 1024))
preload_warm_peak_rss_bytes=$((warm_rss_kib * 1024))
pipeline_cpu_seconds=$pipeline_cpu
preload_cpu_seconds=$preload_cpu
load_average=$(cut -d' ' -f1 /proc/loadavg)
pipeline_images_imported=$pipeline_images
preload_images_imported=$preload_images
EOF2
