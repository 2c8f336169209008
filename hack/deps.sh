#!/usr/bin/env bash
# deps.sh installs, idempotently, the system packages the tests and benchmarks use:
# xorriso (real ISO images), containerd (real image import), nginx (serving baseline),
# zstd (import baseline), iproute2 (network namespaces), GNU time (peak RSS in benchmarks),
# debootstrap (the e2e's script image); and, where it can, wrk (the load of bench-serve).
# Nothing happens when all are present. With arguments (deps.sh xorriso), only the packages
# those commands come from: `make run` needs xorriso alone.
set -euo pipefail
need=()
if [ $# -gt 0 ]; then
  for c in "$@"; do command -v "$c" >/dev/null 2>&1 || need+=("$c"); done
  [ ${#need[@]} -eq 0 ] && exit 0
  if [ "$(id -u)" -ne 0 ]; then
    echo "deps: missing ${need[*]}; install them (apt-get install ${need[*]}) or run as root" >&2
    exit 1
  fi
  echo "deps: installing ${need[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  exit 0
fi
command -v xorriso >/dev/null 2>&1 || need+=(xorriso)
command -v containerd >/dev/null 2>&1 || need+=(containerd)
command -v ctr >/dev/null 2>&1 || need+=(containerd)
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || need+=(nginx-light)
command -v zstd >/dev/null 2>&1 || need+=(zstd)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v nsenter >/dev/null 2>&1 || need+=(util-linux)
[ -x /usr/bin/time ] || need+=(time)
command -v debootstrap >/dev/null 2>&1 || [ -x /usr/sbin/debootstrap ] || need+=(debootstrap)
# wrk is wanted, not needed: without it bench-serve's small-file load is its Go client.
want=()
command -v wrk >/dev/null 2>&1 || want+=(wrk)
if [ ${#need[@]} -eq 0 ] && { [ ${#want[@]} -eq 0 ] || [ "$(id -u)" -ne 0 ]; }; then exit 0; fi
if [ "$(id -u)" -ne 0 ]; then
  echo "deps: missing ${need[*]}; install them (apt-get install ${need[*]}) or run as root" >&2
  exit 1
fi
echo "deps: installing ${need[*]} ${want[*]}" >&2
apt-get update -qq
if [ ${#need[@]} -gt 0 ]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
if [ ${#want[@]} -gt 0 ]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${want[@]}" >/dev/null ||
    echo "deps: ${want[*]} not installed; bench-serve measures small files with its Go client" >&2
fi
