# The upgrade-repo image: static binaries on an empty base, so building it pulls nothing.
# hack/image.sh (`make image IMAGE=...`) prepares the build context: the binaries built with
# CGO_ENABLED=0 and the host's CA bundle, which HTTPS origins (--iso-url) are verified against.
FROM scratch
COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY upgrade-repo /usr/local/bin/upgrade-repo
# `upgrade-repo serve` runs this serve-only binary in its place (a third of the memory).
COPY upgrade-repo-serve /usr/local/bin/upgrade-repo-serve
# The sequencer runs as this unprivileged user; the agent's pod spec runs it as root without any
# capability, which is what owning the node's containerd socket requires.
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/upgrade-repo"]
