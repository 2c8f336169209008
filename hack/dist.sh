#!/usr/bin/env bash
# dist.sh: builds the air-gapped bundle `make dist` ships, dist/upgrade-repo-VERSION-linux-amd64.tar.gz:
#   bin/upgrade-repo, bin/upgrade-repo-serve      the static CLI and its lean serve binary (linux/amd64)
#   charts/upgrade-repo-CHART.tgz                 the chart, packaged by the pinned helm (hack/verify-chart.sh
#                                                 tools), its appVersion (the image tag) set to VERSION
#   manifests/                                    the kustomize manifests (CRDs, RBAC, the chart rendered)
#   images/upgrade-repo-VERSION.tar               `docker save` of the project image (hack/image.sh, FROM scratch)
#   images/upgrade-repo-kubeadm-VERSION.tar       `docker save` of the kubeadm upgrade image (Dockerfile.kubeadm)
#   INSTALL.md                                    the air-gapped install, naming the files above
#   SHA256SUMS                                    sha256sum of every other file
# Each image archive is left out, with a line saying so, when no docker engine answers. Then it
# checks its own output: every file INSTALL.md names is in the tarball, and SHA256SUMS matches.
#   env: VERSION (default: git describe), DIST (output directory, dist).
set -euo pipefail
cd "$(dirname "$0")/.."
version=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
# A docker tag allows [A-Za-z0-9_.-]; semver's build metadata (+) becomes -.
tag=${version//+/-}
name=upgrade-repo-$version-linux-amd64
out=${DIST:-dist}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root=$stage/$name
mkdir -p "$root/bin" "$root/charts" "$root/images" "$out"
log() { echo "dist: $*" >&2; }

GOOS=linux GOARCH=amd64 CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=$version" \
  -o "$root/bin/" ./cmd/upgrade-repo ./cmd/upgrade-repo-serve
log "built bin/upgrade-repo and bin/upgrade-repo-serve ($version)"

helm=$(bash hack/verify-chart.sh tools)
"$helm" package charts/upgrade-repo --app-version "$tag" -d "$root/charts" >/dev/null
chart=$(cd "$root/charts" && ls upgrade-repo-*.tgz)
log "packaged charts/$chart (appVersion $tag)"
# The manifests' CRDs and roles are files; -L copies what any link names.
cp -RL manifests "$root/manifests"

images=()
if docker info >/dev/null 2>&1; then
  VERSION=$version bash hack/image.sh "upgrade-repo:$tag"
  VERSION=$version DOCKERFILE=Dockerfile.kubeadm bash hack/image.sh "upgrade-repo-kubeadm:$tag"
  for image in upgrade-repo upgrade-repo-kubeadm; do
    docker save -o "$root/images/$image-$tag.tar" "$image:$tag"
    images+=("images/$image-$tag.tar")
    log "saved images/$image-$tag.tar ($image:$tag)"
  done
else
  log "no docker engine answers: images/upgrade-repo-$tag.tar and images/upgrade-repo-kubeadm-$tag.tar are left out (build them where docker runs: make image image-kubeadm, then docker save)"
  rmdir "$root/images"
fi

# INSTALL.md names every file it uses in backquotes; the check below holds it to that.
{
  cat <<EOF
# Installing upgrade-repo $version without a registry

This bundle holds everything an air-gapped cluster needs to run upgrade-repo. Check it first:

\`\`\`sh
sha256sum -c SHA256SUMS
\`\`\`

| file | what |
|---|---|
| \`bin/upgrade-repo\` | the CLI (\`upgrade apply\`, \`upgrade status\`, \`plan\`, \`iso\`, ...), static, linux/amd64 |
| \`bin/upgrade-repo-serve\` | the lean binary \`upgrade-repo serve\` runs when it lies beside it |
| \`charts/$chart\` | the Helm chart; its appVersion, and so the image tag, is \`$tag\` |
| \`manifests/kustomization.yaml\` | the same install with kustomize (\`kubectl apply -k manifests\`; the gossip key Secret is yours to create, see the project's docs/operating.md) |
EOF
  for f in "${images[@]}"; do
    case $f in
      *kubeadm*) echo "| \`$f\` | the kubeadm upgrade image, \`upgrade-repo-kubeadm:$tag\` (\`docker save\`) |" ;;
      *) echo "| \`$f\` | the project image, \`upgrade-repo:$tag\` (\`docker save\`) |" ;;
    esac
  done
  [ ${#images[@]} -gt 0 ] || echo "
This bundle was built without a docker engine: it holds no image archives. Build them where docker
runs (\`make image image-kubeadm\`, then \`docker save\`)."
  cat <<EOF

## 1. The CLI

\`\`\`sh
sudo install -m 0755 bin/upgrade-repo bin/upgrade-repo-serve /usr/local/bin/
upgrade-repo version
\`\`\`

EOF
  if [ ${#images[@]} -gt 0 ]; then cat <<EOF
## 2. The images, onto every node

Nothing is pulled: the agents, the sequencer and the upgrade Jobs run images already on the nodes
(the chart's \`image.pullPolicy\` is IfNotPresent). Put both archives on every node, the way your
cluster takes them:

- **kubeadm, or any containerd node**: copy them to the node, then
  \`sudo ctr -n k8s.io images import upgrade-repo-$tag.tar\` and
  \`sudo ctr -n k8s.io images import upgrade-repo-kubeadm-$tag.tar\`.
- **kind**: \`kind load image-archive images/upgrade-repo-$tag.tar --name CLUSTER\`, and the same
  for the kubeadm image.
- **RKE2, k3s**: copy them into \`/var/lib/rancher/rke2/agent/images/\` (or
  \`/var/lib/rancher/k3s/agent/images/\`); they are imported when the service starts.

The release's own images need nothing: every node preloads them from the release ISO.

EOF
  fi
  cat <<EOF
## 3. The agents and the sequencer

Record the version the cluster runs now with \`sequencer.installedVersion\` (the sequencer writes it
into the ConfigMap \`upgrade-repo-installed\` once, and each plan that succeeds rewrites it):

\`\`\`sh
helm install upgrade-repo charts/$chart -n upgrade-repo-system --create-namespace \\
  --set sequencer.installedVersion=v1.33.13
\`\`\`

## 4. The upgrade

With the release ISO at a URL the nodes reach:

\`\`\`sh
upgrade-repo upgrade apply --iso-url http://files.example/release.iso \\
  --iso-checksum sha512:HEX --version v1.34.4 --upgrade-image upgrade-repo-kubeadm:$tag
upgrade-repo upgrade status -w
\`\`\`

Everything else (watching, pausing, skipping a lost node, rolling back, monitoring) is in the
project's docs/operating.md.
EOF
} >"$root/INSTALL.md"

(cd "$root" && find . -type f ! -name SHA256SUMS | sed 's|^\./||' | LC_ALL=C sort | xargs sha256sum >SHA256SUMS)
tarball=$out/$name.tar.gz
tar -C "$stage" --sort=name --owner=0 --group=0 --numeric-owner -czf "$tarball" "$name"

# The check: every path INSTALL.md names is in the tarball, and the sums hold after extraction.
check=$(mktemp -d)
trap 'rm -rf "$stage" "$check"' EXIT
tar -C "$check" -xzf "$tarball"
missing=0
while read -r f; do
  [ -e "$check/$name/$f" ] || { log "INSTALL.md names $f, which the tarball lacks"; missing=1; }
done < <(grep -o '`\(bin\|charts\|images\|manifests\)/[^` ]*`' "$check/$name/INSTALL.md" | tr -d '`' | sort -u)
[ "$missing" = 0 ] || exit 1
(cd "$check/$name" && sha256sum --quiet -c SHA256SUMS) || { log "SHA256SUMS does not match the tarball's files"; exit 1; }
log "wrote $tarball ($(du -h "$tarball" | cut -f1)): $(tar -tzf "$tarball" | grep -vc '/$') files, each INSTALL.md names present, SHA256SUMS checked"
