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

// DefaultCertificateWindow is the shortest window of the certificate check, and the window
// when the plan's duration is not estimated: a certificate that expires within it may expire
// while the plan runs.
const DefaultCertificateWindow = 24 * time.Hour

// CertificateWindow is the window a control-plane certificate must outlast for a plan estimated
// to take estimate (0: not estimated): twice the estimate, the margin for an estimate that rests
// on assumptions or on earlier plans, never less than DefaultCertificateWindow.
func CertificateWindow(estimate time.Duration) time.Duration {
	return max(2*estimate, DefaultCertificateWindow)
}

// Renewal says whether the upgrade itself renews a certificate.
type Renewal string

// The renewals of a control-plane certificate.
const (
	// NotRenewed: kubeadm's upgrade does not renew it (the kubelet's serving certificate, which
	// the kubelet makes or has signed itself). The zero value: a certificate of unknown origin
	// is taken not to be renewed.
	NotRenewed Renewal = ""
	// RenewedByKubeadm: a certificate of kubeadm's PKI (the API server's, etcd's), which kubeadm
	// renews as it upgrades that node (upgrade apply on the first control plane, upgrade node
	// on the others) unless told not to.
	RenewedByKubeadm Renewal = "kubeadm"
	// RenewedOnRestart: the self-signed certificate a component makes as it starts (the
	// scheduler's and the controller manager's, without a certificate of their own), made anew
	// when the upgrade restarts it with its new manifest.
	RenewedOnRestart Renewal = "restart"
)

// Certificate is a control-plane certificate and when it expires.
type Certificate struct {
	// Node is the control-plane node that serves it.
	Node string
	// Component is what serves it: kube-apiserver, etcd, kubelet, kube-scheduler,
	// kube-controller-manager.
	Component string
	// CommonName is its subject's common name.
	CommonName string
	// NotAfter is when it expires.
	NotAfter time.Time
	// Renewal says whether the upgrade renews it.
	Renewal Renewal
}

// String names the certificate for the check's messages.
func (c Certificate) String() string {
	s := c.Component + "'s serving certificate on node " + c.Node
	if c.CommonName != "" {
		s += " (CN " + c.CommonName + ")"
	}
	return s
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
	// Now and Estimate bound the certificate check: a certificate expiring before
	// Now+CertificateWindow(Estimate) fails it. Estimate is how long the plan is expected to
	// take (the time estimate's total); 0 when not estimated.
	Now      time.Time
	Estimate time.Duration
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

// ClientCertificatesUnchecked says which control-plane certificates CertificateExpiry does not
// check, and why: those a control plane presents as a client, which no TLS handshake with it
// shows. kubeadm issues them with the serving certificates of the same node (init, join, certs
// renew) and `kubeadm upgrade` renews them together, so the serving certificates' expiry stands
// for theirs, unless one was renewed alone.
const ClientCertificatesUnchecked = "not checked: kubeadm's client certificates (front-proxy-client, apiserver-kubelet-client, " +
	"apiserver-etcd-client, etcd-healthcheck-client, the kubeconfigs'), which no TLS handshake shows; " +
	"kubeadm upgrade renews them with the serving certificates"

func certificates(p Preflight) Check {
	c := Check{Name: CheckCertificateExpiry, Transient: true,
		Description: "no control-plane serving certificate (the API server's, etcd's for clients and for peers, the kubelet's, " +
			"the scheduler's and the controller manager's, as a TLS handshake with each control plane shows it) expires within " +
			"the plan's window (twice its estimated duration, at least 24h); client certificates are not seen, and not checked"}
	if len(p.Certificates) == 0 {
		return result(c, true, "not checked: "+orDefault(p.CertificatesNote, "no control-plane certificate was read"), "")
	}
	window := CertificateWindow(p.Estimate)
	certs := slices.Clone(p.Certificates)
	slices.SortStableFunc(certs, func(a, b Certificate) int { return a.NotAfter.Compare(b.NotAfter) })
	var expiring []string
	renewed, kept := false, false
	for _, ct := range certs {
		if !ct.NotAfter.Before(p.Now.Add(window)) {
			continue
		}
		expiring = append(expiring, fmt.Sprintf("%s expires %s (in %s; %s)", ct,
			ct.NotAfter.UTC().Format(time.RFC3339), ct.NotAfter.Sub(p.Now).Round(time.Minute), renewal(ct)))
		switch ct.Renewal {
		case RenewedByKubeadm, RenewedOnRestart:
			renewed = true
		default:
			kept = true
		}
	}
	within := fmt.Sprintf("the plan's window of %s (%s)", window, windowBasis(p.Estimate, window))
	first := certs[0]
	pass := fmt.Sprintf("the first to expire, %s, expires %s, after %s", first,
		first.NotAfter.UTC().Format(time.RFC3339), within)
	if p.CertificatesNote != "" {
		pass += "; " + p.CertificatesNote
	}
	pass += "; " + ClientCertificatesUnchecked
	// The upgrade renews some only as it reaches their node: one that expires before then stops
	// the control plane mid-upgrade, so they are renewed before it starts too.
	var how []string
	if renewed {
		how = append(how, "kubeadm certs renew on the node, for kubeadm's")
	}
	if kept {
		how = append(how, "the kubelet's by its certificate rotation or a new certificate")
	}
	fail := strings.Join(expiring, "; ") +
		fmt.Sprintf(": within %s; renew them before the upgrade (%s), or force", within, strings.Join(how, "; "))
	if p.CertificatesNote != "" {
		fail += "; " + p.CertificatesNote
	}
	fail += "; " + ClientCertificatesUnchecked
	return result(c, len(expiring) == 0, pass, fail)
}

// renewal says whether the upgrade renews ct.
func renewal(ct Certificate) string {
	switch ct.Renewal {
	case RenewedByKubeadm:
		return "kubeadm renews it as it upgrades that node, which may be after it expires"
	case RenewedOnRestart:
		return "made anew when the upgrade restarts " + ct.Component + " on that node"
	}
	return "not renewed by kubeadm upgrade apply"
}

// windowBasis says where window, for a plan estimated to take estimate, comes from.
func windowBasis(estimate, window time.Duration) string {
	switch {
	case estimate <= 0:
		return "the plan's duration is not estimated"
	case window == DefaultCertificateWindow:
		return fmt.Sprintf("at least %s; the plan is estimated to take %s", DefaultCertificateWindow, estimate.Round(time.Minute))
	}
	return fmt.Sprintf("twice the plan's estimate of %s", estimate.Round(time.Minute))
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
