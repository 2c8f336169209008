#!/usr/bin/env bash
# bench-lib.sh: helpers the bench-*.sh scripts source.

# pick_port prints a loopback port nothing listens on, below Linux's ephemeral ports (32768 and
# up), so that no outgoing connection of the bench holds it by the time a server binds it.
pick_port() {
  local p
  while :; do
    p=$((20000 + RANDOM % 12000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return; fi
  done
}

# proc PID prints "<peak RSS MiB> <CPU seconds>" of a live process: its VmHWM, and its user and
# system time.
proc() {
  local hwm ticks
  hwm=$(awk '/^VmHWM:/ { print $2 }' "/proc/$1/status")
  ticks=$(awk '{ sub(/.*\) /, ""); print $12 + $13 }' "/proc/$1/stat")
  printf '%.1f %.2f\n' "$(echo "$hwm / 1024" | bc -l)" "$(echo "$ticks / $(getconf CLK_TCK)" | bc -l)"
}

# containerd_config DIR: writes DIR/config.toml for a containerd of its own, rooted in DIR, with
# its socket at DIR/c.sock, without the CRI and the snapshotters a bench does not use.
containerd_config() {
  local d=$1
  cat >"$d/config.toml" <<TOML
version = 2
root = "$d/root"
state = "$d/state"
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]
[grpc]
  address = "$d/c.sock"
[ttrpc]
  address = "$d/c.sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "$d/opt"
TOML
}

# containerd_run DIR: starts a containerd of its own under DIR (containerd_config), logging to
# DIR/containerd.log; sets containerd_pid, for the caller to record before containerd_wait.
containerd_run() {
  mkdir -p "$1"
  containerd_config "$1"
  containerd --config "$1/config.toml" --log-level warn >"$1/containerd.log" 2>&1 &
  containerd_pid=$!
}

# containerd_wait DIR WHAT: waits up to 30 s for the containerd of DIR to answer on DIR/c.sock;
# else says "WHAT did not start", shows its log and exits 1.
containerd_wait() {
  for _ in $(seq 1 300); do
    ctr -a "$1/c.sock" version >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "$2 did not start" >&2; cat "$1/containerd.log" >&2; exit 1
}

# now prints the time in seconds; elapsed A B prints B - A, to the millisecond.
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b - a }'; }

# The benches served from nginx (bench-acquire, bench-remote) share what follows: WORK, their
# temporary directory, PIDS, the processes they started, and the release ISO nginx serves.

# origin_bench NAME TOOL...: checks that BIN and every TOOL are there (NAME says which is missing,
# and exits 1), then sets NGINX, WORK (a temporary directory under BENCH_TMP, TMPDIR or /tmp,
# named after NAME) and PIDS, and makes stop_pids_and_clean the EXIT trap.
origin_bench() {
  local name=$1 c
  shift
  [ -x "$BIN" ] || { echo "$name: $BIN missing (make build)" >&2; exit 1; }
  for c in "$@"; do
    command -v "$c" >/dev/null || [ -x "/usr/sbin/$c" ] || { echo "$name: $c missing (make deps)" >&2; exit 1; }
  done
  NGINX=$(command -v nginx || echo /usr/sbin/nginx)
  WORK=$(mktemp -d "${BENCH_TMP:-${TMPDIR:-/tmp}}/$name.XXXXXX")
  PIDS=()
  trap stop_pids_and_clean EXIT
}

# stop_pids_and_clean is their EXIT trap: it stops every process of PIDS and removes WORK.
stop_pids_and_clean() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}

# origin_iso NAME: places the release ISO at WORK/origin/release.iso: a link to BENCH_ISO when
# set, else one of about ISO_SIZE packed by BIN (NAME says so on stderr); sets SIZE, its bytes.
origin_iso() {
  mkdir -p "$WORK/origin" "$WORK/nginx/logs"
  chmod 755 "$WORK" # nginx's workers run as an unprivileged user
  if [ -n "${BENCH_ISO:-}" ]; then
    ln -s "$(realpath "$BENCH_ISO")" "$WORK/origin/release.iso"
  else
    local want
    want=$(numfmt --from=iec "$(sed 's/i\?B$//' <<<"$ISO_SIZE")")
    echo "$1: packing a release ISO of about $ISO_SIZE into $WORK" >&2
    # The images and boot files take about 57 MiB; rootfs.squashfs makes up the rest.
    "$BIN" release pack --out "$WORK/origin/release.iso" --images 6 --layer-size 4MiB \
      --rootfs-size $((want - (57 << 20))) >/dev/null
  fi
  SIZE=$(stat -L -c %s "$WORK/origin/release.iso")
}

# nginx_conf DIR PORT ROOT LINE...: writes DIR/nginx.conf for an nginx of its own: one worker in
# the foreground, its pid and error log under DIR, sendfile on, serving ROOT on 127.0.0.1:PORT,
# each LINE an http-level directive besides (its access log, its tuning).
nginx_conf() {
  local d=$1 port=$2 root=$3
  shift 3
  {
    printf '%s\n' 'worker_processes 1;' 'daemon off;' "pid $d/nginx.pid;" "error_log $d/logs/error.log warn;" \
      'events { worker_connections 1024; }' 'http {' '  sendfile on;' '  default_type application/octet-stream;'
    printf '  %s\n' "$@"
    printf '%s\n' '  server {' "    listen 127.0.0.1:$port;" "    root $root;" '  }' '}'
  } >"$d/nginx.conf"
}

# nginx_origin FORMAT: starts nginx (NGINX) serving WORK/origin on a free loopback port, each
# request logged to WORK/nginx/logs/access.log in log_format FORMAT; sets nginx_port and records
# its pid in PIDS.
nginx_origin() {
  nginx_port=$(pick_port)
  nginx_conf "$WORK/nginx" "$nginx_port" "$WORK/origin" "log_format sent '$1';" "access_log $WORK/nginx/logs/access.log sent;"
  "$NGINX" -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf" &
  PIDS+=($!)
}
