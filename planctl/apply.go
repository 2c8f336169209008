package planctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/checksum"
	"github.com/upgrade-repo/upgrade-repo/internal/redact"
	"github.com/upgrade-repo/upgrade-repo/planview"
)

// ErrInvalid marks a request that cannot be made as given (a URL that is not http or https, a
// checksum that is not a sha512, a name Kubernetes refuses): the operator's to fix.
var ErrInvalid = errors.New("invalid request")

// ErrConflict marks a request that the cluster's objects contradict: a Version of the same name
// for another ISO, an UpgradePlan of the same name.
var ErrConflict = errors.New("conflict with the cluster")

// ChecksumSuffix is what is appended to the ISO URL's path to find its checksum file, as
// Harvester publishes it (harvester-v1.5.2-amd64.iso.sha512, sha512sum's output).
const ChecksumSuffix = ".sha512"

// maxChecksumFile bounds the checksum file read: a few lines of sha512sum output.
const maxChecksumFile = 64 << 10

// Request is what apply creates: a Version for a release ISO and an UpgradePlan that targets it.
type Request struct {
	// ISOURL is where the release ISO is downloaded from (http or https).
	ISOURL string
	// Checksum is the ISO's sha512, in any form package checksum reads.
	Checksum string
	// Version names the Version; VersionName(ISOURL) when empty.
	Version string
	// Plan names the UpgradePlan; PlanName(Version) when empty.
	Plan string
	// UpgradeImage is the plan's spec.upgrade; the sequencer's default image when empty.
	UpgradeImage string
	// Force is the plan's spec.force: the failures of skippable policies become warnings.
	Force bool
	// AllowPrerelease is the plan's spec.allowPrerelease.
	AllowPrerelease bool
}

// Objects builds the Version and the UpgradePlan of r, names defaulted. Its errors wrap
// ErrInvalid.
func (r Request) Objects() (*v1beta1.Version, *v1beta1.UpgradePlan, error) {
	u, err := url.Parse(r.ISOURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, nil, fmt.Errorf("%w: the ISO URL %q is not an http or https URL", ErrInvalid, redact.URL(r.ISOURL))
	}
	c, err := checksum.Parse(r.Checksum)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	sum := c.Hex()
	version := r.Version
	if version == "" {
		if version, err = VersionName(r.ISOURL); err != nil {
			return nil, nil, err
		}
	}
	if errs := validation.IsDNS1123Subdomain(version); len(errs) > 0 {
		return nil, nil, fmt.Errorf("%w: version %q cannot name a Version: %s", ErrInvalid, version, strings.Join(errs, "; "))
	}
	name := r.Plan
	if name == "" {
		name = PlanName(version)
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return nil, nil, fmt.Errorf("%w: %q cannot name an UpgradePlan: %s", ErrInvalid, name, strings.Join(errs, "; "))
	}
	v := &v1beta1.Version{
		ObjectMeta: metav1.ObjectMeta{Name: version},
		Spec:       v1beta1.VersionSpec{ISOURL: r.ISOURL, ISOChecksum: "sha512:" + sum},
	}
	p := &v1beta1.UpgradePlan{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1beta1.UpgradePlanSpec{Version: version, Force: r.Force, AllowPrerelease: r.AllowPrerelease},
	}
	if r.UpgradeImage != "" {
		img := r.UpgradeImage
		p.Spec.Upgrade = &img
	}
	return v, p, nil
}

// versionInName finds a release version at the end of an ISO's file name, once the extension and
// the architecture are cut: harvester-v1.5.2-amd64.iso gives v1.5.2, rel-1.6.0-rc1.iso 1.6.0-rc1.
var versionInName = regexp.MustCompile(`v?[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.]+)?$`)

// archSuffixes are the architectures release ISOs name after their version.
var archSuffixes = []string{"-amd64", "-arm64", "-x86_64", "-aarch64"}

// VersionName derives a Version's name from the ISO's file name: the release version it ends
// with (harvester-v1.5.2-amd64.iso gives v1.5.2). Its errors wrap ErrInvalid and ask for the
// name.
func VersionName(isoURL string) (string, error) {
	u, err := url.Parse(isoURL)
	if err != nil {
		return "", fmt.Errorf("%w: the ISO URL %q: %w", ErrInvalid, redact.URL(isoURL), redact.Error(err))
	}
	base := strings.TrimSuffix(strings.ToLower(path.Base(u.Path)), ".iso")
	for _, a := range archSuffixes {
		base = strings.TrimSuffix(base, a)
	}
	v := versionInName.FindString(base)
	if v == "" || len(validation.IsDNS1123Subdomain(v)) > 0 {
		return "", fmt.Errorf("%w: no release version in the ISO's file name %q: give the Version's name (--version)", ErrInvalid, path.Base(u.Path))
	}
	return v, nil
}

// PlanName is the default name of the plan that upgrades to version: "to-" and the version with
// its dots as dashes (to-v1-6-0), a DNS label, so that compatibility mode can name its Service
// after it.
func PlanName(version string) string {
	return "to-" + strings.ReplaceAll(strings.ToLower(version), ".", "-")
}

// ChecksumURL returns the URL of the checksum file beside the ISO: its path with ChecksumSuffix,
// the rest (host, query) as they are.
func ChecksumURL(isoURL string) (string, error) {
	u, err := url.Parse(isoURL)
	if err != nil {
		return "", fmt.Errorf("%w: the ISO URL %q: %w", ErrInvalid, redact.URL(isoURL), redact.Error(err))
	}
	u.Path += ChecksumSuffix
	u.RawPath = ""
	return u.String(), nil
}

// FetchChecksum reads the ISO's sha512 from the checksum file beside it (ChecksumURL), as
// sha512sum writes it ("HEX  NAME", one line per file; the line naming the ISO's file is taken,
// or the only one) or in BSD form ("SHA512 (NAME) = HEX"). It returns the lower-case hex digest.
// URLs in its errors are redacted.
func FetchChecksum(ctx context.Context, hc *http.Client, isoURL string) (string, error) {
	su, err := ChecksumURL(isoURL)
	if err != nil {
		return "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, su, nil)
	if err != nil {
		return "", fmt.Errorf("checksum file %s: %w", redact.URL(su), redact.Error(err))
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", fmt.Errorf("checksum file: %w", redact.Error(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("checksum file %s: %s", redact.URL(su), resp.Status)
	}
	u, _ := url.Parse(isoURL) // parsed by ChecksumURL already
	sum, err := checksum.ParseFile(io.LimitReader(resp.Body, maxChecksumFile), path.Base(u.Path))
	if err != nil {
		return "", fmt.Errorf("checksum file %s: %w", redact.URL(su), err)
	}
	return sum.Hex(), nil
}

// SameISO reports whether two Versions name the same ISO: the same URL and checksum.
func SameISO(a, b *v1beta1.Version) bool {
	as, aerr := checksum.Parse(a.Spec.ISOChecksum)
	bs, berr := checksum.Parse(b.Spec.ISOChecksum)
	return a.Spec.ISOURL == b.Spec.ISOURL && aerr == nil && berr == nil && as.Equal(bs)
}

// Check reads what the cluster already has of v and p, before anything is judged or created:
// exists is true when a Version of v's name names the same ISO (apply reuses it). A Version of
// that name for another ISO, or an UpgradePlan of p's name, is an error wrapping ErrConflict.
func Check(ctx context.Context, c client.Reader, v *v1beta1.Version, p *v1beta1.UpgradePlan) (exists bool, err error) {
	var cur v1beta1.Version
	switch err := c.Get(ctx, client.ObjectKeyFromObject(v), &cur); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return false, fmt.Errorf("get version %s: %w", v.Name, err)
	case !SameISO(&cur, v):
		return false, fmt.Errorf("%w: version %s exists for another ISO (%s): give another name (--version)",
			ErrConflict, v.Name, redact.URL(cur.Spec.ISOURL))
	default:
		exists = true
	}
	var plan v1beta1.UpgradePlan
	switch err := c.Get(ctx, client.ObjectKeyFromObject(p), &plan); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return false, fmt.Errorf("get upgradeplan %s: %w", p.Name, err)
	default:
		return false, fmt.Errorf("%w: upgradeplan %s exists (%s): give another name (--name), or delete it (upgrade abort %s)",
			ErrConflict, p.Name, plan.Status.Phase.Name(), p.Name)
	}
	return exists, nil
}

// Create creates v, unless versionExists (Check said so), then p. When p cannot be created, a
// Version created here is deleted again, so that a failed apply leaves nothing. A Create whose
// answer was lost (RetryingClient) is taken for done when what exists is what was asked for: a
// Version of the same ISO, a plan of the same target.
func Create(ctx context.Context, c client.Client, v *v1beta1.Version, p *v1beta1.UpgradePlan, versionExists bool) error {
	if !versionExists {
		if err := createVersion(ctx, c, v); err != nil {
			return err
		}
	}
	if _, err := createPlan(ctx, c, p); err != nil {
		if !versionExists {
			if derr := c.Delete(ctx, v, client.Preconditions{UID: &v.UID}); client.IgnoreNotFound(derr) != nil {
				err = errors.Join(err, fmt.Errorf("delete version %s again: %w", v.Name, derr))
			}
		}
		return err
	}
	return nil
}

// createVersion creates v; a Version of its name for the same ISO that exists already is read
// into v.
func createVersion(ctx context.Context, c client.Client, v *v1beta1.Version) error {
	err := c.Create(ctx, v)
	if err == nil {
		return nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create version %s: %w", v.Name, err)
	}
	var cur v1beta1.Version
	if gerr := c.Get(ctx, client.ObjectKeyFromObject(v), &cur); gerr != nil {
		return fmt.Errorf("create version %s: %w; and get it: %w", v.Name, err, gerr)
	}
	if !SameISO(&cur, v) {
		return fmt.Errorf("%w: version %s exists for another ISO (%s)", ErrConflict, v.Name, redact.URL(cur.Spec.ISOURL))
	}
	*v = cur
	return nil
}

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
