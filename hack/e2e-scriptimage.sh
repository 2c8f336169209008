#!/usr/bin/env bash
# e2e-scriptimage.sh [IMAGE]: builds IMAGE (default upgrade-repo-e2e-scripts:e2e), the upgrade
# image of the e2e's compatibility test: e2e/scriptimage/step.sh, which makes the requests the
# product's upgrade scripts make, with their tools. No registry is reachable, so the image is
# made FROM scratch: a Debian rootfs made with debootstrap (bash, curl, jq, zstd; Debian mirrors
# are reachable), yq v4 built from the Go module proxy, and from the host a static kubectl and
# containerd's ctr (Debian's, which needs only the rootfs's glibc). The rootfs and yq are cached
# under ~/.cache/upgrade-repo-scriptimage; the image is rebuilt only when an input changed (its
# label upgrade-repo.inputs holds their digest), so a re-run takes well under a second.
set -euo pipefail
cd "$(dirname "$0")/.."
image=${1:-upgrade-repo-e2e-scripts:e2e}
suite=${SCRIPTIMAGE_SUITE:-bookworm}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
yq_version=${YQ_VERSION:-v4.54.2}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/upgrade-repo-scriptimage
log() { echo "e2e-scriptimage: $*" >&2; }
mkdir -p "$cache"

# 1. The Debian rootfs, once.
rootfs=$cache/rootfs-$suite.tar
if [ ! -s "$rootfs" ]; then
  command -v debootstrap >/dev/null || { log "debootstrap is missing (apt-get install debootstrap)"; exit 1; }
  [ "$(id -u)" = 0 ] || { log "debootstrap needs root"; exit 1; }
  dir=$(mktemp -d "$cache/rootfs.XXXXXX")
  trap 'rm -rf "$dir"' EXIT
  log "debootstrap $suite from $mirror (once; cached in $rootfs)"
  debootstrap --variant=minbase --include=bash,curl,ca-certificates,jq,zstd "$suite" "$dir" "$mirror" > "$cache/debootstrap.log" 2>&1 ||
    { log "debootstrap failed: see $cache/debootstrap.log"; exit 1; }
  rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/* "$dir"/usr/share/doc/* "$dir"/usr/share/man/* "$dir"/usr/share/locale/*
  tar -C "$dir" --numeric-owner -cf "$rootfs.tmp" .
  mv "$rootfs.tmp" "$rootfs"
  rm -rf "$dir"
  trap - EXIT
fi

# 2. yq v4 (mikefarah's, the one the product's scripts use), from the Go module proxy, once.
yq=$cache/yq-$yq_version
if [ ! -x "$yq" ]; then
  log "building yq $yq_version from the Go module proxy (once)"
  gobin=$(mktemp -d)
  GOBIN=$gobin CGO_ENABLED=0 GOFLAGS=-mod=mod go install -trimpath -ldflags '-s -w' "github.com/mikefarah/yq/v4@$yq_version"
  mv "$gobin/yq" "$yq"
  rm -rf "$gobin"
fi

# 3. kubectl (static) and ctr from the host.
static_kubectl() {
  local k
  # kind's own first (it matches the cluster's version); gcloud's kubectl is a version dispatcher.
  for k in "$HOME/.cache/kind-offline/bin/kubectl" "$(command -v kubectl 2>/dev/null || true)"; do
    [ -n "$k" ] && [ -x "$k" ] || continue
    k=$(readlink -f "$k")
    file "$k" | grep -q 'statically linked' && { echo "$k"; return; }
  done
  return 1
}
kubectl=$(static_kubectl) || { log "no statically linked kubectl on this host"; exit 1; }
ctr=$(command -v ctr) || { log "ctr is missing (apt-get install containerd)"; exit 1; }
ctr=$(readlink -f "$ctr")
step=e2e/scriptimage/step.sh

# 4. The image, unless it is there with the same inputs.
inputs=$( { sha256sum "$step" "$yq" "$kubectl" "$ctr"; stat -c '%s %Y' "$rootfs"; echo "$suite $yq_version"; } | sha256sum | cut -c1-32)
if [ "$(docker image inspect -f '{{index .Config.Labels "upgrade-repo.inputs"}}' "$image" 2>/dev/null || true)" = "$inputs" ]; then
  log "$image is up to date"
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/overlay/usr/local/bin"
install -m 0755 "$yq" "$work/overlay/usr/local/bin/yq"
install -m 0755 "$kubectl" "$work/overlay/usr/local/bin/kubectl"
install -m 0755 "$ctr" "$work/overlay/usr/local/bin/ctr"
install -m 0755 "$step" "$work/overlay/usr/local/bin/upgrade-step"
cp "$rootfs" "$work/rootfs.tar"
tar -C "$work/overlay" --numeric-owner --owner=0 --group=0 -rf "$work/rootfs.tar" ./usr/local/bin/yq ./usr/local/bin/kubectl ./usr/local/bin/ctr ./usr/local/bin/upgrade-step
docker import \
  --change 'ENTRYPOINT ["/usr/local/bin/upgrade-step"]' \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change "LABEL upgrade-repo.inputs=$inputs" \
  "$work/rootfs.tar" "$image" >/dev/null
log "$image built ($(docker image inspect -f '{{.Size}}' "$image") bytes)"
