#!/usr/bin/env bash
# deps.sh installs, idempotently, the system packages the tests and benchmarks use:
# xorriso (real ISO images), containerd (real image import), nginx (serving baseline),
# zstd (import baseline), iproute2 (network namespaces), GNU time (peak RSS in benchmarks),
# debootstrap (the e2e's script image) and wrk (the load of bench-serve).
# Nothing happens when all are present.
set -euo pipefail
need=()
command -v xorriso >/dev/null 2>&1 || need+=(xorriso)
command -v containerd >/dev/null 2>&1 || need+=(containerd)
command -v ctr >/dev/null 2>&1 || need+=(containerd)
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || need+=(nginx-light)
command -v zstd >/dev/null 2>&1 || need+=(zstd)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v nsenter >/dev/null 2>&1 || need+=(util-linux)
[ -x /usr/bin/time ] || need+=(time)
command -v wrk >/dev/null 2>&1 || need+=(wrk)
command -v debootstrap >/dev/null 2>&1 || [ -x /usr/sbin/debootstrap ] || need+=(debootstrap)
if [ ${#need[@]} -eq 0 ]; then exit 0; fi
if [ "$(id -u)" -ne 0 ]; then
  echo "deps: missing ${need[*]}; install them (apt-get install ${need[*]}) or run as root" >&2
  exit 1
fi
echo "deps: installing ${need[*]}" >&2
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
