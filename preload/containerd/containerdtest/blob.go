package containerdtest

import (
	"bytes"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	digest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// WriteBlob stores data in the content store of namespace as a blob of its own, outside any image
// (what `ctr content ingest` does), kept from the garbage collector by a gc.root label, and returns
// its digest ("sha256:...").
func (d *Daemon) WriteBlob(t testing.TB, namespace string, data []byte) string {
	t.Helper()
	c, err := client.New(d.Socket, client.WithDefaultNamespace(namespace), client.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatalf("containerdtest: connect: %v", err)
	}
	defer c.Close()
	ctx := namespaces.WithNamespace(t.Context(), namespace)
	dg := digest.FromBytes(data)
	err = content.WriteBlob(ctx, c.ContentStore(), "containerdtest-"+dg.Encoded(), bytes.NewReader(data),
		ocispec.Descriptor{Digest: dg, Size: int64(len(data))},
		content.WithLabels(map[string]string{"containerd.io/gc.root": time.Now().UTC().Format(time.RFC3339)}))
	if err != nil {
		t.Fatalf("containerdtest: write blob: %v", err)
	}
	return dg.String()
}
