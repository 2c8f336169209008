package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/controller-runtime/pkg/client"

	apiv1beta1 "github.com/upgrade-repo/upgrade-repo/api/v1beta1"
)

// pinnedLabel is the CRI plugin's label of pinned images, which the agents set on the images they
// preload for a plan (containerd 1.7.3 and later report them pinned to the kubelet).
const pinnedLabel = "io.cri-containerd.pinned=pinned"

// imageLoss is what the disk-pressure part of the upgrade did and saw: one release image removed
// from one node's containerd after the preload (as the kubelet's image garbage collection would),
// whether it was pinned then, and the most restores that node's RepoNode reported.
type imageLoss struct {
	node, image string
	pinned      bool
	restored    int64
	restoredRef []string
}

// removeReleaseImage removes, once, the first release image from the last node's containerd once
// the plan has left ImagePreloading, while the agents still hold the ISO; then it records what
// that node's RepoNode says about images put back.
func (w *upgradeWatch) removeReleaseImage(ctx context.Context, t *testing.T, c *cluster, phase apiv1beta1.Phase) {
	if phaseIndex(phase) <= phaseIndex(apiv1beta1.PhaseImagePreloading) || phaseIndex(phase) > phaseIndex(apiv1beta1.PhaseNodeUpgrading) {
		return
	}
	w.mu.Lock()
	loss := w.loss
	w.mu.Unlock()
	if loss.node == "" {
		n := c.nodes[len(c.nodes)-1].Name
		ref := releaseISO(t).refs()[0]
		out, err := nodeCmd(ctx, n, "ctr", "-n", "k8s.io", "images", "ls", "name=="+ref)
		if err != nil {
			t.Logf("list %s on %s: %v", ref, n, err)
			return
		}
		if _, err := nodeCmd(ctx, n, "ctr", "-n", "k8s.io", "images", "rm", "--sync", ref); err != nil {
			t.Logf("remove %s from %s: %v", ref, n, err)
			return
		}
		t.Logf("removed release image %s from %s in phase %s (as the image garbage collection would)", ref, n, phase)
		loss = imageLoss{node: n, image: ref, pinned: strings.Contains(out, pinnedLabel)}
	}
	var rn apiv1beta1.RepoNode
	if err := c.cl.Get(ctx, client.ObjectKey{Name: loss.node}, &rn); err == nil && rn.Status.Preload.RestoredTotal > loss.restored {
		loss.restored = rn.Status.Preload.RestoredTotal
		loss.restoredRef = nil
		for _, r := range rn.Status.Preload.Restored {
			loss.restoredRef = append(loss.restoredRef, r.Image+" from "+r.Source)
		}
	}
	w.mu.Lock()
	w.loss = loss
	w.mu.Unlock()
}

// requireImageRestored checks the disk-pressure part of the upgrade: the removed image was pinned,
// its node's agent put it back from its own ISO and said so, and it is present and still pinned
// (the release is the running one) after the plan Succeeded.
func (w *upgradeWatch) requireImageRestored(t *testing.T) {
	w.mu.Lock()
	loss := w.loss
	w.mu.Unlock()
	require.NotEmpty(t, loss.node, "no release image was removed: the plan was never seen between ImagePreloading and CleaningUp")
	require.True(t, loss.pinned, "release image %s on %s carried %s before its removal", loss.image, loss.node, pinnedLabel)
	require.Positive(t, loss.restored, "RepoNode %s reported no image put back", loss.node)
	require.Contains(t, loss.restoredRef, loss.image+" from iso", "RepoNode %s: restored %v", loss.node, loss.restoredRef)
	requireImages(t, loss.node, []string{loss.image})
	var out string
	eventually(t, time.Minute, "list "+loss.image+" on "+loss.node, func(ctx context.Context) error {
		var err error
		out, err = nodeCmd(ctx, loss.node, "ctr", "-n", "k8s.io", "images", "ls", "name=="+loss.image)
		return err
	})
	require.Contains(t, out, pinnedLabel, "the running release's image %s stays pinned on %s", loss.image, loss.node)
	t.Logf("%s: %s removed after preload, put back from the node's ISO (%d restores reported), pinned", loss.node, loss.image, loss.restored)
}
