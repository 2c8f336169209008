#!/usr/bin/env bash
# bench-serve.sh: upgrade-repo (GOMAXPROCS=1, serving the release ISO) against nginx (Debian's,
# one worker, sendfile on, serving the same release extracted), side by side in one run, with the
# Go load client hack/benchserve: large-file throughput (parallel downloads of a 1 GiB file),
# small-file requests per second (harvester-release.yaml over 64 connections), server CPU seconds
# per GB, peak RSS (VmHWM, which counts the pages of the executable it touched) and peak
# anonymous RSS (its private memory); then RANGED_CLIENTS clients at once each download the large
# file by ranges of RANGED_SIZE bytes (each from its own starting point, the whole file), as every
# node's upgrade step pulling from one Service, with the total throughput and the peak anonymous
# RSS of each server during that run. Ends with one name=value line per figure.
#
# On a machine of two cores or more, both servers run on CPU 0 and the load on the others, so
# that "one core each" is what is measured. The small-file load is wrk (one thread), as a Go
# client tops out before either server does; each server's CPU time per small request is
# printed too, a figure the load cannot cap.
#
# Environment: BIN (default bin/upgrade-repo), BENCH_DIR (default .cache/bench-serve, kept between
# runs), LARGE_SIZE (default 1GiB), PARALLEL (4), CONNS (64), DURATION (5s), REPEAT (2),
# RANGED_CLIENTS (20; 0 skips the run), RANGED_SIZE (8388608), BENCH_CHECKSUM (1: serve with
# --iso-checksum, every chunk checked before it is first served).
set -euo pipefail
cd "$(dirname "$0")/.."
source hack/bench-lib.sh
bin=${BIN:-bin/upgrade-repo}
dir=${BENCH_DIR:-.cache/bench-serve}
large=${LARGE_SIZE:-1GiB}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

if [ ! -s "$dir/release.iso" ] || [ "$(cat "$dir/size" 2>/dev/null)" != "$large" ]; then
  echo "bench-serve: building a release with a $large rootfs.squashfs in $dir" >&2
  rm -rf "$dir/tree" "$dir/release.iso"
  "$bin" release pack --tree "$dir/tree" --out "$dir/release.iso" --images 6 --layer-size 4MiB --rootfs-size "$large" >/dev/null
  echo "$large" > "$dir/size"
fi
go build -o "$dir/benchserve" ./hack/benchserve

nginx_port=$(pick_port)
repo_port=$(pick_port)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

# Servers on CPU 0, the load on the rest.
server_cpu=() load_cpu=()
if [ "$(nproc)" -ge 2 ] && command -v taskset >/dev/null; then
  server_cpu=(taskset -c 0) load_cpu=(taskset -c "1-$(($(nproc) - 1))")
fi
wrk=$(command -v wrk || true)

mkdir -p "$dir/nginx/logs"
nginx_conf "$dir/nginx" "$nginx_port" "$dir/tree" 'access_log off;' 'tcp_nopush on;' 'keepalive_requests 1000000;' \
  'types { application/yaml yaml; text/plain txt; }'
"${server_cpu[@]}" nginx -p "$dir/nginx" -c "$dir/nginx/nginx.conf" &
pids+=($!)
# With --iso-checksum, as the agent serves: the ISO is verified once at start and every chunk is
# checked against its digest before its bytes first leave (BENCH_CHECKSUM=0 serves unchecked).
checksum=()
if [ "${BENCH_CHECKSUM:-1}" = 1 ]; then
  if [ ! -s "$dir/release.iso.sha512" ] || [ "$dir/release.iso.sha512" -ot "$dir/release.iso" ]; then
    sha512sum "$dir/release.iso" | cut -d' ' -f1 > "$dir/release.iso.sha512"
  fi
  checksum=(--iso-checksum "sha512:$(cat "$dir/release.iso.sha512")")
fi
GOMAXPROCS=1 UPGRADE_REPO_LOG_LEVEL=warn "${server_cpu[@]}" "$bin" serve --iso "$dir/release.iso" "${checksum[@]}" --listen "127.0.0.1:$repo_port" &
repo_pid=$!
pids+=($repo_pid)

for i in $(seq 600); do
  if curl -fs "http://127.0.0.1:$repo_port/readyz" >/dev/null && curl -fs "http://127.0.0.1:$nginx_port/harvester-release.yaml" >/dev/null; then break; fi
  sleep 0.1
done
nginx_pids=$(pgrep -P "${pids[0]}" | tr '\n' ',')${pids[0]}

echo "bench-serve: nginx on :$nginx_port (pids $nginx_pids), upgrade-repo on :$repo_port (pid $repo_pid)" >&2
"${load_cpu[@]}" "$dir/benchserve" -wrk "$wrk" \
  -target "nginx=http://127.0.0.1:$nginx_port@$nginx_pids" \
  -target "upgrade-repo=http://127.0.0.1:$repo_port@$repo_pid" \
  -parallel "${PARALLEL:-4}" -conns "${CONNS:-64}" -duration "${DURATION:-5s}" -repeat "${REPEAT:-2}" \
  -ranged-clients "${RANGED_CLIENTS:-20}" -ranged-size "${RANGED_SIZE:-8388608}"
curl -fs "http://127.0.0.1:$repo_port/metrics" | grep -E '^upgrade_repo_file_(responses|bytes)_total' >&2 || true
