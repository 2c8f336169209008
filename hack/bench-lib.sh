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
