#!/usr/bin/env bash
# bench-remote.sh: what knowing a release costs, read from its ISO's URL through Range requests,
# against what it costs today (the whole ISO downloaded first), side by side in one run, from
# nginx on loopback (Debian's, one worker, sendfile on, an access log of each request's status,
# bytes sent and Range).
#
# A Harvester-layout release ISO of BENCH_ISO_SIZE (default 6GiB: images in their archives, image
# lists, the metadata, and a rootfs.squashfs of random bytes making up the rest) is packed by
# `release pack` into a temporary directory that is removed at the end, unless BENCH_ISO names an
# existing ISO. Runs, each measured by the bytes and requests nginx served and the wall time:
#   metadata:  upgrade-repo iso cat URL /harvester-release.yaml (the release's versions);
#   plan:      upgrade-repo plan --release URL -o json (the metadata, every image list and the
#              archives' sizes: what the sequencer and `plan` judge);
#   download:  curl -o of the whole ISO, what judging the release needs today.
# Ends with name=value lines.
#
# Knobs: BENCH_ISO_SIZE (6GiB), BENCH_ISO (an existing ISO), BENCH_TMP (where the temporary
# directory goes, default $TMPDIR or /tmp), BIN (bin/upgrade-repo).
set -euo pipefail
cd "$(dirname "$0")/.."
source hack/bench-lib.sh
BIN=$(realpath "${BIN:-bin/upgrade-repo}")
ISO_SIZE=${BENCH_ISO_SIZE:-6GiB}
origin_bench bench-remote xorriso curl nginx

origin_iso bench-remote

nginx_origin '$status $bytes_sent "$http_range"'
URL=http://127.0.0.1:$nginx_port/release.iso
for _ in $(seq 50); do curl -sf -o /dev/null -r 0-0 "$URL" && break; sleep 0.1; done
LOG=$WORK/nginx/logs/access.log

# measure NAME CMD...: runs CMD, then prints NAME's requests, bytes sent and seconds.
measure() {
  local name=$1; shift
  local before t0 t1
  sleep 0.2 # nginx writes its log line once the response is done
  before=$(wc -l < "$LOG")
  t0=$(date +%s.%N)
  "$@" > "$WORK/$name.out" 2> "$WORK/$name.err" || true
  t1=$(date +%s.%N)
  sleep 0.2
  tail -n +"$((before + 1))" "$LOG" | awk -v n="$name" -v s="$(echo "$t1 - $t0" | bc -l)" \
    '{ r++; b += $2 } END { printf "%s_requests=%d\n%s_bytes=%.0f\n%s_seconds=%.3f\n", n, r, n, b, n, s }'
}

{
  measure metadata "$BIN" iso cat "$URL" /harvester-release.yaml
  measure plan "$BIN" plan --current v0.0.1 --release "$URL" -o json
  measure download curl -sf -o "$WORK/download.iso" "$URL"
} | tee "$WORK/results"
rm -f "$WORK/download.iso"
grep -q '"archives"' "$WORK/plan.out" || { echo "bench-remote: plan printed no image archives:" >&2; cat "$WORK/plan.out" "$WORK/plan.err" >&2; exit 1; }
# shellcheck disable=SC1090 # the name=value lines just written
source "$WORK/results"
echo "iso_bytes=$SIZE"
echo "archives=$(grep -o '"archive":' "$WORK/plan.out" | wc -l)"
echo "plan_bytes_ratio=$(echo "scale=6; $plan_bytes / $download_bytes" | bc -l)"
echo "plan_time_ratio=$(echo "scale=4; $plan_seconds / $download_seconds" | bc -l)"
