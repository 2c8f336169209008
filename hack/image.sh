#!/usr/bin/env bash
# image.sh IMAGE: builds the upgrade-repo container image FROM scratch with the local docker engine.
# The build context is a temporary directory holding only the static binaries (upgrade-repo and its lean upgrade-repo-serve) and the CA bundle, so
# nothing is pulled and nothing else from the checkout ends up in the image.
#   env: VERSION (stamped into the binary; default: git describe), CA_BUNDLE (default: the host's),
#        DOCKERFILE (Dockerfile; Dockerfile.kubeadm builds the kubeadm upgrade image).
set -euo pipefail
cd "$(dirname "$0")/.."
image=${1:-upgrade-repo:dev}
version=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
ca_bundle=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
if [ ! -s "$ca_bundle" ]; then
  echo "image: CA bundle $ca_bundle is missing (install ca-certificates or set CA_BUNDLE)" >&2
  exit 1
fi
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=$version" -o "$ctx/" ./cmd/upgrade-repo ./cmd/upgrade-repo-serve
cp "$ca_bundle" "$ctx/ca-certificates.crt"
cp "${DOCKERFILE:-Dockerfile}" "$ctx/"
# The legacy builder needs no buildx plugin and handles FROM scratch without a registry.
builder=()
docker buildx version >/dev/null 2>&1 || builder=(env DOCKER_BUILDKIT=0)
if ! out=$("${builder[@]}" docker build -q -f "$ctx/$(basename "${DOCKERFILE:-Dockerfile}")" -t "$image" "$ctx" 2>&1); then
  echo "image: docker build of $image failed:" >&2
  echo "$out" >&2
  exit 1
fi
echo "image: built $image ($version)" >&2
