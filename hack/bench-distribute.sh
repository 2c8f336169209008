#!/usr/bin/env bash
# bench-distribute.sh: five agents that all need one release ISO, sharing it over gossip, against
# five agents that each download it from the origin alone.
#
# A release ISO of >= 512 MB is packed once into .cache/bench-distribute. The origin
# (hack/bench-distribute/origin.go) serves it with an egress budget shared by all clients
# (BENCH_ORIGIN_MBPS, 50 MB/s by default, as an origin across a WAN link) and counts every byte it
# sends. Agents run as separate processes on their own loopback addresses, 127.0.0.2 to
# 127.0.0.(N+1), each with its own cache directory. Three runs:
#   one:       a single agent alone (the time for one node);
#   baseline:  N agents without gossip, each downloading the whole ISO from the origin;
#   shared:    N agents joined in one gossip ring, sharing chunks.
# The time of a run is from the start of the agents until every one reports a verified ISO
# ("ready": true on /v1/status). Ends with name=value lines; origin_egress_ratio and
# all_nodes_time_ratio are those of the shared run (bytes sent / ISO size, time / time for one).
#
# Knobs: BENCH_NODES (5), BENCH_ORIGIN_MBPS (50), BENCH_ROOTFS (520MiB), BIN (bin/upgrade-repo).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin/upgrade-repo}
NODES=${BENCH_NODES:-5}
MBPS=${BENCH_ORIGIN_MBPS:-50}
ROOTFS=${BENCH_ROOTFS:-520MiB}
CACHE=.cache/bench-distribute
ORIGIN_ADDR=127.0.0.1:19400
HTTP_PORT=19480
GOSSIP_PORT=19446
[ -x "$BIN" ] || { echo "bench-distribute: $BIN missing (make build)" >&2; exit 1; }
command -v xorriso >/dev/null || { echo "bench-distribute: xorriso missing (make deps)" >&2; exit 1; }
command -v curl >/dev/null || { echo "bench-distribute: curl missing" >&2; exit 1; }
mkdir -p "$CACHE"
ISO=$CACHE/release.iso
if [ ! -s "$ISO" ]; then
  echo "bench-distribute: packing $ISO (rootfs $ROOTFS)" >&2
  "$BIN" release pack --out "$ISO.tmp" --images 6 --layer-size 4MiB --rootfs-size "$ROOTFS" >/dev/null
  mv "$ISO.tmp" "$ISO"
fi
SIZE=$(stat -c %s "$ISO")
[ "$SIZE" -ge $((512 << 20)) ] || { echo "bench-distribute: $ISO is only $SIZE bytes" >&2; exit 1; }
SUM=$(sha512sum "$ISO" | cut -d' ' -f1)
go build -o "$CACHE/origin" ./hack/bench-distribute

PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  PIDS=()
}
trap cleanup EXIT

"$CACHE/origin" --listen "$ORIGIN_ADDR" --file "$ISO" --rate $((MBPS * 1000 * 1000)) &
PIDS+=($!)
for _ in $(seq 50); do curl -fs "http://$ORIGIN_ADDR/stats" >/dev/null && break; sleep 0.1; done

now() { date +%s.%N; }

# run NAME COUNT JOIN(yes|no): start COUNT agents, wait until all are ready, print
# "<seconds> <origin bytes>".
run() {
  local name=$1 count=$2 join=$3 i seeds="" start ready=0 end bytes
  curl -fs -X POST "http://$ORIGIN_ADDR/reset" >/dev/null
  for i in $(seq 2 $((count + 1))); do seeds+="${seeds:+,}127.0.0.$i:$GOSSIP_PORT"; done
  local agents=()
  start=$(now)
  for i in $(seq 2 $((count + 1))); do
    local dir=$CACHE/$name/node$i
    rm -rf "$dir" && mkdir -p "$dir"
    local args=(agent --node-name "node$i" --listen "127.0.0.$i:$HTTP_PORT" --gossip-listen "127.0.0.$i:$GOSSIP_PORT"
      --cache-dir "$dir" --iso-url "http://$ORIGIN_ADDR/release.iso" --iso-checksum "sha512:$SUM")
    [ "$join" = yes ] && args+=(--join "$seeds")
    "$BIN" "${args[@]}" >"$CACHE/$name/node$i.log" 2>&1 &
    agents+=($!)
    PIDS+=($!)
  done
  local deadline=$(( $(date +%s) + 900 ))
  while [ "$ready" -lt "$count" ]; do
    ready=0
    for i in $(seq 2 $((count + 1))); do
      curl -fs "http://127.0.0.$i:$HTTP_PORT/v1/status" 2>/dev/null | grep -q '"ready": true' && ready=$((ready + 1))
    done
    [ "$(date +%s)" -lt "$deadline" ] || { echo "bench-distribute: $name: only $ready of $count ready after 900s" >&2; exit 1; }
    [ "$ready" -lt "$count" ] && sleep 0.1
  done
  end=$(now)
  bytes=$(curl -fs "http://$ORIGIN_ADDR/stats" | sed 's/.*"bytes":\([0-9]*\).*/\1/')
  for i in "${agents[@]}"; do kill "$i" 2>/dev/null || true; done
  for i in "${agents[@]}"; do wait "$i" 2>/dev/null || true; done
  for i in $(seq 2 $((count + 1))); do rm -f "$CACHE/$name/node$i"/*.iso*; done
  echo "$(echo "$end - $start" | bc -l) $bytes"
}

echo "bench-distribute: ISO $SIZE bytes, $NODES nodes, origin egress budget $MBPS MB/s" >&2
read -r T1 B1 < <(run one 1 no)
printf 'one node alone:             %6.2fs  origin sent %d bytes (%.2fx)\n' "$T1" "$B1" "$(echo "$B1 / $SIZE" | bc -l)"
read -r TB BB < <(run baseline "$NODES" no)
printf '%d nodes, origin only:       %6.2fs  origin sent %d bytes (%.2fx)\n' "$NODES" "$TB" "$BB" "$(echo "$BB / $SIZE" | bc -l)"
read -r TS BS < <(run shared "$NODES" yes)
printf '%d nodes, sharing over gossip: %6.2fs  origin sent %d bytes (%.2fx)\n' "$NODES" "$TS" "$BS" "$(echo "$BS / $SIZE" | bc -l)"
grep -h "ISO fetched and verified" "$CACHE"/shared/node*.log | sed 's/.*msg=/  /' >&2 || true
printf 'iso_bytes=%d\n' "$SIZE"
printf 'nodes=%d\n' "$NODES"
printf 'origin_mbps=%d\n' "$MBPS"
printf 'one_node_seconds=%.2f\n' "$T1"
printf 'baseline_seconds=%.2f\n' "$TB"
printf 'baseline_origin_bytes=%d\n' "$BB"
printf 'baseline_origin_egress_ratio=%.2f\n' "$(echo "$BB / $SIZE" | bc -l)"
printf 'baseline_all_nodes_time_ratio=%.2f\n' "$(echo "$TB / $T1" | bc -l)"
printf 'shared_seconds=%.2f\n' "$TS"
printf 'shared_origin_bytes=%d\n' "$BS"
printf 'origin_egress_ratio=%.2f\n' "$(echo "$BS / $SIZE" | bc -l)"
printf 'all_nodes_time_ratio=%.2f\n' "$(echo "$TS / $T1" | bc -l)"
