// Command badcomponent is the binary of a control-plane component that exits at once: packed
// under a component's name (BAD_COMPONENT=kube-apiserver hack/kubeadm-release.sh), it makes a
// release whose control plane never comes up, to test that such a release stops on its first node.
package main

import (
	"fmt"
	"os"
	"path/filepath"
)

func main() {
	fmt.Fprintf(os.Stderr, "%s: this release's %s exits at once (a release built to fail)\n", filepath.Base(os.Args[0]), filepath.Base(os.Args[0]))
	os.Exit(1)
}
