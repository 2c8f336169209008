// Package kwok pins the version of kwok (sigs.k8s.io/kwok), the simulator of nodes that `make
// bench-nodes` runs, in a module of its own, so that the main module's go.mod keeps none of its
// dependencies. hack/bench-nodes.sh builds its command from here.
package kwok
