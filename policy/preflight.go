package policy

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Names of the pre-flight checks the field learned, after the version checks in Result.Checks.
const (
	CheckNodeDiskSpace     = "NodeDiskSpace"
	CheckNodesSchedulable  = "NodesSchedulable"
	CheckDrainable         = "Drainable"
	CheckCertificateExpiry = "CertificateExpiry"
)

// DefaultCertificateWindow is the plan's window when its duration is not known: a certificate
// that expires within it may expire while the plan runs.
const DefaultCertificateWindow = 24 * time.Hour

// Certificate is a control-plane certificate and when it expires.
type Certificate struct {
	// Node is the control-plane node that serves it.
	Node string
	// Name says which certificate it is (the API server's serving certificate).
	Name string
	// NotAfter is when it expires.
	NotAfter time.Time
}

// Preflight holds the facts of the pre-flight checks. The zero value checks nothing: each check
// passes saying what it did not check.
type Preflight struct {
	// DiskChecked is true when every node's disk was forecast (the release's size and each
	// node's file systems known); DiskProblems gives, by node, why the plan's bytes do not fit.
	DiskChecked  bool
	DiskProblems map[string][]string
	// DiskNote says what was not forecast, for the passing message.
	DiskNote string
	// CordonedNodes names the nodes of the plan that someone else cordoned.
	CordonedNodes []string
	// UndrainableBudgets say which PodDisruptionBudgets no drain can ever satisfy and on which
	// nodes their pods run.
	UndrainableBudgets []string
	// Certificates are the control-plane certificates read; CertificatesNote says what could
	// not be read.
	Certificates     []Certificate
	CertificatesNote string
	// Now and Window bound the certificate check: a certificate expiring before Now+Window
	// fails it. Window 0 is DefaultCertificateWindow.
	Now    time.Time
	Window time.Duration
}

// preflightChecks judges in's pre-flight facts. Each is skippable (Force) and transient: the
// operator frees space, uncordons a node, changes a budget or renews a certificate, and the
// plan goes on.
func preflightChecks(in Input) []Check {
	p := in.Preflight
	var out []Check

	disk := Check{Name: CheckNodeDiskSpace, Transient: true,
		Description: "every node has room for the ISO and the release's images, below the kubelet's image GC threshold"}
	var problems []string
	for _, n := range slices.Sorted(maps.Keys(p.DiskProblems)) {
		for _, m := range p.DiskProblems[n] {
			problems = append(problems, "node "+n+": "+m)
		}
	}
	pass := "every node has room"
	if !p.DiskChecked {
		pass = "not checked: " + orDefault(p.DiskNote, "the release's size or the nodes' file systems are not known")
	} else if p.DiskNote != "" {
		pass += "; " + p.DiskNote
	}
	out = append(out, force(result(disk, len(problems) == 0, pass, strings.Join(problems, "; ")), in.Force))

	out = append(out, force(result(Check{Name: CheckNodesSchedulable, Transient: true,
		Description: "no node of the plan is cordoned by someone else"},
		len(p.CordonedNodes) == 0, "no node is cordoned",
		"cordoned by someone else (the plan's drain and uncordon would undo it): "+strings.Join(p.CordonedNodes, ", ")), in.Force))

	out = append(out, force(result(Check{Name: CheckDrainable, Transient: true,
		Description: "no PodDisruptionBudget forbids every eviction, which would keep a drain waiting for ever"},
		len(p.UndrainableBudgets) == 0, "every PodDisruptionBudget allows a drain",
		strings.Join(p.UndrainableBudgets, "; ")), in.Force))

	out = append(out, force(certificates(p), in.Force))
	return out
}

func certificates(p Preflight) Check {
	c := Check{Name: CheckCertificateExpiry, Transient: true,
		Description: "no control-plane certificate expires within the plan's window (kubeadm renews them as it upgrades each control plane)"}
	window := p.Window
	if window <= 0 {
		window = DefaultCertificateWindow
	}
	if len(p.Certificates) == 0 {
		return result(c, true, "not checked: "+orDefault(p.CertificatesNote, "no control-plane certificate was read"), "")
	}
	certs := slices.Clone(p.Certificates)
	slices.SortFunc(certs, func(a, b Certificate) int { return a.NotAfter.Compare(b.NotAfter) })
	var expiring []string
	for _, ct := range certs {
		if ct.NotAfter.Before(p.Now.Add(window)) {
			expiring = append(expiring, fmt.Sprintf("%s of node %s expires %s (in %s)", ct.Name, ct.Node,
				ct.NotAfter.UTC().Format(time.RFC3339), ct.NotAfter.Sub(p.Now).Round(time.Minute)))
		}
	}
	first := certs[0]
	pass := fmt.Sprintf("the first to expire, %s of node %s, expires %s, after the plan's window of %s", first.Name, first.Node,
		first.NotAfter.UTC().Format(time.RFC3339), window)
	if p.CertificatesNote != "" {
		pass += "; " + p.CertificatesNote
	}
	return result(c, len(expiring) == 0, pass, strings.Join(expiring, "; ")+
		fmt.Sprintf(": within the plan's window of %s; renew them (kubeadm certs renew) before the upgrade", window))
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
