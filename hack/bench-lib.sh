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
