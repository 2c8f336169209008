package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/cmd/internal/kubeclient"
	"github.com/upgrade-repo/upgrade-repo/internal/redact"
	"github.com/upgrade-repo/upgrade-repo/planctl"
	"github.com/upgrade-repo/upgrade-repo/planview"
)

// sequencerPods selects the sequencer's own replicas among the pods of its namespace, as the
// chart passes it to the sequencer's --keep-pods: a drain leaves them.
const sequencerPods = "app.kubernetes.io/component=sequencer"

// upgradeApplyOptions are the flags of `upgrade apply`.
type upgradeApplyOptions struct {
	req         planctl.Request
	release     string
	yes, dryRun bool
	timeout     time.Duration
	kubeclient.Options
}

// applyEnv is what apply talks to besides the cluster's objects: the API server's version (nil:
// the control plane's kubelets tell it), the web for the checksum file and the release metadata,
// the operator's answer, and the clock of the status tables.
type applyEnv struct {
	c             client.WithWatch
	serverVersion func() (string, error)
	hc            *http.Client
	// stdin is where the answer to "Proceed?" is read; interactive says it is a terminal.
	stdin       io.Reader
	interactive bool
	now         func() time.Time
}

// runUpgradeApply judges an upgrade to a release ISO against the cluster, creates its Version and
// UpgradePlan once allowed and confirmed, and follows the plan to its end.
func runUpgradeApply(ctx context.Context, a *app, args []string) error {
	var o upgradeApplyOptions
	fset := verbFlagSet(a, "apply",
		"usage: upgrade-repo upgrade apply --iso-url URL [--iso-checksum sha512:HEX] [--version NAME] [--name PLAN] [--yes] [--dry-run] [--timeout D] [flags]",
		"exit status: 0 the plan Succeeded, 1 refused, Failed or deleted, 2 usage, 3 --timeout")
	fset.StringVar(&o.req.ISOURL, "iso-url", "", "the release ISO's `URL` (http or https)")
	fset.StringVar(&o.req.Checksum, "iso-checksum", "", "the ISO's `sha512:HEX`; default: read from the file at the ISO's URL with "+planctl.ChecksumSuffix)
	fset.StringVar(&o.req.Version, "version", "", "the Version's `name`; default: the release version in the ISO's file name")
	fset.StringVar(&o.req.Plan, "name", "", "the UpgradePlan's `name`; default: to-VERSION, dots as dashes")
	fset.StringVar(&o.req.UpgradeImage, "upgrade-image", "", "the `image` of the release's upgrade steps (spec.upgrade); default: the sequencer's")
	fset.BoolVar(&o.req.Force, "force", false, "turn the failures of skippable policies into warnings (spec.force)")
	fset.BoolVar(&o.req.AllowPrerelease, "allow-prerelease", false, "allow a pre-release target (spec.allowPrerelease)")
	fset.StringVar(&o.release, "release", "", "the target's harvester-release.yaml (a `file`, its URL or a repo's base URL); default: read from the ISO's URL through ranges, else judged by the sequencer once it reads the ISO")
	fset.BoolVar(&o.yes, "yes", false, "do not ask before creating the plan (required when stdin is not a terminal)")
	fset.BoolVar(&o.dryRun, "dry-run", false, "print the judgement, the node order and what each drain would evict; create nothing")
	fset.DurationVar(&o.timeout, "timeout", 0, "stop following the plan after this `duration` and exit 3 (the plan goes on); 0 waits for its end")
	o.AddFlags(fset)
	pos, help, err := parseVerbArgs(a.stdout, fset, args)
	if help || err != nil {
		return err
	}
	switch {
	case len(pos) > 0:
		return fmt.Errorf("%w: upgrade apply takes no arguments, got %q", errUsage, pos)
	case o.req.ISOURL == "":
		return fmt.Errorf("%w: --iso-url is required", errUsage)
	case o.timeout < 0:
		return fmt.Errorf("%w: --timeout must not be negative", errUsage)
	}
	if err := o.Check(); err != nil {
		return err
	}
	// Every flag is judged before the kubeconfig is read: the URL's scheme, the checksum's form
	// and the names the objects would take. Without --iso-checksum the checksum file is read
	// later, so a well-formed stand-in takes its place here.
	early := o.req
	if early.Checksum == "" {
		early.Checksum = "sha512:" + strings.Repeat("0", 128)
	}
	if _, _, err := early.Objects(); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	cfg, err := o.Config()
	if err != nil {
		return err
	}
	c, err := kubeclient.Retrying(cfg, o.APITimeout, a.stderr)
	if err != nil {
		return err
	}
	// ServerVersion takes no context: its own timeout bounds each attempt.
	dcfg := rest.CopyConfig(cfg)
	dcfg.Timeout = planctl.DefaultAttemptTimeout
	dc, err := discovery.NewDiscoveryClientForConfig(dcfg)
	if err != nil {
		return fmt.Errorf("connect to the cluster: %w", err)
	}
	env := applyEnv{
		c: c, hc: &http.Client{Timeout: 30 * time.Second}, stdin: os.Stdin, interactive: isTerminal(os.Stdin), now: time.Now,
		serverVersion: func() (string, error) {
			var v string
			err := c.Do(ctx, "get the API server's version", func(context.Context) error {
				sv, err := dc.ServerVersion()
				if err == nil {
					v = sv.GitVersion
				}
				return err
			})
			if err != nil {
				return "", fmt.Errorf("read the API server's version: %w", err)
			}
			return v, nil
		},
	}
	return upgradeApply(ctx, a, env, o)
}

// isTerminal reports whether f is a terminal (the ioctl x/term makes on Linux).
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// upgradeApply is apply once its flags are parsed: the checksum, the objects, the judgement,
// the question, the creation and the following, in that order; nothing is created before the
// question is answered yes.
func upgradeApply(ctx context.Context, a *app, env applyEnv, o upgradeApplyOptions) error {
	from := ""
	if o.req.Checksum == "" {
		sum, err := planctl.FetchChecksum(ctx, env.hc, o.req.ISOURL)
		if err != nil {
			return fmt.Errorf("no --iso-checksum, and the %s file beside the ISO: %w", planctl.ChecksumSuffix, err)
		}
		o.req.Checksum = sum
		su, _ := planctl.ChecksumURL(o.req.ISOURL) // FetchChecksum parsed it
		from = " (read from " + redact.URL(su) + ")"
	}
	v, p, err := o.req.Objects()
	if err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	exists, err := planctl.Check(ctx, env.c, v, p)
	if err != nil {
		return err
	}
	po := planctl.PreviewOptions{To: v.Name, Namespace: o.Namespace, Force: o.req.Force, AllowPrerelease: o.req.AllowPrerelease,
		Release: o.release, VersionCreated: true, ISOURL: o.req.ISOURL, Plan: p}
	if env.serverVersion != nil {
		if po.CurrentKubernetes, err = env.serverVersion(); err != nil {
			return err
		}
	}
	rep, err := planctl.Preview(ctx, po, env.c, env.hc)
	if err != nil {
		return err
	}
	state := "to create"
	if exists {
		state = "exists with this ISO, reused"
	}
	w := a.stdout
	fmt.Fprintf(w, "Version:   %s (%s)\n", v.Name, state)
	fmt.Fprintf(w, "ISO:       %s\n", redact.URL(v.Spec.ISOURL))
	fmt.Fprintf(w, "Checksum:  %s%s\n", v.Spec.ISOChecksum, from)
	fmt.Fprintf(w, "Plan:      %s (to create)\n\n", p.Name)
	if err := planview.WriteReport(w, rep); err != nil {
		return fmt.Errorf("write plan: %w", err)
	}
	if !rep.Allowed {
		return fmt.Errorf("%w (%s failed): nothing was created", errNotAllowed, strings.Join(rep.Failed(), ", "))
	}
	if o.dryRun {
		if exists {
			// The cluster's Version knows the ISO's size (the sequencer's check of its URL).
			if err := env.c.Get(ctx, client.ObjectKeyFromObject(v), v); err != nil {
				return fmt.Errorf("get version %s: %w", v.Name, err)
			}
		}
		return printDrains(ctx, w, env.c, o.Namespace, v, p)
	}
	if !o.yes {
		if err := confirm(w, env.stdin, env.interactive, "Proceed?", "nothing was created"); err != nil {
			return err
		}
	}
	if err := planctl.Create(ctx, env.c, v, p, exists); err != nil {
		return err
	}
	verb := "Created"
	if exists {
		verb = "Reused"
	}
	fmt.Fprintf(w, "\n%s version %s; created upgradeplan %s. Following it (an interrupt stops following, not the upgrade).\n\n", verb, v.Name, p.Name)
	return followWithTimeout(ctx, env.c, p.Name, o.timeout, func(ctx context.Context) error {
		return upgradeStatus(ctx, a, env.c, upgradeStatusOptions{plan: p.Name, output: "text", watch: true,
			Options: o.Options, terminal: stdoutTerminal(a)}, env.now)
	})
}

// confirm asks question and returns nil when the answer is yes. Without a terminal to ask on
// (interactive false) it refuses with a usage error asking for --yes; any answer but y or yes is
// a no. undone says what a refusal leaves, for its error.
func confirm(w io.Writer, in io.Reader, interactive bool, question, undone string) error {
	if !interactive {
		return fmt.Errorf("%w: stdin is not a terminal, so there is no one to ask: give --yes; %s", errUsage, undone)
	}
	fmt.Fprintf(w, "\n%s [y/N] ", question)
	answer, _ := bufio.NewReader(in).ReadString('\n')
	if ans := strings.ToLower(strings.TrimSpace(answer)); ans != "y" && ans != "yes" {
		return errors.New("not confirmed: " + undone)
	}
	return nil
}

// printDrains prints what a dry run adds to the judgement: each node plan p works on in upgrade
// order, with the pods its drain would evict now.
func printDrains(ctx context.Context, w io.Writer, c client.Reader, namespace string, v *v1beta1.Version, p *v1beta1.UpgradePlan) error {
	keep, err := labels.Parse(sequencerPods)
	if err != nil {
		return fmt.Errorf("sequencer pods selector: %w", err)
	}
	drains, err := planctl.DrainPreview(ctx, c, p, namespace, keep)
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
	needs, err := planctl.DiskPreview(ctx, c, v, nodes)
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "\nDisk and images per node (the ISO into the agent's cache, then the release's images into containerd;")
	fmt.Fprintln(w, "what the node's agent already reports for this ISO is left out):")
	tw := planview.NewTable(w)
	fmt.Fprintln(tw, "  NODE\tISO TO DOWNLOAD\tCACHE FREE\tFITS\tIMAGES TO PRELOAD\tARCHIVE BYTES")
	for _, n := range needs {
		images := "unknown until the ISO is read"
		if n.ImagesTotal != planctl.Unknown {
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

// sizeOrUnknown prints a byte count for humans, "unknown" for planctl.Unknown.
func sizeOrUnknown(n int64) string {
	if n == planctl.Unknown {
		return "unknown"
	}
	return planview.Bytes(n)
}
