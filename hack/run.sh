#!/usr/bin/env bash
# run.sh BINARY ISO LISTEN: builds a small demo release ISO at ISO unless it exists, then serves it
# on LISTEN with `upgrade-repo serve`, printing the URLs to try once it listens. Ctrl-C stops the
# server.
set -euo pipefail
bin=${1:?usage: run.sh BINARY ISO LISTEN}
iso=${2:?usage: run.sh BINARY ISO LISTEN}
listen=${3:-127.0.0.1:8080}
# A taken port is said before anything else, not after the URLs to try.
host=${listen%:*}
port=${listen##*:}
if (exec 3<>"/dev/tcp/${host:-127.0.0.1}/$port") 2>/dev/null; then
  echo "run: $listen is taken (something answers there); free it or pick another: make run LISTEN=127.0.0.1:8081" >&2
  exit 1
fi
if [ ! -s "$iso" ]; then
  mkdir -p "$(dirname "$iso")"
  echo "run: building the demo release ISO $iso" >&2
  "$bin" release pack --out "$iso" --version v1.5.2 --images 7 --layer-size 1MiB --rootfs-size 16MiB
fi
base="http://$listen"
# The URLs are printed once the server listens, not before: serve runs in the background until
# its port answers (or it exits, saying why), and Ctrl-C reaches it.
"$bin" serve --iso "$iso" --listen "$listen" &
pid=$!
trap 'kill -INT "$pid" 2>/dev/null || true' INT TERM
until (exec 3<>"/dev/tcp/${host:-127.0.0.1}/$port") 2>/dev/null; do
  kill -0 "$pid" 2>/dev/null || { wait "$pid"; exit $?; }
  sleep 0.1
done
cat <<MSG

Serving $iso on $base. Try:

  curl $base/v1/release                      # harvester-release.yaml as JSON
  curl $base/v1/bundle                       # image archives by group, with sizes and images
  curl $base/v1/images                       # every image reference with its group and archive
  curl $base/harvester-release.yaml          # the file as stored
  curl -H 'Accept: application/json' $base/bundle/harvester/images/
  curl -r 0-99 -o /dev/null -w '%{http_code} %{size_download}\n' $base/rootfs.squashfs
  curl $base/harvester-iso/harvester-release.yaml   # the prefix existing upgrade scripts use
  curl $base/readyz; curl -s $base/metrics | grep '^upgrade_repo_'
  $base/   (the listing, in a browser)

MSG
wait "$pid"
