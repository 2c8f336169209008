#!/usr/bin/env bash
# bench-acquire.sh: `serve --iso-url` (download, verify, serve) against what an operator does by
# hand (`curl` from the same origin, then `sha512sum`), side by side in one run, from nginx on
# loopback (Debian's, one worker, sendfile on, an access log of the bytes it sent).
#
# A release ISO of BENCH_ISO_SIZE is packed (random, incompressible content written in full) into
# a temporary directory that is removed at the end, unless BENCH_ISO names an existing ISO. Runs,
# each REPEAT times (the best is reported) but resume, run once:
#   curl:        curl -o, then sha512sum of the file (the by-hand download and check);
#   curl|tee:    curl | tee file | sha512sum (the check overlapped with the download);
#   serve:       serve --iso-url --iso-checksum into an empty cache, until /readyz answers 200;
#   sha512sum:   sha512sum of the verified copy (the by-hand check at every start);
#   restart:     serve again on that cache, until /readyz (the record says the copy is unchanged);
#   resume:      serve into an empty cache, killed with SIGKILL once it holds half of the ISO,
#                then started again until /readyz: the origin's bytes over the ISO's size;
#   budget:      curl, then sha512sum, and serve, from an origin with an egress budget of
#                BENCH_ORIGIN_MBPS MB/s (hack/bench-distribute/origin.go), as across a WAN link.
# For serve, its CPU seconds (user + system) and peak RSS (VmHWM). Ends with name=value lines.
#
# Knobs: BENCH_ISO_SIZE (1GiB), BENCH_ISO (an existing ISO), REPEAT (3), BENCH_ORIGIN_MBPS (100;
# 0 skips the budget runs), BENCH_TMP (where the temporary directory goes, default $TMPDIR or
# /tmp), BIN (bin/upgrade-repo).
set -euo pipefail
cd "$(dirname "$0")/.."
source hack/bench-lib.sh
BIN=$(realpath "${BIN:-bin/upgrade-repo}")
ISO_SIZE=${BENCH_ISO_SIZE:-1GiB}
REPEAT=${REPEAT:-3}
MBPS=${BENCH_ORIGIN_MBPS:-100}
origin_bench bench-acquire xorriso curl nginx sha512sum

origin_iso bench-acquire
SUM=$(sha512sum "$WORK/origin/release.iso" | cut -d' ' -f1)

nginx_origin '$bytes_sent'
URL=http://127.0.0.1:$nginx_port/release.iso
for _ in $(seq 100); do curl -fsI "$URL" >/dev/null 2>&1 && break; sleep 0.1; done
curl -fsI "$URL" >/dev/null || { echo "bench-acquire: nginx does not serve $URL:" >&2; cat "$WORK/nginx/logs/error.log" >&2; exit 1; }

since() { echo "$(now) - $1" | bc -l; }
best() { printf '%s\n' "$@" | sort -g | head -1; }
# origin_bytes: every byte nginx sent so far (requests cut short included).
origin_bytes() { awk '{ s += $1 } END { printf "%.0f\n", s }' "$WORK/nginx/logs/access.log"; }

serve_pid=
# start_serve CACHE: start serve --iso-url on CACHE in the background (serve_pid, serve_port).
start_serve() {
  serve_port=$(pick_port)
  UPGRADE_REPO_LOG_LEVEL=warn "$BIN" serve --iso-url "$URL" --iso-checksum "sha512:$SUM" \
    --cache-dir "$1" --listen "127.0.0.1:$serve_port" 2>>"$WORK/serve.log" &
  serve_pid=$!
  PIDS+=("$serve_pid")
}
# wait_ready: wait until serve answers /readyz with 200; fails when it exits first.
wait_ready() {
  until curl -fs "http://127.0.0.1:$serve_port/readyz" >/dev/null 2>&1; do
    kill -0 "$serve_pid" 2>/dev/null || { echo "bench-acquire: serve exited; its log:" >&2; tail -20 "$WORK/serve.log" >&2; exit 1; }
    sleep 0.02
  done
}
stop_serve() { kill "$serve_pid"; wait "$serve_pid" 2>/dev/null || true; }

check() { [ "$(sha512sum "$1" | cut -d' ' -f1)" = "$SUM" ] || { echo "bench-acquire: $1 is not the ISO" >&2; exit 1; }; }

# by_hand: curl -o from $URL, then sha512sum of the file; its seconds in elapsed.
by_hand() {
  rm -f "$WORK/curl.iso"; sync
  local t
  t=$(now)
  curl -fsS -o "$WORK/curl.iso" "$URL"
  check "$WORK/curl.iso"
  elapsed=$(since "$t")
  rm -f "$WORK/curl.iso"
}

# serve_fresh: serve --iso-url from $URL into an empty cache until ready; its seconds in elapsed.
# serve is left running (serve_pid) for the caller to measure and stop.
serve_fresh() {
  rm -rf "$WORK/cache"; sync
  local t
  t=$(now)
  start_serve "$WORK/cache"
  wait_ready
  elapsed=$(since "$t")
}

curl_t=() tee_t=() serve_t=() sum_t=() restart_t=() rss=() cpu=()
for r in $(seq "$REPEAT"); do
  echo "bench-acquire: round $r of $REPEAT ($SIZE bytes)" >&2
  by_hand
  curl_t+=("$elapsed")

  sync
  t=$(now)
  got=$(curl -fsS "$URL" | tee "$WORK/curl.iso" | sha512sum | cut -d' ' -f1)
  [ "$got" = "$SUM" ]
  tee_t+=("$(since "$t")")
  rm -f "$WORK/curl.iso"

  serve_fresh
  serve_t+=("$elapsed")
  read -r m c < <(proc "$serve_pid")
  rss+=("$m") cpu+=("$c")
  stop_serve
  iso=$WORK/cache/$SUM.iso
  check "$iso"

  t=$(now)
  sha512sum "$iso" >/dev/null
  sum_t+=("$(since "$t")")

  t=$(now)
  start_serve "$WORK/cache"
  wait_ready
  restart_t+=("$(since "$t")")
  stop_serve
done

# resume: kill -9 at half, start again, count what the origin sent.
rm -rf "$WORK/cache"; sync
sleep 0.5 # nginx logs a request when it ends
before=$(origin_bytes)
start_serve "$WORK/cache"
fetched() {
  curl -fs "http://127.0.0.1:$serve_port/metrics" 2>/dev/null |
    awk '$1 ~ /^upgrade_repo_peer_fetched_bytes_total/ { s += $2 } END { printf "%.0f\n", s }'
}
until [ "$(fetched)" -ge $((SIZE / 2)) ]; do
  kill -0 "$serve_pid" 2>/dev/null || { echo "bench-acquire: serve ended before half of the ISO" >&2; exit 1; }
  sleep 0.02
done
kill -KILL "$serve_pid"; wait "$serve_pid" 2>/dev/null || true
t=$(now)
start_serve "$WORK/cache"
wait_ready
resume_t=$(since "$t")
stop_serve
check "$WORK/cache/$SUM.iso"
sleep 0.5 # nginx logs a request when it ends
sent=$(( $(origin_bytes) - before ))

# The same download from an origin with an egress budget, as across a WAN link.
wan_c=() wan_s=()
if [ "$MBPS" -gt 0 ]; then
  go build -o "$WORK/wan-origin" ./hack/bench-distribute
  wan_port=$(pick_port)
  "$WORK/wan-origin" --listen "127.0.0.1:$wan_port" --file "$WORK/origin/release.iso" --rate $((MBPS * 1000 * 1000)) &
  PIDS+=($!)
  URL=http://127.0.0.1:$wan_port/release.iso
  for _ in $(seq 100); do curl -fs "http://127.0.0.1:$wan_port/stats" >/dev/null 2>&1 && break; sleep 0.1; done
  for r in $(seq "$REPEAT"); do
    echo "bench-acquire: round $r of $REPEAT from an origin of $MBPS MB/s" >&2
    by_hand
    wan_c+=("$elapsed")
    serve_fresh
    wan_s+=("$elapsed")
    stop_serve
  done
fi

c=$(best "${curl_t[@]}") ct=$(best "${tee_t[@]}") s=$(best "${serve_t[@]}")
h=$(best "${sum_t[@]}") rs=$(best "${restart_t[@]}")
printf '\n%-34s %10s\n' run "best (s)"
printf '%-34s %10.2f\n' "curl, then sha512sum" "$c" "curl | tee | sha512sum" "$ct" "serve --iso-url (to ready)" "$s" \
  "sha512sum of the cached copy" "$h" "serve restart on the cache" "$rs" "serve after SIGKILL at half" "$resume_t"
if [ "$MBPS" -gt 0 ]; then
  printf '%-34s %10.2f\n' "curl, then sha512sum ($MBPS MB/s)" "$(best "${wan_c[@]}")" \
    "serve --iso-url ($MBPS MB/s)" "$(best "${wan_s[@]}")"
fi
printf '\nserve: peak RSS %s MiB, CPU %s s (best round: %s s)\n' "$(best "${rss[@]}")" "$(best "${cpu[@]}")" "$s"
echo
echo "iso_bytes=$SIZE"
echo "curl_then_sha512sum_s=$c"
echo "curl_tee_sha512sum_s=$ct"
echo "serve_s=$s"
echo "serve_vs_curl_then_sha512sum=$(printf '%.2f' "$(echo "$c / $s" | bc -l)")"
echo "serve_vs_curl_tee_sha512sum=$(printf '%.2f' "$(echo "$ct / $s" | bc -l)")"
echo "sha512sum_s=$h"
echo "restart_s=$rs"
echo "restart_vs_sha512sum=$(printf '%.1f' "$(echo "$h / $rs" | bc -l)")"
echo "resume_after_half_s=$resume_t"
echo "resume_origin_bytes=$sent"
echo "resume_origin_bytes_over_iso=$(printf '%.3f' "$(echo "$sent / $SIZE" | bc -l)")"
if [ "$MBPS" -gt 0 ]; then
  echo "origin_mbps=$MBPS"
  echo "budget_curl_then_sha512sum_s=$(best "${wan_c[@]}")"
  echo "budget_serve_s=$(best "${wan_s[@]}")"
  echo "budget_serve_vs_curl_then_sha512sum=$(printf '%.2f' "$(echo "$(best "${wan_c[@]}") / $(best "${wan_s[@]}")" | bc -l)")"
fi
echo "serve_peak_rss_mib=$(best "${rss[@]}")"
echo "serve_cpu_s=$(best "${cpu[@]}")"
