package planctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/forecast"
	"github.com/upgrade-repo/upgrade-repo/internal/redact"
	"github.com/upgrade-repo/upgrade-repo/planview"
)

// ErrNotAllowed is returned when the judgement refuses the upgrade (planview.Report.Allowed is
// false): `upgrade-repo plan` and `upgrade apply` exit 1 with it.
var ErrNotAllowed = errors.New("the upgrade is not allowed")

// SequencerPods selects the sequencer's own replicas among the pods of its namespace, as the
// chart passes it to the sequencer's --keep-pods: a drain leaves them.
const SequencerPods = "app.kubernetes.io/component=sequencer"

// ApplyOptions are what `upgrade apply` is told, and what it talks to besides the cluster's
// objects.
type ApplyOptions struct {
	// Request is the Version and UpgradePlan to create; without a checksum, it is read from the
	// file beside the ISO (FetchChecksum).
	Request Request
	// Release is the target's harvester-release.yaml (PreviewOptions.Release).
	Release string
	// Namespace is the sequencer's namespace.
	Namespace string
	// Yes creates the plan without asking; DryRun creates nothing and shows the drains instead.
	Yes, DryRun bool
	// ServerVersion returns the API server's version; nil: the control plane's kubelets tell it.
	ServerVersion func() (string, error)
	// HTTP reads the checksum file and the release metadata.
	HTTP *http.Client
	// In is where the answer to "Proceed?" is read; Interactive says it is a terminal.
	In          io.Reader
	Interactive bool
	// Follow follows the created plan to its end, writing its status.
	Follow func(ctx context.Context, plan string) error
}

// ApplyVerb is `upgrade apply` once its flags are parsed: the checksum, the objects, the
// judgement (Preview, written to w), the question (Confirm), the creation and the following, in
// that order; nothing is created before the question is answered yes. A refused upgrade returns
// ErrNotAllowed; objects the request cannot make, ErrInvalid and ErrUsage.
func ApplyVerb(ctx context.Context, w io.Writer, c client.Client, o ApplyOptions) error {
	from := ""
	req := o.Request
	if req.Checksum == "" {
		sum, err := FetchChecksum(ctx, o.HTTP, req.ISOURL)
		if err != nil {
			return fmt.Errorf("no --iso-checksum, and the %s file beside the ISO: %w", ChecksumSuffix, err)
		}
		req.Checksum = sum
		su, _ := ChecksumURL(req.ISOURL) // FetchChecksum parsed it
		from = " (read from " + redact.URL(su) + ")"
	}
	v, p, err := req.Objects()
	if err != nil {
		return usageError{err}
	}
	exists, err := Check(ctx, c, v, p)
	if err != nil {
		return err
	}
	po := PreviewOptions{To: v.Name, Namespace: o.Namespace, Force: req.Force, AllowPrerelease: req.AllowPrerelease,
		Release: o.Release, VersionCreated: true, ISOURL: req.ISOURL, Plan: p}
	if o.ServerVersion != nil {
		if po.CurrentKubernetes, err = o.ServerVersion(); err != nil {
			return err
		}
	}
	rep, err := Preview(ctx, po, c, o.HTTP)
	if err != nil {
		return err
	}
	state := "to create"
	if exists {
		state = "exists with this ISO, reused"
	}
	fmt.Fprintf(w, "Version:   %s (%s)\n", v.Name, state)
	fmt.Fprintf(w, "ISO:       %s\n", redact.URL(v.Spec.ISOURL))
	fmt.Fprintf(w, "Checksum:  %s%s\n", v.Spec.ISOChecksum, from)
	fmt.Fprintf(w, "Plan:      %s (to create)\n\n", p.Name)
	if err := planview.WriteReport(w, rep); err != nil {
		return fmt.Errorf("write plan: %w", err)
	}
	if !rep.Allowed {
		return fmt.Errorf("%w (%s failed): nothing was created", ErrNotAllowed, strings.Join(rep.Failed(), ", "))
	}
	if o.DryRun {
		if exists {
			// The cluster's Version knows the ISO's size (the sequencer's check of its URL).
			if err := c.Get(ctx, client.ObjectKeyFromObject(v), v); err != nil {
				return fmt.Errorf("get version %s: %w", v.Name, err)
			}
		}
		return WriteDrains(ctx, w, c, o.Namespace, v, p)
	}
	if !o.Yes {
		if err := Confirm(w, o.In, o.Interactive, "Proceed?", "nothing was created"); err != nil {
			return err
		}
	}
	if err := Create(ctx, c, v, p, exists); err != nil {
		return err
	}
	verb := "Created"
	if exists {
		verb = "Reused"
	}
	fmt.Fprintf(w, "\n%s version %s; created upgradeplan %s. Following it (an interrupt stops following, not the upgrade).\n\n", verb, v.Name, p.Name)
	return o.Follow(ctx, p.Name)
}

// WriteDrains writes what a dry run adds to the judgement: each node plan p works on in upgrade
// order, with the pods its drain would evict now (DrainPreview), then what each node needs of
// disk and images for v (DiskPreview).
func WriteDrains(ctx context.Context, w io.Writer, c client.Reader, namespace string, v *v1beta1.Version, p *v1beta1.UpgradePlan) error {
	keep, err := labels.Parse(SequencerPods)
	if err != nil {
		return fmt.Errorf("sequencer pods selector: %w", err)
	}
	drains, err := DrainPreview(ctx, c, p, namespace, keep)
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "\nDrains, in upgrade order (each node cordoned, drained, stepped and uncordoned in turn;")
	fmt.Fprintln(w, "mirror pods, DaemonSet pods and finished pods stay):")
	for _, d := range drains {
		role := ""
		if d.ControlPlane {
			role = " (control plane)"
		}
		if len(d.Pods) == 0 {
			fmt.Fprintf(w, "  %s%s: nothing to evict\n", d.Node, role)
			continue
		}
		fmt.Fprintf(w, "  %s%s: %d pods to evict: %s\n", d.Node, role, len(d.Pods), strings.Join(d.Pods, ", "))
	}
	nodes := make([]string, 0, len(drains))
	for _, d := range drains {
		nodes = append(nodes, d.Node)
	}
	needs, err := DiskPreview(ctx, c, v, nodes)
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "\nDisk and images per node (the ISO into the agent's cache, then the release's images into containerd;")
	fmt.Fprintln(w, "what the node's agent already reports for this ISO is left out):")
	tw := planview.NewTable(w)
	fmt.Fprintln(tw, "  NODE\tISO TO DOWNLOAD\tCACHE FREE\tFITS\tIMAGES TO PRELOAD\tARCHIVE BYTES")
	for _, n := range needs {
		images := "unknown until the ISO is read"
		if n.ImagesTotal != Unknown {
			images = fmt.Sprintf("%d of %d", n.ImagesLeft, n.ImagesTotal)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\n", n.Node, sizeOrUnknown(n.ISOBytes), sizeOrUnknown(n.FreeBytes), n.Fits, images, sizeOrUnknown(n.PreloadBytes))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, "\nDry run: nothing was created.")
	return err
}

// sizeOrUnknown prints a byte count for humans, "unknown" for Unknown.
func sizeOrUnknown(n int64) string {
	if n == Unknown {
		return "unknown"
	}
	return forecast.Bytes(n)
}

// PlanVerb is `upgrade-repo plan` once its flags are parsed: with a cluster (c) and no target
// (o.To), every Version of the cluster judged (Versions); else the judgement of o (Preview),
// written to w as output says (text or json). A refused upgrade returns ErrNotAllowed.
func PlanVerb(ctx context.Context, w io.Writer, c client.Reader, o PreviewOptions, output string, hc *http.Client) error {
	if c != nil && o.To == "" {
		vs, err := Versions(ctx, c, o, hc)
		switch {
		case err != nil:
			return err
		case output == "json":
			return planview.Encode(w, vs)
		}
		return planview.WriteVersions(w, vs)
	}
	rep, err := Preview(ctx, o, c, hc)
	if err != nil {
		return err
	}
	if output == "json" {
		if err := planview.Encode(w, rep); err != nil {
			return fmt.Errorf("write plan: %w", err)
		}
	} else if err := planview.WriteReport(w, rep); err != nil {
		return fmt.Errorf("write plan: %w", err)
	}
	if !rep.Allowed {
		return ErrNotAllowed
	}
	return nil
}
