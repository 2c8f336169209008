package planctl

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/checksum"
)

// Unknown marks a size or a count nobody has reported.
const Unknown = int64(-1)

// NodeNeed is what a plan to an ISO would ask of one node's disk and containerd, as far as the
// cluster knows before the plan starts.
type NodeNeed struct {
	// Node is the node's name.
	Node string
	// ISOBytes is what the node must download into its cache: 0 when it holds the ISO already
	// (its agent reports it Ready with the same checksum), the ISO's size when known, else
	// Unknown.
	ISOBytes int64
	// FreeBytes is the space its agent reports free in its cache; Unknown without a report.
	FreeBytes int64
	// ImagesLeft and ImagesTotal count the release's images the node has yet to preload, from
	// its agent's report of a preload of the same ISO; Unknown until the ISO was read.
	ImagesLeft, ImagesTotal int64
	// PreloadBytes is how many archive bytes it has yet to preload; Unknown as ImagesLeft.
	PreloadBytes int64
	// Fits says whether the ISO fits in the cache: "yes", "no" or "unknown".
	Fits string
}

// DiskPreview lists, in the order of nodes, what upgrading to the ISO of v would download and
// preload on each node, against what its agent reports (its RepoNode): the ISO's size comes from
// v's status (the sequencer's check of its URL), the images from a preload the agent already
// made or began of the same ISO; what nobody has reported is Unknown.
func DiskPreview(ctx context.Context, c client.Reader, v *v1beta1.Version, nodes []string) ([]NodeNeed, error) {
	var rns v1beta1.RepoNodeList
	if err := c.List(ctx, &rns); err != nil {
		return nil, fmt.Errorf("list repo nodes: %w", err)
	}
	reports := map[string]*v1beta1.RepoNodeStatus{}
	for i := range rns.Items {
		reports[rns.Items[i].Name] = &rns.Items[i].Status
	}
	want, _ := checksum.Parse(v.Spec.ISOChecksum)
	size := v.Status.ISOSize
	out := make([]NodeNeed, 0, len(nodes))
	for _, name := range nodes {
		n := NodeNeed{Node: name, ISOBytes: Unknown, FreeBytes: Unknown, ImagesLeft: Unknown, ImagesTotal: Unknown, PreloadBytes: Unknown, Fits: "unknown"}
		if size > 0 {
			n.ISOBytes = size
		}
		rn := reports[name]
		if rn != nil {
			got, err := checksum.Parse(rn.ISO.Checksum)
			same := err == nil && !want.IsZero() && got.Equal(want)
			if same && rn.ISO.State == v1beta1.ISOReady {
				n.ISOBytes = 0
			}
			if rn.Cache.TotalBytes > 0 {
				n.FreeBytes = rn.Cache.FreeBytes
			}
			if same && rn.Preload.ImagesTotal > 0 {
				n.ImagesTotal = rn.Preload.ImagesTotal
				n.ImagesLeft = max(rn.Preload.ImagesTotal-rn.Preload.ImagesDone, 0)
				n.PreloadBytes = max(rn.Preload.BytesTotal-rn.Preload.BytesDone, 0)
				if rn.Preload.State == v1beta1.PreloadDone {
					n.ImagesLeft, n.PreloadBytes = 0, 0
				}
			}
		}
		switch {
		case n.ISOBytes == 0:
			n.Fits = "yes"
		case n.ISOBytes > 0 && n.FreeBytes >= 0 && n.FreeBytes >= n.ISOBytes:
			n.Fits = "yes"
		case n.ISOBytes > 0 && n.FreeBytes >= 0:
			n.Fits = "no"
		}
		out = append(out, n)
	}
	return out, nil
}
