// Package kubeadm is the node step of a kubeadm cluster's release: it moves one node to the
// release's Kubernetes version the way kubeadm's upgrade procedure does, with the binaries the
// release carries.
//
// On the first control-plane node (the cluster's kubeadm configuration still names an older
// version): kubeadm from the release, `kubeadm upgrade plan VERSION` then `kubeadm upgrade apply
// VERSION --yes`. On every other node: `kubeadm upgrade node`. The release's kubeadm runs from
// /var/lib/upgrade-repo/kubeadm and replaces the node's only after that: a release whose control
// plane does not come up (kubeadm restores the node's manifests) leaves every binary of the node
// as it was, and the step's error names the component. Then kubeadm, the kubelet and kubectl from
// the release, replaced atomically, the kubelet restarted, and the step waits for the node to
// report the new kubelet version and be Ready. Before it changes anything it refuses what
// kubeadm's version-skew rules forbid (a downgrade, a minor version skipped, a kubelet newer than
// the control plane) unless the plan says force; a node already at the version is left alone.
//
// The step runs in a privileged pod that sees the node's / at Step.Root and the node's PID
// namespace; kubeadm and systemctl run in the node's namespaces through Host.
//
// Imports: nodestep, backoff, checksum, client-go's types through Cluster, and the standard library.
package kubeadm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/version"

	"github.com/upgrade-repo/upgrade-repo/checksum"
	"github.com/upgrade-repo/upgrade-repo/internal/backoff"
	"github.com/upgrade-repo/upgrade-repo/nodestep"
)

// BinDir is the release directory holding a platform's kubeadm, kubelet and kubectl and their
// nodestep.SumsFile, for GOOS and GOARCH.
func BinDir(goos, goarch string) string {
	return path.Join("kubernetes", goos+"-"+goarch)
}

// Host runs programs of the node in the node's namespaces.
type Host interface {
	// Run runs name with args as the node's own processes run, and returns its combined output.
	// A non-zero exit is an error that includes the end of the output.
	Run(ctx context.Context, name string, args ...string) ([]byte, error)
}

// NodeInfo is what the step reads of its node.
type NodeInfo struct {
	// KubeletVersion is the kubelet version the node reports.
	KubeletVersion string
	// Ready is the node's Ready condition.
	Ready bool
}

// Cluster is what the step reads from the API server. Calls may fail while the API server
// restarts; the step retries them.
type Cluster interface {
	// Node reads the node named name.
	Node(ctx context.Context, name string) (NodeInfo, error)
	// ControlPlaneVersion is the Kubernetes version of the cluster's control plane as kubeadm
	// records it (kubeadm-config's ClusterConfiguration.kubernetesVersion).
	ControlPlaneVersion(ctx context.Context) (string, error)
	// ControlPlanePods are the control-plane pods of the node named node (kube-system, label
	// tier=control-plane: kubeadm's static pods as their mirror pods show them).
	ControlPlanePods(ctx context.Context, node string) ([]PodReadiness, error)
}

// PodReadiness is a pod's Ready condition.
type PodReadiness struct {
	// Name is the pod's name.
	Name string
	// Ready is its Ready condition.
	Ready bool
	// Since is when that condition last changed.
	Since time.Time
}

// ErrRefused is returned, before anything changed, for an upgrade the version-skew rules forbid.
var ErrRefused = errors.New("upgrade refused")

// Step upgrades one node. Every field but Force, Log and the durations is required.
type Step struct {
	// Node is the node's name.
	Node string
	// Target is the release's Kubernetes version (v1.34.4).
	Target string
	// Force lets a skippable refusal through with a warning, and is passed to kubeadm.
	Force bool
	// Rollback says the plan rolls an upgrade back: a downgrade within one minor version is
	// allowed (kubeadm upgrade apply --force on the first control plane, the previous release's
	// kubelet everywhere) and nothing else.
	Rollback bool
	// Root is where the node's / is seen (/host).
	Root string
	// Host runs kubeadm and systemctl on the node.
	Host Host
	// Cluster reads the node and the control plane's version.
	Cluster Cluster
	// Fetch reads the release's binaries from the node's agent.
	Fetch *nodestep.Fetcher
	// Report tells the agent the step's stage.
	Report *nodestep.Reporter
	// Log receives what the step does and kubeadm's output.
	Log *slog.Logger
	// Etcd reads the cluster's etcd on a control-plane node with a local member; nil elsewhere.
	// Before such a node changes anything, and before its step ends, every member must be
	// healthy: its member goes down while kubeadm restarts it.
	Etcd Etcd
	// EtcdTimeout bounds each wait for every etcd member to be healthy (default 30m).
	EtcdTimeout time.Duration
	// ReadyTimeout bounds the wait for the node to report the new kubelet (default 5m).
	ReadyTimeout time.Duration
	// Poll is the interval of that wait and of the API retries (default 2s).
	Poll time.Duration

	// staleGrace replaces staleReadyGrace in tests.
	staleGrace time.Duration
}

// Action is what a node needs.
type Action int

// The actions, from none to the most.
const (
	// Done: the node is at the target already.
	Done Action = iota
	// Apply: `kubeadm upgrade apply` (the first control-plane node).
	Apply
	// UpgradeNode: `kubeadm upgrade node` (every other node).
	UpgradeNode
)

func (a Action) String() string {
	return [...]string{"nothing to do", "kubeadm upgrade apply", "kubeadm upgrade node"}[a]
}

// Facts is what Decide judges.
type Facts struct {
	// Target is the release's version.
	Target string
	// ControlPlane is the control plane's version (kubeadm-config).
	ControlPlane string
	// Kubelet is the node's kubelet version.
	Kubelet string
	// IsControlPlane says the node runs the control plane's static pods.
	IsControlPlane bool
	// APIServer is the oldest version among this node's kube-apiserver,
	// kube-controller-manager and kube-scheduler static pods (their image tags), for a
	// control-plane node: a step cut short between two of them is not done.
	APIServer string
	// Force lets skippable refusals through.
	Force bool
	// Rollback allows a downgrade within one minor version, and only that (DecideRollback).
	Rollback bool
}

// versions parses the release's, the control plane's and the node's kubelet versions.
func (f Facts) versions() (target, cp, kubelet *version.Version, err error) {
	if target, err = version.ParseGeneric(f.Target); err != nil {
		return nil, nil, nil, fmt.Errorf("release's Kubernetes version %q: %w", f.Target, err)
	}
	if cp, err = version.ParseGeneric(f.ControlPlane); err != nil {
		return nil, nil, nil, fmt.Errorf("control plane's version %q: %w", f.ControlPlane, err)
	}
	if kubelet, err = version.ParseGeneric(f.Kubelet); err != nil {
		return nil, nil, nil, fmt.Errorf("node's kubelet version %q: %w", f.Kubelet, err)
	}
	return target, cp, kubelet, nil
}

// Decide says what the node needs, or why the upgrade is refused (an error wrapping
// ErrRefused), with the warnings of the refusals Force let through. It is kubeadm's version-skew
// policy for an upgrade: never a downgrade, at most one minor version at a time, the kubelets
// never newer than the control plane.
func Decide(f Facts) (Action, []string, error) {
	if f.Rollback {
		return DecideRollback(f)
	}
	target, cp, kubelet, err := f.versions()
	if err != nil {
		return 0, nil, err
	}
	apiOK := !f.IsControlPlane
	if f.IsControlPlane && f.APIServer != "" {
		if v, err := version.ParseGeneric(f.APIServer); err == nil {
			apiOK = v.AtLeast(target)
		}
	}
	if kubelet.EqualTo(target) && cp.AtLeast(target) && apiOK {
		return Done, nil, nil
	}
	var refusals []string
	switch {
	case target.LessThan(cp):
		refusals = append(refusals, fmt.Sprintf("%s is a downgrade of the control plane at %s", f.Target, f.ControlPlane))
	case target.Major() != cp.Major():
		refusals = append(refusals, fmt.Sprintf("%s changes the major version of the control plane at %s", f.Target, f.ControlPlane))
	case target.Minor() > cp.Minor()+1:
		refusals = append(refusals, fmt.Sprintf("%s skips a minor version: the control plane is at %s, upgrade one minor version at a time", f.Target, f.ControlPlane))
	}
	if target.LessThan(kubelet) {
		refusals = append(refusals, fmt.Sprintf("%s is a downgrade of the node's kubelet at %s", f.Target, f.Kubelet))
	}
	if len(refusals) > 0 && !f.Force {
		return 0, nil, fmt.Errorf("%w: %s (the plan's force lets it through)", ErrRefused, strings.Join(refusals, "; "))
	}
	if !f.IsControlPlane && cp.LessThan(target) && !f.Force {
		// Not skippable by kubeadm either: `kubeadm upgrade node` would configure a kubelet
		// newer than the API server.
		return 0, nil, fmt.Errorf("%w: the control plane is at %s; it is upgraded to %s before the other nodes, so that no kubelet is newer than the control plane", ErrRefused, f.ControlPlane, f.Target)
	}
	if f.IsControlPlane && cp.LessThan(target) {
		return Apply, refusals, nil
	}
	return UpgradeNode, refusals, nil
}

// Run upgrades the node: decide, report KubernetesUpgrading, kubeadm, kubelet, wait, report
// KubernetesUpgraded. A node at the target returns nil having changed nothing.
func (s *Step) Run(ctx context.Context) error {
	if s.ReadyTimeout <= 0 {
		s.ReadyTimeout = 5 * time.Minute
	}
	if s.Poll <= 0 {
		s.Poll = 2 * time.Second
	}
	if s.EtcdTimeout <= 0 {
		s.EtcdTimeout = 30 * time.Minute
	}
	log := s.Log.With("node", s.Node, "target", s.Target)
	f, err := s.facts(ctx)
	if err != nil {
		return err
	}
	action, warnings, err := Decide(f)
	log.Info("judged", "controlPlane", f.ControlPlane, "kubelet", f.Kubelet, "isControlPlane", f.IsControlPlane, "apiServer", f.APIServer, "action", action.String())
	if err != nil {
		return fmt.Errorf("node %s: %w", s.Node, err)
	}
	for _, w := range warnings {
		log.Warn("forced", "refusal", w)
	}
	if action == Done {
		if f.IsControlPlane {
			// A step run again after its node restarted finds it done while the kubelet brings
			// the control plane back: the node is whole once its pods are Ready.
			if err := s.waitControlPlanePods(ctx, log, time.Time{}); err != nil {
				return err
			}
		}
		s.Report.Report(ctx, nodestep.KubernetesUpgraded, fmt.Sprintf("already at %s: nothing to do", s.Target))
		return nil
	}
	s.Report.Report(ctx, nodestep.KubernetesUpgrading, fmt.Sprintf("%s %s (kubelet %s)", action, s.Target, f.Kubelet))
	if f.IsControlPlane && s.Etcd != nil {
		if err := s.waitEtcd(ctx, log, "before "+action.String()); err != nil {
			return fmt.Errorf("node %s: %w; nothing on the node was changed", s.Node, err)
		}
	}

	dir := BinDir(runtime.GOOS, runtime.GOARCH)
	sums, err := s.Fetch.Sums(ctx, dir)
	if err != nil {
		return fmt.Errorf("read the release's binaries: %w", err)
	}
	bins, err := s.binaries(ctx)
	if err != nil {
		return err
	}
	// The release's kubeadm runs from a staging directory and replaces the node's own only once
	// it has upgraded the node: a release that fails leaves the node's binaries as they were.
	staged, err := s.stage(ctx, dir, sums, log)
	if err != nil {
		return err
	}
	defer s.unstage(log)
	if err := s.checkVersion(ctx, staged); err != nil {
		return err
	}
	switch action {
	case Apply:
		if _, err := s.kubeadm(ctx, log, staged, "upgrade", "plan", s.Target); err != nil {
			return err
		}
		args := []string{"upgrade", "apply", s.Target, "--yes"}
		if s.Force || s.Rollback {
			// kubeadm refuses a downgrade without --force; DecideRollback allowed only a patch.
			args = append(args, "--force")
		}
		if out, err := s.kubeadm(ctx, log, staged, args...); err != nil {
			if why := ApplyFailure(out); why != "" {
				// kubeadm put the node back: the same release would fail the same way again.
				return fmt.Errorf("node %s: %s (%w): %w", s.Node, why, nodestep.ErrPermanent, err)
			}
			return err
		}
	case UpgradeNode:
		if _, err := s.kubeadm(ctx, log, staged, "upgrade", "node"); err != nil {
			return err
		}
	}
	s.Report.Report(ctx, nodestep.KubernetesUpgrading, fmt.Sprintf("kubelet %s -> %s", f.Kubelet, s.Target))
	for _, name := range []string{"kubeadm", "kubectl", "kubelet"} {
		if bins[name] == "" {
			log.Info("not on the node: left out", "binary", name)
			continue
		}
		if err := s.install(ctx, dir, sums, name, bins[name], log); err != nil {
			return err
		}
	}
	restarted := time.Now()
	for _, args := range [][]string{{"daemon-reload"}, {"restart", "kubelet"}} {
		if _, err := s.Host.Run(ctx, "systemctl", args...); err != nil {
			return fmt.Errorf("systemctl %s: %w", strings.Join(args, " "), err)
		}
	}
	log.Info("kubelet restarted")
	if err := s.waitNode(ctx); err != nil {
		return err
	}
	if f.IsControlPlane {
		if err := s.waitControlPlanePods(ctx, log, restarted); err != nil {
			return err
		}
	}
	if f.IsControlPlane && s.Etcd != nil {
		if err := s.waitEtcd(ctx, log, "after the upgrade"); err != nil {
			return fmt.Errorf("node %s: %w", s.Node, err)
		}
	}
	s.Report.Report(ctx, nodestep.KubernetesUpgraded, fmt.Sprintf("kubelet %s, Ready", s.Target))
	return nil
}

// facts gathers Decide's input, retrying the API server through a restart.
func (s *Step) facts(ctx context.Context) (Facts, error) {
	f := Facts{Target: s.Target, Force: s.Force, Rollback: s.Rollback}
	err := s.retry(ctx, "read the node and the control plane's version", func() error {
		n, err := s.Cluster.Node(ctx, s.Node)
		if err != nil {
			return err
		}
		f.Kubelet = n.KubeletVersion
		f.ControlPlane, err = s.Cluster.ControlPlaneVersion(ctx)
		return err
	})
	if err != nil {
		return Facts{}, err
	}
	for _, c := range controlPlaneComponents {
		manifest, err := os.ReadFile(filepath.Join(s.Root, "etc/kubernetes/manifests", c+".yaml"))
		switch {
		case errors.Is(err, os.ErrNotExist):
			continue
		case err != nil:
			return Facts{}, fmt.Errorf("read the %s manifest: %w", c, err)
		}
		f.IsControlPlane = true
		tag := componentTag(manifest, c)
		if tag == "" {
			continue
		}
		if f.APIServer == "" {
			f.APIServer = tag
		} else if older, err := version.ParseGeneric(tag); err == nil {
			if cur, err := version.ParseGeneric(f.APIServer); err == nil && older.LessThan(cur) {
				f.APIServer = tag
			}
		}
	}
	return f, nil
}

// controlPlaneComponents are the static pods kubeadm upgrades to the Kubernetes version, in the
// order it upgrades them after etcd.
var controlPlaneComponents = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"}

// componentTag finds the tag of component's image in its static pod manifest.
func componentTag(manifest []byte, component string) string {
	re := regexp.MustCompile(`image:\s*["']?\S*/` + regexp.QuoteMeta(component) + `:([^\s"'@]+)`)
	if m := re.FindSubmatch(manifest); m != nil {
		return string(m[1])
	}
	return ""
}

// execStartPath finds the program of a unit in `systemctl show --property=ExecStart`.
var execStartPath = regexp.MustCompile(`path=(/\S+)`)

// binaryDirs are where the node's kubeadm, kubelet and kubectl are looked for, in order.
var binaryDirs = []string{"usr/bin", "usr/local/bin"}

// binaries finds the node's kubeadm, kubelet (the path systemd runs, when it says) and kubectl,
// as paths under Root. kubeadm and kubelet are required; kubectl is "" when the node has none.
func (s *Step) binaries(ctx context.Context) (map[string]string, error) {
	out := map[string]string{}
	if b, err := s.Host.Run(ctx, "systemctl", "show", "--property=ExecStart", "kubelet"); err == nil {
		if m := execStartPath.FindSubmatch(b); m != nil {
			out["kubelet"] = filepath.Join(s.Root, string(m[1]))
		}
	}
	for _, name := range []string{"kubeadm", "kubelet", "kubectl"} {
		if out[name] != "" {
			continue
		}
		for _, d := range binaryDirs {
			p := filepath.Join(s.Root, d, name)
			if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
				out[name] = p
				break
			}
		}
	}
	for _, name := range []string{"kubeadm", "kubelet"} {
		if out[name] == "" {
			return nil, fmt.Errorf("the node has no %s in /%s", name, strings.Join(binaryDirs, " or /"))
		}
	}
	return out, nil
}

// stagingDir is where, under the node's /, the release's kubeadm waits until it has upgraded the node.
const stagingDir = "var/lib/upgrade-repo/kubeadm"

// stage installs the release's kubeadm into the staging directory and returns its path.
func (s *Step) stage(ctx context.Context, dir string, sums map[string]checksum.SHA256, log *slog.Logger) (string, error) {
	d := filepath.Join(s.Root, stagingDir, s.Target)
	if err := os.MkdirAll(d, 0o755); err != nil {
		return "", fmt.Errorf("stage the release's kubeadm: %w", err)
	}
	p := filepath.Join(d, "kubeadm")
	if err := s.install(ctx, dir, sums, "kubeadm", p, log); err != nil {
		return "", err
	}
	return p, nil
}

// unstage removes the staging directory.
func (s *Step) unstage(log *slog.Logger) {
	if err := os.RemoveAll(filepath.Join(s.Root, stagingDir)); err != nil {
		log.Warn("the staged kubeadm is left behind", "dir", "/"+stagingDir, "err", err)
	}
}

// staticPodTimeout finds the component kubeadm waited for in vain in `kubeadm upgrade apply`'s
// output ("static Pod hash for component C on Node N did not change after T", a wait for the
// pods with the label component=C that ended without them, or "failed to obtain static Pod hash
// for component C": its pod could not be read, the API server being C or down with it).
var staticPodTimeout = regexp.MustCompile(`(?:failed to obtain static Pod hash for component (\S+) on Node \S+|static Pod hash for component (\S+) on Node \S+ did not change after ([0-9a-zµ.]+)|pods with label "?component=([a-z0-9-]+))`)

// ApplyFailure reads why a failed `kubeadm upgrade apply` failed from its output: the control
// plane component that did not come up and what kubeadm did about it (it restores the node's
// earlier manifests when a new component does not come up). It returns "" when the output
// says neither.
func ApplyFailure(out []byte) string {
	text := string(out)
	var parts []string
	if m := staticPodTimeout.FindStringSubmatch(text); m != nil {
		switch {
		case m[1] != "":
			parts = append(parts, fmt.Sprintf("the release's %s did not come up: kubeadm could not read its pod, the API server not answering", m[1]))
		case m[2] != "":
			parts = append(parts, fmt.Sprintf("the release's %s did not come up within %s", m[2], m[3]))
		default:
			parts = append(parts, fmt.Sprintf("the release's %s did not come up", m[4]))
		}
	}
	if strings.Contains(text, "kubeadm has tried to recover everything into the earlier state") {
		parts = append(parts, "kubeadm restored the node's earlier static pod manifests, so the node runs its previous control plane")
	}
	return strings.Join(parts, "; ")
}

func (s *Step) install(ctx context.Context, dir string, sums map[string]checksum.SHA256, name, dst string, log *slog.Logger) error {
	sum, ok := sums[name]
	if !ok {
		return fmt.Errorf("the release's %s/%s does not list %s", dir, nodestep.SumsFile, name)
	}
	changed, err := s.Fetch.Install(ctx, dir+"/"+name, sum, dst, 0o755)
	if err != nil {
		return err
	}
	log.Info("binary", "name", name, "path", strings.TrimPrefix(dst, s.Root), "sha256", sum.Hex(), "replaced", changed)
	return nil
}

// checkVersion makes sure the kubeadm installed is the release's version.
func (s *Step) checkVersion(ctx context.Context, kubeadm string) error {
	out, err := s.Host.Run(ctx, s.hostPath(kubeadm), "version", "-o", "short")
	if err != nil {
		return fmt.Errorf("kubeadm version: %w", err)
	}
	if got := strings.TrimSpace(string(out)); got != s.Target {
		return fmt.Errorf("the release's kubeadm says it is %s, the release says %s", got, s.Target)
	}
	return nil
}

func (s *Step) hostPath(p string) string {
	return "/" + strings.TrimLeft(strings.TrimPrefix(p, s.Root), "/")
}

func (s *Step) kubeadm(ctx context.Context, log *slog.Logger, bin string, args ...string) ([]byte, error) {
	log.Info("running", "command", "kubeadm "+strings.Join(args, " "))
	start := time.Now()
	out, err := s.Host.Run(ctx, s.hostPath(bin), args...)
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if line != "" {
			log.Info("kubeadm", "out", line)
		}
	}
	if err != nil {
		return out, fmt.Errorf("kubeadm %s: %w", strings.Join(args, " "), err)
	}
	log.Info("done", "command", "kubeadm "+strings.Join(args[:min(2, len(args))], " "), "seconds", time.Since(start).Seconds())
	return out, nil
}

// waitNode waits for the node to report the target kubelet version and be Ready.
func (s *Step) waitNode(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.ReadyTimeout)
	defer cancel()
	var last NodeInfo
	var lastErr error
	for {
		n, err := s.Cluster.Node(ctx, s.Node)
		if err == nil && n.Ready && n.KubeletVersion == s.Target {
			return nil
		}
		last, lastErr = n, err
		select {
		case <-ctx.Done():
			if lastErr != nil {
				return fmt.Errorf("node %s not Ready at kubelet %s after %s: %w", s.Node, s.Target, s.ReadyTimeout, lastErr)
			}
			return fmt.Errorf("node %s not Ready at kubelet %s after %s: it reports kubelet %s, ready=%t", s.Node, s.Target, s.ReadyTimeout, last.KubeletVersion, last.Ready)
		case <-time.After(s.Poll):
		}
	}
}

// staleReadyGrace is how long a control-plane pod that reads Ready, but has not changed since
// the kubelet restarted, is taken for the kubelet's earlier word before it is believed. Every
// static pod kubeadm writes has a startup probe, which the restarted kubelet runs again, so its
// Ready condition does change; on a loaded kind node that took more than 20 s after the restart.
const staleReadyGrace = time.Minute

// waitControlPlanePods waits, on a control-plane node, for each of its control-plane pods to be
// Ready as the restarted kubelet reports it: the node is whole again only then, and the next
// node's upgrade must not begin while this one's API server or etcd is not serving. A kubelet
// that restarts marks its pods not Ready until their probes pass again (kubeadm's start after
// 10 s), and may not have said so yet when the node reads Ready: a pod is taken as Ready when its
// Ready condition changed at or after restarted, or when it has read Ready, unchanged, for
// staleReadyGrace. With restarted zero (the step restarted nothing), Ready is Ready.
func (s *Step) waitControlPlanePods(ctx context.Context, log *slog.Logger, restarted time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, s.ReadyTimeout)
	defer cancel()
	restarted = restarted.Truncate(time.Second) // condition times are whole seconds
	grace := staleReadyGrace
	if s.staleGrace > 0 {
		grace = s.staleGrace
	}
	firstReady := map[string]time.Time{}
	last := ""
	for {
		pods, err := s.Cluster.ControlPlanePods(ctx, s.Node)
		var waiting, unchanged []string
		if err == nil {
			now := time.Now()
			for _, p := range pods {
				switch {
				case !p.Ready:
					delete(firstReady, p.Name)
					waiting = append(waiting, p.Name)
				case !p.Since.Before(restarted):
				default:
					if _, ok := firstReady[p.Name]; !ok {
						firstReady[p.Name] = now
					}
					if now.Sub(firstReady[p.Name]) < grace {
						waiting = append(waiting, p.Name)
					} else {
						unchanged = append(unchanged, p.Name)
					}
				}
			}
			if len(waiting) == 0 {
				log.Info("control-plane pods Ready", "pods", len(pods), "seconds", time.Since(restarted).Seconds(),
					"readyUnchangedSinceTheRestart", strings.Join(unchanged, ","))
				return nil
			}
		}
		reading := "control-plane pods " + strings.Join(waiting, ", ") + " to be Ready"
		if err != nil {
			reading = "control-plane pods: " + err.Error()
		}
		if reading != last {
			log.Info("waiting", "for", reading)
			s.Report.Report(ctx, nodestep.KubernetesUpgrading, "kubelet "+s.Target+", waiting for "+reading)
			last = reading
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %s: not whole after %s: waited for %s", s.Node, s.ReadyTimeout, strings.TrimPrefix(reading, "control-plane pods: "))
		case <-time.After(s.Poll):
		}
	}
}

// waitEtcd waits for every etcd member to be healthy, as etcd reports it, reporting what it
// waits for; when is what the wait comes before, for the reports.
func (s *Step) waitEtcd(ctx context.Context, log *slog.Logger, when string) error {
	ctx, cancel := context.WithTimeout(ctx, s.EtcdTimeout)
	defer cancel()
	last := ""
	for {
		members, err := s.Etcd.Members(ctx)
		reading := ""
		if err == nil {
			q := JudgeEtcd(members)
			if q.OK() {
				log.Info("etcd healthy", "when", when, "members", q.Members, "healthy", q.Healthy, "quorum", q.Quorum(), "names", memberNames(members))
				if last != "" {
					// The row said it waits: say that it goes on.
					s.Report.Report(ctx, nodestep.KubernetesUpgrading, q.String()+"; going on "+strings.TrimPrefix(when, "before ")+" now")
				}
				return nil
			}
			reading = q.String()
		} else {
			reading = "etcd: " + err.Error()
		}
		if reading != last {
			log.Warn("waiting for etcd", "when", when, "reading", reading)
			s.Report.Report(ctx, nodestep.KubernetesUpgrading, "waiting for every etcd member to be healthy "+when+": "+reading)
			last = reading
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("etcd not healthy after %s (%s): %s", s.EtcdTimeout, when, last)
		case <-time.After(s.Poll):
		}
	}
}

func memberNames(members []EtcdMember) string {
	names := make([]string, len(members))
	for i, m := range members {
		names[i] = m.Name
	}
	return strings.Join(names, ",")
}

// retry runs f until it succeeds, for at most ReadyTimeout: the API server restarts during an
// upgrade.
func (s *Step) retry(ctx context.Context, what string, f func() error) error {
	// Every Poll, not doubling: the API server is back at a moment the step cannot know.
	p := backoff.Policy{Initial: s.Poll, Max: s.Poll, Total: s.ReadyTimeout}
	if p.Total <= 0 {
		p.Attempts = 1
	}
	err := backoff.Retry(ctx, p, func(context.Context) error {
		err := f()
		if err != nil {
			s.Log.Warn("retrying", "what", what, "err", err)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}
