#!/usr/bin/env bash
# bench-preload.sh: upgrade-repo preload against the upgrade script's pipeline,
# `zstdcat ARCHIVE | ctr -n k8s.io images import --no-unpack -` (archive after archive), and against
# the floor (zstd decode of every archive to a file on the same disk, synced), side by side in one
# run, each import into a fresh containerd (Debian's, with its own root and socket).
#
# Releases are generated once into .cache/bench-preload and packed into ISOs:
#   node:  shaped like a real release: one archive of one image of >= 1 GiB of tar in large base
#          layers (BENCH_NODE_MB, split 64/27/9% over three layers) beside a small archive of four
#          images;
#   one:   one archive of >= 500 MB holding several images that share layers;
#   split: as many bytes in BENCH_SPLIT archives, which the pipeline imports one after the other
#          (as the upgrade script does) and preload BENCH_CONCURRENCY at a time.
# Layer data compresses to about 90% with zstd -3 (mostly random), so reading and writing, not
# decoding, dominate. Each side runs BENCH_ROUNDS times in alternating order; the fastest run of
# each counts (the machine is shared), peak RSS is the largest seen. Preload runs with
# --unpack=false against the pipeline's --no-unpack.
#
# On the node release it also measures, per round, the upgrade's whole image cost both ways:
# preload --unpack=false then the first container of every image (ctr containers create, which
# unpacks into overlayfs), and preload --unpack (one pass: layers extracted while written) then
# the same creates; beside them preload --unpack --one-pass=false (containerd unpacks after each
# archive) and the pipeline with unpack (`zstdcat | ctr images import -`); and once, the throttle
# (BENCH_THROTTLE_MB=0 skips it):
# preload with --max-bytes-per-second BENCH_THROTTLE_MB MiB/s and --nice 19 beside a CPU-bound
# workload (sha256sum of BENCH_WORK_MB MiB on every core), against the workload alone and beside an unthrottled
# preload. Ends with name=value lines.
#
# Knobs: BENCH_SCENARIOS ("node one split"), BENCH_NODE_MB (1100), BENCH_IMAGES (6),
# BENCH_BASE_MB (200), BENCH_MID_MB (100), BENCH_OWN_MB (40), BENCH_SPLIT (3),
# BENCH_CONCURRENCY (2, the command's default), BENCH_ROUNDS (3), BENCH_THROTTLE_MB (100),
# BENCH_WORK_MB (2048), BIN (bin/upgrade-repo).
set -euo pipefail
cd "$(dirname "$0")/.."
source hack/bench-lib.sh
BIN=${BIN:-bin/upgrade-repo}
CACHE=.cache/bench-preload
IMAGES=${BENCH_IMAGES:-6}
BASE_MB=${BENCH_BASE_MB:-200}
MID_MB=${BENCH_MID_MB:-100}
OWN_MB=${BENCH_OWN_MB:-40}
SPLIT=${BENCH_SPLIT:-3}
SCENARIOS=${BENCH_SCENARIOS:-node one split}
NODE_MB=${BENCH_NODE_MB:-1100}
THROTTLE_MB=${BENCH_THROTTLE_MB:-100}
WORK_MB=${BENCH_WORK_MB:-2048}
CONCURRENCY=${BENCH_CONCURRENCY:-2}
ROUNDS=${BENCH_ROUNDS:-3}
if [ "$(id -u)" -ne 0 ]; then echo "bench-preload: needs root (it starts containerd)" >&2; exit 1; fi
for tool in containerd ctr zstd zstdcat xorriso sha256sum /usr/bin/time; do
  command -v "$tool" >/dev/null || { echo "bench-preload: $tool missing (make deps)" >&2; exit 1; }
done
[ -x "$BIN" ] || { echo "bench-preload: $BIN missing (make build)" >&2; exit 1; }
mkdir -p "$CACHE"

# make_release DIR ISO SPEC...: a release of one archive per SPEC ("seed images base mid own", MiB)
# and its ISO.
make_release() {
  local dir=$1 iso=$2 spec seed images base mid own
  shift 2
  [ -s "$iso" ] && return 0
  rm -rf "$dir" && mkdir -p "$dir/bundle/common/images" "$dir/bundle/common/images-lists"
  echo "images:" >"$dir/bundle/metadata.yaml"
  echo "  common:" >>"$dir/bundle/metadata.yaml"
  for spec in "$@"; do
    read -r seed images base mid own <<<"$spec"
    echo "bench-preload: generating archive $seed of $iso ($images images, layers $base/$mid/$own MiB)" >&2
    go run ./preload/preloadtest/benchrelease -seed "$seed" -images "$images" -base-mb "$base" -mid-mb "$mid" \
      -own-mb "$own" -list "$dir/bundle/common/images-lists/bench-$seed.txt" \
      | zstd -q -3 -T0 -o "$dir/bundle/common/images/bench-$seed.tar.zst"
    printf '  - list: /common/images-lists/bench-%s.txt\n    archive: /common/images/bench-%s.tar.zst\n' "$seed" "$seed" \
      >>"$dir/bundle/metadata.yaml"
  done
  printf 'harvester: v0.0.0-bench\nkubernetes: v1.32.7+rke2r1\n' >"$dir/harvester-release.yaml"
  xorriso -abort_on FAILURE -as mkisofs -quiet -R -J -o "$iso.tmp" "$dir" 2>/dev/null
  mv "$iso.tmp" "$iso"
}

scenarios=()
for s in $SCENARIOS; do
  case $s in
  node)
    node_dir=$CACHE/node-$NODE_MB
    make_release "$node_dir" "$node_dir.iso" "100 1 $((NODE_MB * 64 / 100)) $((NODE_MB * 27 / 100)) $((NODE_MB * 9 / 100))" \
      "101 4 30 30 30" ;;
  one)
    one_dir=$CACHE/one-$IMAGES-$BASE_MB-$MID_MB-$OWN_MB
    make_release "$one_dir" "$one_dir.iso" "0 $IMAGES $BASE_MB $MID_MB $OWN_MB" ;;
  split)
    [ "$SPLIT" -gt 1 ] || continue
    per=$(( (IMAGES + SPLIT - 1) / SPLIT ))
    split_dir=$CACHE/split-$SPLIT-$per-$((BASE_MB / SPLIT))-$((MID_MB / SPLIT))-$OWN_MB
    specs=()
    for i in $(seq 0 $((SPLIT - 1))); do specs+=("$i $per $((BASE_MB / SPLIT)) $((MID_MB / SPLIT)) $OWN_MB"); done
    make_release "$split_dir" "$split_dir.iso" "${specs[@]}" ;;
  *) echo "bench-preload: unknown scenario $s" >&2; exit 1 ;;
  esac
  scenarios+=("$s")
done

work=$(mktemp -d /tmp/bench-preload.XXXXXX)
pid=""
cdir=""
# stop_containerd: stops the daemon and removes its root (gigabytes of blobs and snapshots).
stop_containerd() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; pid=""; fi
  if [ -n "$cdir" ]; then
    grep -o "$cdir/state/[^ ]*" /proc/mounts 2>/dev/null | xargs -r -n1 umount 2>/dev/null || true
    rm -rf "$cdir"; cdir=""
  fi
}
cleanup() { stop_containerd; rm -rf "$work"; }
trap cleanup EXIT

# start_containerd NAME: a fresh daemon under $work/NAME; sets $sock and $pid.
start_containerd() {
  cdir=$work/$1
  sock=$cdir/c.sock
  containerd_run "$cdir"
  pid=$containerd_pid
  containerd_wait "$cdir" "bench-preload: containerd"
}

# /usr/bin/time writes "peak-RSS-KiB user-seconds system-seconds" into the file it is given.
TIMEFMT='%M %U %S'
kib_of() { tail -1 "$1" | awk '{print $1}'; }
cpu_of() { tail -1 "$1" | awk '{printf "%.2f", $2 + $3}'; }
bench_images() { ctr -a "$sock" -n k8s.io images ls -q | grep -c '/rancher/bench-' || true; }
archives_of() { local dir=${1}_dir; ls "${!dir}"/bundle/common/images/*.tar.zst; }
iso_of() { local dir=${1}_dir; echo "${!dir}.iso"; }

# Each run appends one line to $work/SCENARIO.KIND; the first field is the time that ranks it.
# run_pipeline SCENARIO ROUND: "seconds peak-RSS-KiB cpu-seconds images" to .pipeline.
run_pipeline() {
  local t0 t1 a rss=0 cpu=0 r
  start_containerd "$1-pipeline-$2"
  t0=$(now)
  for a in $(archives_of "$1"); do
    /usr/bin/time -f "$TIMEFMT" -o "$work/zstdcat.rss" zstdcat "$a" \
      | /usr/bin/time -f "$TIMEFMT" -o "$work/ctr.rss" ctr -a "$sock" -n k8s.io images import --no-unpack - >"$work/ctr.out"
    r=$(( $(kib_of "$work/zstdcat.rss") + $(kib_of "$work/ctr.rss") ))
    rss=$(( rss > r ? rss : r ))
    cpu=$(awk -v c="$cpu" -v a="$(cpu_of "$work/zstdcat.rss")" -v b="$(cpu_of "$work/ctr.rss")" 'BEGIN { printf "%.2f", c + a + b }')
  done
  t1=$(now)
  echo "$(elapsed "$t0" "$t1") $rss $cpu $(bench_images)" >>"$work/$1.pipeline"
  stop_containerd
}
# run_pipeline_unpack SCENARIO ROUND: as run_pipeline with ctr's unpack (its default), to
# .pipeunpack.
run_pipeline_unpack() {
  local t0 t1 a
  start_containerd "$1-pipeunpack-$2"
  t0=$(now)
  for a in $(archives_of "$1"); do
    zstdcat "$a" | ctr -a "$sock" -n k8s.io images import --snapshotter overlayfs - >"$work/ctr.out"
  done
  t1=$(now)
  echo "$(elapsed "$t0" "$t1") 0 0 $(bench_images)" >>"$work/$1.pipeunpack"
  stop_containerd
}
# run_floor SCENARIO: "seconds" to .floor: every archive decoded to a file on the disk
# containerd writes to, then synced.
run_floor() {
  local t0 t1 a i=0
  mkdir -p "$work/floor"
  t0=$(now)
  for a in $(archives_of "$1"); do zstdcat -q "$a" >"$work/floor/$i.tar"; i=$((i + 1)); done
  sync "$work"/floor/*.tar
  t1=$(now)
  rm -rf "$work/floor"
  echo "$(elapsed "$t0" "$t1")" >>"$work/$1.floor"
}
# first_start: creates one container of every bench image (ctr unpacks what is not unpacked);
# prints the seconds it took.
first_start() {
  local t0 t1 img i=0
  t0=$(now)
  for img in $(ctr -a "$sock" -n k8s.io images ls -q | grep '/rancher/bench-'); do
    ctr -a "$sock" -n k8s.io containers create --snapshotter overlayfs "$img" "bench-$i" >/dev/null
    i=$((i + 1))
  done
  t1=$(now)
  elapsed "$t0" "$t1"
}
# run_preload SCENARIO ROUND KIND [FLAGS...]: "seconds peak-RSS-KiB cpu-seconds images" to .KIND;
# for KIND unpack and nounpack also the first start, "... first-start-seconds". KIND plain also
# times the warm re-run, to .warm.
run_preload() {
  local s=$1 round=$2 kind=$3 t0 t1 line
  shift 3
  start_containerd "$s-$kind-$round"
  t0=$(now)
  /usr/bin/time -f "$TIMEFMT" -o "$work/preload.rss" "$BIN" preload --iso "$(iso_of "$s")" --containerd-sock "$sock" \
    --concurrency "$CONCURRENCY" "$@" >"$work/preload.out"
  t1=$(now)
  line="$(elapsed "$t0" "$t1") $(kib_of "$work/preload.rss") $(cpu_of "$work/preload.rss") $(bench_images)"
  if [ "$kind" = unpack ] || [ "$kind" = nounpack ]; then line="$line $(first_start)"; fi
  echo "$line" >>"$work/$s.$kind"
  if [ "$kind" = plain ]; then
    # The warm re-run: everything is present, nothing is read.
    t0=$(now)
    /usr/bin/time -f "$TIMEFMT" -o "$work/warm.rss" "$BIN" preload --iso "$(iso_of "$s")" --containerd-sock "$sock" >"$work/warm.out"
    t1=$(now)
    if grep -q '^import' "$work/warm.out" || ! grep -q '^skip' "$work/warm.out"; then
      echo "bench-preload: the warm run did not skip every archive:" >&2; cat "$work/warm.out" >&2; exit 1
    fi
    echo "$(elapsed "$t0" "$t1") $(kib_of "$work/warm.rss")" >>"$work/$s.warm"
  fi
  stop_containerd
}
# workload: the CPU-bound neighbour of the throttle test, one sha256sum of BENCH_WORK_MB MiB per
# core, all at once; prints its seconds.
workload() {
  local t0 t1 i pids=()
  t0=$(now)
  for i in $(seq 1 "$(nproc)"); do head -c "$((WORK_MB << 20))" /dev/zero | sha256sum >/dev/null & pids+=($!); done
  wait "${pids[@]}"
  t1=$(now)
  elapsed "$t0" "$t1"
}
# run_beside SCENARIO KIND [FLAGS...]: preload (--unpack=false, FLAGS) and the workload started
# together; "preload-seconds cpu-seconds workload-seconds" to .KIND.
run_beside() {
  local s=$1 kind=$2 t0 t1 wpid
  shift 2
  start_containerd "$s-$kind"
  workload >"$work/workload.out" &
  wpid=$!
  t0=$(now)
  /usr/bin/time -f "$TIMEFMT" -o "$work/preload.rss" "$BIN" preload --iso "$(iso_of "$s")" --containerd-sock "$sock" \
    --unpack=false "$@" >"$work/preload.out"
  t1=$(now)
  wait "$wpid"
  echo "$(elapsed "$t0" "$t1") $(cpu_of "$work/preload.rss") $(cat "$work/workload.out")" >>"$work/$s.$kind"
  stop_containerd
}

for s in "${scenarios[@]}"; do
  # Every side reads from the page cache.
  cat $(archives_of "$s") "$(iso_of "$s")" >/dev/null
  for round in $(seq 1 "$ROUNDS"); do
    echo "bench-preload: $s: round $round of $ROUNDS" >&2
    sides=(pipeline floor plain)
    [ "$s" = node ] && sides+=(nounpack unpack ctrunpack pipeunpack)
    [ $((round % 2)) -eq 0 ] && sides=($(printf '%s\n' "${sides[@]}" | tac))
    for side in "${sides[@]}"; do
      case $side in
      pipeline) run_pipeline "$s" "$round" ;;
      floor) run_floor "$s" ;;
      plain) run_preload "$s" "$round" plain --unpack=false ;;
      nounpack) run_preload "$s" "$round" nounpack --unpack=false ;;
      unpack) run_preload "$s" "$round" unpack --unpack ;;
      ctrunpack) run_preload "$s" "$round" ctrunpack --unpack --one-pass=false ;;
      pipeunpack) run_pipeline_unpack "$s" "$round" ;;
      esac
    done
  done
  if [ "$s" = node ] && [ "$THROTTLE_MB" -gt 0 ]; then
    echo "bench-preload: $s: throttle" >&2
    workload >"$work/alone"
    run_beside "$s" beside
    run_beside "$s" throttled --max-bytes-per-second "$((THROTTLE_MB << 20))" --nice 19
  fi
done

# best COLUMN FILE: field COLUMN of the fastest run; maxcol COLUMN FILE: the largest value.
best() { sort -n -k1,1 "$2" | head -1 | awk -v c="$1" '{print $c}'; }
maxcol() { awk -v c="$1" 'BEGIN {m = 0} $c > m {m = $c} END {print m}' "$2"; }
# bestsum A B FILE: the smallest sum of fields A and B over the runs.
bestsum() { awk -v a="$1" -v b="$2" 'NR == 1 || $a + $b < m {m = $a + $b} END {printf "%.3f", m}' "$3"; }
mbps() { awk -v n="$1" -v s="$2" 'BEGIN { printf "%.1f", n / 1048576 / s }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
echo "bench-preload: runs (seconds peak-RSS-KiB cpu-seconds images [first-start-seconds]):" >&2
lines=()
for s in "${scenarios[@]}"; do
  for k in pipeline floor plain nounpack unpack ctrunpack pipeunpack beside throttled; do
    [ -f "$work/$s.$k" ] && sed "s/^/  $s $k /" "$work/$s.$k" >&2
  done
  bytes=$(cat $(archives_of "$s") | wc -c)
  tarbytes=$(for a in $(archives_of "$s"); do zstdcat -q "$a" | wc -c; done | awk '{n += $1} END {print n}')
  narch=$(archives_of "$s" | wc -l)
  dir=${s}_dir
  listed=$(cat "${!dir}"/bundle/common/images-lists/*.txt | grep -c .)
  p_cold=$(best 1 "$work/$s.pipeline"); p_cpu=$(best 3 "$work/$s.pipeline"); p_rss=$(maxcol 2 "$work/$s.pipeline"); p_img=$(best 4 "$work/$s.pipeline")
  u_cold=$(best 1 "$work/$s.plain"); u_cpu=$(best 3 "$work/$s.plain"); u_rss=$(maxcol 2 "$work/$s.plain"); u_img=$(best 4 "$work/$s.plain")
  floor=$(best 1 "$work/$s.floor")
  warm=$(best 1 "$work/$s.warm"); warm_rss=$(maxcol 2 "$work/$s.warm")
  for k in pipeline plain nounpack unpack ctrunpack pipeunpack; do
    [ -f "$work/$s.$k" ] || continue
    if awk -v want="$listed" '$4 != want {bad = 1} END {exit !bad}' "$work/$s.$k"; then
      echo "bench-preload: $s: a $k run did not import all $listed images" >&2; exit 1
    fi
  done
  speedup=$(ratio "$p_cold" "$u_cold"); overfloor=$(ratio "$u_cold" "$floor")
  cat <<EOF2

$s: $narch archive(s), $bytes bytes compressed, $tarbytes bytes of tar, $listed images
  pipeline (zstdcat | ctr import --no-unpack): ${p_cold}s cold (best of $ROUNDS), $(mbps "$tarbytes" "$p_cold") MiB/s of tar, CPU ${p_cpu}s, peak RSS $((p_rss / 1024)) MiB (zstdcat + ctr)
  upgrade-repo preload --unpack=false:         ${u_cold}s cold (best of $ROUNDS), $(mbps "$tarbytes" "$u_cold") MiB/s of tar, CPU ${u_cpu}s, peak RSS $((u_rss / 1024)) MiB
  floor (zstdcat > file, synced):               ${floor}s, $(mbps "$tarbytes" "$floor") MiB/s of tar
  speed-up ${speedup}x the pipeline; ${overfloor}x the floor; warm re-run ${warm}s (peak RSS $((warm_rss / 1024)) MiB)
EOF2
  lines+=(
    "${s}_archives=$narch" "${s}_archive_bytes=$bytes" "${s}_tar_bytes=$tarbytes" "${s}_images=$listed"
    "${s}_pipeline_cold_seconds=$p_cold" "${s}_preload_cold_seconds=$u_cold" "${s}_floor_seconds=$floor"
    "${s}_preload_speedup=$speedup" "${s}_preload_over_floor=$overfloor"
    "${s}_preload_warm_seconds=$warm"
    "${s}_pipeline_cpu_seconds=$p_cpu" "${s}_preload_cpu_seconds=$u_cpu"
    "${s}_pipeline_peak_rss_bytes=$((p_rss * 1024))" "${s}_preload_peak_rss_bytes=$((u_rss * 1024))"
    "${s}_preload_warm_peak_rss_bytes=$((warm_rss * 1024))"
  )
  if [ -f "$work/$s.unpack" ]; then
    n_pre=$(best 1 "$work/$s.nounpack"); n_start=$(sort -n -k5,5 "$work/$s.nounpack" | head -1 | awk '{print $5}'); n_sum=$(bestsum 1 5 "$work/$s.nounpack")
    w_pre=$(best 1 "$work/$s.unpack"); w_start=$(sort -n -k5,5 "$work/$s.unpack" | head -1 | awk '{print $5}'); w_sum=$(bestsum 1 5 "$work/$s.unpack")
    w_rss=$(maxcol 2 "$work/$s.unpack")
    c_pre=$(best 1 "$work/$s.ctrunpack"); c_start=$(sort -n -k5,5 "$work/$s.ctrunpack" | head -1 | awk '{print $5}')
    pu=$(best 1 "$work/$s.pipeunpack")
    cat <<EOF2
  unpack: preload --unpack=false ${n_pre}s + first start of every image ${n_start}s = ${n_sum}s (best sum)
          preload --unpack       ${w_pre}s + first start of every image ${w_start}s = ${w_sum}s (best sum), peak RSS $((w_rss / 1024)) MiB
          preload --unpack (one pass) over --unpack=false: $(ratio "$w_pre" "$n_pre")x
          preload --unpack --one-pass=false (containerd unpacks) ${c_pre}s ($(ratio "$c_pre" "$n_pre")x --unpack=false), first start ${c_start}s
          zstdcat | ctr images import (unpacks) ${pu}s; preload --unpack $(ratio "$w_pre" "$pu")x that
EOF2
    lines+=(
      "${s}_nounpack_preload_seconds=$n_pre" "${s}_nounpack_first_start_seconds=$n_start" "${s}_nounpack_total_seconds=$n_sum"
      "${s}_unpack_preload_seconds=$w_pre" "${s}_unpack_first_start_seconds=$w_start" "${s}_unpack_total_seconds=$w_sum"
      "${s}_unpack_peak_rss_bytes=$((w_rss * 1024))"
      "${s}_unpack_over_nounpack=$(ratio "$w_pre" "$n_pre")"
      "${s}_containerd_unpack_preload_seconds=$c_pre" "${s}_containerd_unpack_over_nounpack=$(ratio "$c_pre" "$n_pre")"
      "${s}_pipeline_unpack_seconds=$pu" "${s}_unpack_over_pipeline_unpack=$(ratio "$w_pre" "$pu")"
    )
  fi
  if [ -f "$work/$s.throttled" ]; then
    alone=$(cat "$work/alone")
    read -r b_pre b_cpu b_work <"$work/$s.beside"
    read -r t_pre t_cpu t_work <"$work/$s.throttled"
    cat <<EOF2
  throttle: workload (sha256sum of $WORK_MB MiB on each of $(nproc) cores) alone ${alone}s; beside preload ${b_work}s (preload ${b_pre}s, CPU ${b_cpu}s);
            beside preload --max-bytes-per-second $((THROTTLE_MB << 20)) --nice 19 ${t_work}s (preload ${t_pre}s, CPU ${t_cpu}s, $(mbps "$tarbytes" "$t_pre") MiB/s of tar)
EOF2
    lines+=(
      "${s}_workload_alone_seconds=$alone" "${s}_workload_beside_preload_seconds=$b_work" "${s}_preload_beside_workload_seconds=$b_pre"
      "${s}_workload_beside_throttled_seconds=$t_work" "${s}_throttled_preload_seconds=$t_pre" "${s}_throttle_bytes_per_second=$((THROTTLE_MB << 20))"
    )
  fi
done
echo
printf '%s\n' "rounds=$ROUNDS" "concurrency=$CONCURRENCY" "load_average=$(cut -d' ' -f1 /proc/loadavg)" "${lines[@]}"
