// Package e2e holds the end-to-end tests of upgrade-repo on a real Kubernetes cluster: the image
// loaded into every node, the chart installed, then the agents, the Service and the sequencer
// checked against what they really serve and do.
//
// The tests run through `make e2e` (hack/e2e.sh), which creates or reuses a kind cluster of one
// formation (E2E_FORMATION: single, two, three, witness or four nodes with Harvester's node
// roles), builds and loads the image, installs the chart and passes the cluster to the tests in
// E2E_* variables. `make e2e-matrix` (hack/e2e-matrix.sh) runs TestUpgrade in every formation.
// Without E2E_KUBECONFIG every test skips, so `go test ./...` here is harmless on a laptop.
//
// The test upgrade image (testimage upgrade) behaves like a release's node step: it does its work
// once, records it on the node with the boot it ran in, and reboots the node (in kind, the node
// container exits and is started again); TestUpgrade checks each node rebooted exactly once.
//
// The package is a module of its own, so the main module's `go test ./...` and `go vet ./...`
// never build it and its Kubernetes client dependencies stay out of the main module's graph.
package e2e
