# The upgrade-repo image: one static binary on an empty base, so building it pulls nothing.
# hack/image.sh (`make image IMAGE=...`) prepares the build context: the binary built with
# CGO_ENABLED=0 and the host's CA bundle, which HTTPS origins (--iso-url) are verified against.
FROM scratch
COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY upgrade-repo /usr/local/bin/upgrade-repo
# The sequencer runs as this unprivileged user; the agent's pod spec runs it as root without any
# capability, which is what owning the node's containerd socket requires.
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/upgrade-repo"]
