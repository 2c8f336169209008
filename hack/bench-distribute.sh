#!/usr/bin/env bash
# bench-distribute.sh: agents that all need one release ISO, sharing it over gossip, against one
# agent alone and against agents that each download it from the origin alone.
#
# A release ISO of BENCH_ISO_SIZE is packed (random, incompressible content written out in full:
# no sparse file) into a temporary directory that is removed at the end, unless BENCH_ISO names an
# existing ISO to use. The origin (hack/bench-distribute/origin.go) serves it with an egress budget
# shared by all clients (BENCH_ORIGIN_MBPS, 50 MB/s by default, as an origin across a WAN link)
# and counts every byte it sends. Agents run as separate processes on their own loopback
# addresses, 127.0.0.2 to 127.0.0.(N+1), each with its own cache directory (a full copy of the ISO
# each: N agents need N times the ISO's size of free disk). Runs:
#   one:         a single agent alone (the time for one node);
#   baseline-N:  N agents without gossip, each downloading the whole ISO from the origin, for each
#                N of BENCH_NODES (BENCH_BASELINE=run, the default), or modelled as N times the
#                time of one node and N times the ISO (BENCH_BASELINE=model): the origin's budget
#                is shared, so N lone downloads take N times as long;
#   shared-N:    N agents joined in one gossip ring, sharing chunks, for each N of BENCH_NODES.
# The time of a run is from the start of the agents until every one reports a verified ISO
# ("ready": true on /v1/status). For each shared run, a table per agent: bytes served to peers,
# from the origin and from peers, peak RSS (VmHWM), CPU seconds (user + system) and gossip bytes
# sent (upgrade_repo_peer_gossip_sent_bytes_total). Ends with name=value lines.
#
# Knobs: BENCH_NODES (a list, "5"), BENCH_ISO_SIZE (556MiB), BENCH_ISO (an existing ISO),
# BENCH_BASELINE (run or model), BENCH_ORIGIN_MBPS (50), BENCH_TMP (where the temporary directory
# goes, default $TMPDIR or /tmp), BIN (bin/upgrade-repo).
set -euo pipefail
cd "$(dirname "$0")/.."
source hack/bench-lib.sh
BIN=$(realpath "${BIN:-bin/upgrade-repo}")
NODES_LIST=${BENCH_NODES:-5}
MBPS=${BENCH_ORIGIN_MBPS:-50}
ISO_SIZE=${BENCH_ISO_SIZE:-556MiB}
BASELINE=${BENCH_BASELINE:-run}
ORIGIN_ADDR=127.0.0.1:19400
HTTP_PORT=19480
GOSSIP_PORT=19446
[ -x "$BIN" ] || { echo "bench-distribute: $BIN missing (make build)" >&2; exit 1; }
command -v xorriso >/dev/null || { echo "bench-distribute: xorriso missing (make deps)" >&2; exit 1; }
command -v curl >/dev/null || { echo "bench-distribute: curl missing" >&2; exit 1; }
case $BASELINE in run | model) ;; *) echo "bench-distribute: BENCH_BASELINE is run or model" >&2; exit 1 ;; esac
WORK=$(mktemp -d "${BENCH_TMP:-${TMPDIR:-/tmp}}/bench-distribute.XXXXXX")

PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  PIDS=()
  rm -rf "$WORK"
}
trap cleanup EXIT

if [ -n "${BENCH_ISO:-}" ]; then
  ISO=$(realpath "$BENCH_ISO")
else
  ISO=$WORK/release.iso
  # The images and boot files take about 57 MiB; rootfs.squashfs makes up the rest.
  want=$(numfmt --from=iec "$(sed 's/i\?B$//' <<<"$ISO_SIZE")")
  echo "bench-distribute: packing a release ISO of about $ISO_SIZE into $WORK" >&2
  "$BIN" release pack --out "$ISO" --images 6 --layer-size 4MiB --rootfs-size $((want - (57 << 20))) >/dev/null
fi
SIZE=$(stat -c %s "$ISO")
SUM=$(sha512sum "$ISO" | cut -d' ' -f1)
go build -o "$WORK/origin" ./hack/bench-distribute

"$WORK/origin" --listen "$ORIGIN_ADDR" --file "$ISO" --rate $((MBPS * 1000 * 1000)) &
PIDS+=($!)
for _ in $(seq 50); do curl -fs "http://$ORIGIN_ADDR/stats" >/dev/null && break; sleep 0.1; done

now() { date +%s.%N; }

# metric PROM NAME: the sum of the samples of metric NAME (any labels) in the text PROM.
metric() { awk -v n="$2" '$1 == n || index($1, n "{") == 1 { s += $2 } END { printf "%.0f\n", s }' <<<"$1"; }

# run NAME COUNT JOIN(yes|no): start COUNT agents, wait until all are ready, write the per-agent
# figures to $WORK/NAME/agents and print "<seconds> <origin bytes>".
run() {
  local name=$1 count=$2 join=$3 i seeds="" start ready=0 end bytes
  curl -fs -X POST "http://$ORIGIN_ADDR/reset" >/dev/null
  for i in $(seq 2 $((count + 1))); do seeds+="${seeds:+,}127.0.0.$i:$GOSSIP_PORT"; done
  local agents=()
  mkdir -p "$WORK/$name"
  start=$(now)
  for i in $(seq 2 $((count + 1))); do
    local dir=$WORK/$name/node$i
    mkdir -p "$dir"
    local args=(agent --node-name "node$i" --listen "127.0.0.$i:$HTTP_PORT" --gossip-listen "127.0.0.$i:$GOSSIP_PORT"
      --cache-dir "$dir" --iso-url "http://$ORIGIN_ADDR/release.iso" --iso-checksum "sha512:$SUM")
    [ "$join" = yes ] && args+=(--join "$seeds")
    "$BIN" "${args[@]}" >"$WORK/$name/node$i.log" 2>&1 &
    agents+=($!)
    PIDS+=($!)
  done
  local deadline=$(($(date +%s) + 1800))
  while [ "$ready" -lt "$count" ]; do
    ready=0
    for i in $(seq 2 $((count + 1))); do
      curl -fs "http://127.0.0.$i:$HTTP_PORT/v1/status" 2>/dev/null | grep -q '"ready": true' && ready=$((ready + 1))
    done
    [ "$(date +%s)" -lt "$deadline" ] || {
      echo "bench-distribute: $name: only $ready of $count ready after 1800s" >&2
      tail -n 5 "$WORK/$name"/node*.log >&2
      exit 1
    }
    [ "$ready" -lt "$count" ] && sleep 0.2
  done
  end=$(now)
  bytes=$(curl -fs "http://$ORIGIN_ADDR/stats" | sed 's/.*"bytes":\([0-9]*\).*/\1/')
  : >"$WORK/$name/agents"
  local k=0 prom
  for i in $(seq 2 $((count + 1))); do
    prom=$(curl -fs "http://127.0.0.$i:$HTTP_PORT/metrics")
    echo "node$i $(metric "$prom" upgrade_repo_peer_served_bytes_total) \
$(metric "$prom" upgrade_repo_peer_fetched_bytes_total'{source="origin"}') \
$(metric "$prom" upgrade_repo_peer_fetched_bytes_total'{source="peer"}') \
$(proc "${agents[$k]}") $(metric "$prom" upgrade_repo_peer_gossip_sent_bytes_total)" >>"$WORK/$name/agents"
    k=$((k + 1))
  done
  for i in "${agents[@]}"; do kill "$i" 2>/dev/null || true; done
  for i in "${agents[@]}"; do wait "$i" 2>/dev/null || true; done
  grep -h "ISO fetched and verified" "$WORK/$name"/node*.log | sed 's/.*msg=/  /' >&2 || true
  rm -rf "${WORK:?}/$name"/node*/
  echo "$(echo "$end - $start" | bc -l) $bytes"
}

# table NAME: the per-agent table of a run and its spread, on stdout.
table() {
  printf '  %-7s %14s %14s %14s %9s %8s %12s\n' agent "served to peers" "from origin" "from peers" "peak RSS" "CPU s" "gossip sent"
  awk -v size="$SIZE" '{
    printf "  %-7s %13.2fx %13.2fx %13.2fx %6.0f MiB %8.1f %9.0f KiB\n", $1, $2 / size, $3 / size, $4 / size, $5, $6, $7 / 1024
    n++; s += $2; if ($2 > mx) mx = $2; if (n == 1 || $2 < mn) mn = $2
    if ($5 > rss) rss = $5; cpu += $6; g += $7
  } END {
    printf "  served to peers: min %.2fx, mean %.2fx, max %.2fx the ISO (max/mean %.2f); peak RSS max %.0f MiB; CPU %.1f s in all; gossip %.0f KiB per agent\n",
      mn / size, s / n / size, mx / size, (s ? mx / (s / n) : 0), rss, cpu, g / n / 1024
  }' "$WORK/$1/agents"
}

echo "bench-distribute: ISO $SIZE bytes, nodes $NODES_LIST, origin egress budget $MBPS MB/s, baseline $BASELINE" >&2
read -r T1 B1 < <(run one 1 no)
printf 'ISO %d bytes (%.2f GiB), origin egress budget %d MB/s\n' "$SIZE" "$(echo "$SIZE / 2^30" | bc -l)" "$MBPS"
printf 'one node alone: %.2fs, origin sent %.2fx the ISO\n' "$T1" "$(echo "$B1 / $SIZE" | bc -l)"
table one
summary=(
  "$(printf 'iso_bytes=%d' "$SIZE")"
  "$(printf 'origin_mbps=%d' "$MBPS")"
  "$(printf 'one_node_seconds=%.2f' "$T1")"
  "$(printf 'one_node_peak_rss_mib=%.0f' "$(awk '{ print $5 }' "$WORK/one/agents")")"
)
for n in $NODES_LIST; do
  if [ "$BASELINE" = run ]; then
    read -r TB BB < <(run "baseline-$n" "$n" no)
    how=measured
  else
    TB=$(echo "$n * $T1" | bc -l)
    BB=$((n * B1))
    how="modelled as $n x one node"
  fi
  printf '%d nodes, each from the origin alone (%s): %.2fs (%.2fx one node), origin sent %.2fx\n' \
    "$n" "$how" "$TB" "$(echo "$TB / $T1" | bc -l)" "$(echo "$BB / $SIZE" | bc -l)"
  read -r TS BS < <(run "shared-$n" "$n" yes)
  printf '%d nodes sharing over gossip: %.2fs (%.2fx one node), origin sent %.2fx\n' \
    "$n" "$TS" "$(echo "$TS / $T1" | bc -l)" "$(echo "$BS / $SIZE" | bc -l)"
  table "shared-$n"
  summary+=(
    "$(printf 'nodes_%d_baseline_seconds=%.2f' "$n" "$TB")"
    "$(printf 'nodes_%d_baseline_origin_egress_ratio=%.2f' "$n" "$(echo "$BB / $SIZE" | bc -l)")"
    "$(printf 'nodes_%d_shared_seconds=%.2f' "$n" "$TS")"
    "$(printf 'nodes_%d_origin_egress_ratio=%.3f' "$n" "$(echo "$BS / $SIZE" | bc -l)")"
    "$(printf 'nodes_%d_all_nodes_time_ratio=%.2f' "$n" "$(echo "$TS / $T1" | bc -l)")"
    "$(awk -v n="$n" '{ if ($5 > r) r = $5 } END { printf "nodes_%d_peak_rss_mib_max=%.0f", n, r }' "$WORK/shared-$n/agents")"
    "$(awk -v n="$n" -v size="$SIZE" '{ s += $2; if ($2 > m) m = $2; c++ } END { printf "nodes_%d_served_max_over_mean=%.2f", n, (s ? m / (s / c) : 0) }' "$WORK/shared-$n/agents")"
    "$(awk -v n="$n" '{ c += $6; k++ } END { printf "nodes_%d_cpu_seconds_per_agent=%.1f", n, c / k }' "$WORK/shared-$n/agents")"
    "$(awk -v n="$n" '{ g += $7; k++ } END { printf "nodes_%d_gossip_kib_per_agent=%.0f", n, g / k / 1024 }' "$WORK/shared-$n/agents")"
  )
done
printf '%s\n' "${summary[@]}"
