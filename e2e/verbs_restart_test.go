package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	apiv1beta1 "github.com/upgrade-repo/upgrade-repo/api/v1beta1"
)

// apiServerPause is how long the control plane's container stays paused under each verb: longer
// than the CLI's attempt timeout (10 s), so that each verb meets an API server that does not
// answer, as one restarting during an upgrade.
const apiServerPause = 20 * time.Second

// Names of the objects TestVerbsRideOutAPIServerRestart creates. The plans name a Version that
// does not exist (verbsMissingVersion), so that the sequencer holds them before any work; the
// node verb's plan names verbsVersion, whose ISO URL leads nowhere.
const (
	verbsPrefix         = "e2e-verbs-"
	verbsVersion        = "e2e-verbs"
	verbsMissingVersion = "e2e-verbs-missing"
	// verbsImage is the test plans' upgrade image: a name no registry serves, which no plan
	// ever reaches.
	verbsImage = "e2e-verbs.invalid/none:0"
	// pausedAnnotation is planctl.PausedAnnotation, which the e2e module does not import.
	pausedAnnotation = "upgrade-repo.io/paused-nodes"
)

// verbCase is one verb run under a paused control plane.
type verbCase struct {
	name string
	// setup creates what the verb acts on, before the pause.
	setup func(t *testing.T)
	// args are the verb's arguments after `upgrade-repo upgrade`.
	args []string
	// wantOut is a part of the verb's stdout.
	wantOut string
	// check verifies the verb's change once the API server is back.
	check func(ctx context.Context) error
}

// TestVerbsRideOutAPIServerRestart runs each operator verb that talks to the cluster (pause,
// resume, retry, abort, status, skip, node) from outside the cluster while the kind control
// plane's container is paused for apiServerPause (docker pause, unpaused by a goroutine), each
// against a test plan of its own. Each verb must complete once the API server is back, say on
// stderr that it waited for the API server and why, and have made its change. The sequencer is
// stopped meanwhile, so that the test plans stay as created (it would fail them: their Version
// does not exist) and each verb judges the plan the test made.
func TestVerbsRideOutAPIServerRestart(t *testing.T) {
	c := env(t)
	bin := filepath.Join(c.artifacts, "upgrade-repo")
	kubeconfig := os.Getenv("E2E_KUBECONFIG")
	controlPlane := c.name + "-control-plane"

	var worker string
	for _, n := range c.nodes {
		if !isManagement(n) {
			worker = n.Name
		}
	}
	node := c.nodes[len(c.nodes)-1].Name

	plan := func(name string, mod func(*apiv1beta1.UpgradePlan)) func(t *testing.T) {
		return func(t *testing.T) {
			image := verbsImage
			p := &apiv1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{Name: verbsPrefix + name},
				Spec: apiv1beta1.UpgradePlanSpec{Version: verbsMissingVersion, Upgrade: &image}}
			if mod != nil {
				mod(p)
			}
			createVerbObject(t, c, p)
		}
	}
	getPlan := func(ctx context.Context, name string) (*apiv1beta1.UpgradePlan, error) {
		var p apiv1beta1.UpgradePlan
		err := c.cl.Get(ctx, client.ObjectKey{Name: verbsPrefix + name}, &p)
		return &p, err
	}
	cases := []verbCase{
		{
			name: "pause", setup: plan("pause", nil), args: []string{"pause", verbsPrefix + "pause"},
			wantOut: "Paused upgradeplan " + verbsPrefix + "pause",
			check: func(ctx context.Context) error {
				p, err := getPlan(ctx, "pause")
				if err != nil {
					return err
				}
				if p.Spec.NodeUpgradeOption == nil || len(p.Spec.NodeUpgradeOption.PauseNodes) != len(c.nodes) {
					return fmt.Errorf("pauseNodes %v, want every node", p.Spec.NodeUpgradeOption)
				}
				return nil
			},
		},
		{
			name: "resume",
			setup: plan("resume", func(p *apiv1beta1.UpgradePlan) {
				p.Spec.NodeUpgradeOption = &apiv1beta1.NodeUpgradeOption{PauseNodes: []string{node}}
				p.Annotations = map[string]string{pausedAnnotation: node}
			}),
			args: []string{"resume", verbsPrefix + "resume"}, wantOut: "Resumed upgradeplan " + verbsPrefix + "resume: " + node + " removed",
			check: func(ctx context.Context) error {
				p, err := getPlan(ctx, "resume")
				if err != nil {
					return err
				}
				if o := p.Spec.NodeUpgradeOption; o != nil && len(o.PauseNodes) > 0 {
					return fmt.Errorf("pauseNodes %v, want none", o.PauseNodes)
				}
				return nil
			},
		},
		{
			name: "retry",
			setup: func(t *testing.T) {
				plan("retry", nil)(t)
				markFailed(t, c, verbsPrefix+"retry")
			},
			args: []string{"retry", verbsPrefix + "retry"}, wantOut: "Asked upgradeplan " + verbsPrefix + "retry to retry",
			check: func(ctx context.Context) error {
				p, err := getPlan(ctx, "retry")
				if err != nil {
					return err
				}
				if p.Annotations[apiv1beta1.RetryAnnotation] == "" {
					return fmt.Errorf("no %s", apiv1beta1.RetryAnnotation)
				}
				return nil
			},
		},
		{
			name: "abort", setup: plan("abort", nil), args: []string{"abort", verbsPrefix + "abort", "--yes"},
			wantOut: "Deleted upgradeplan " + verbsPrefix + "abort",
			check: func(ctx context.Context) error {
				if _, err := getPlan(ctx, "abort"); client.IgnoreNotFound(err) != nil || err == nil {
					return fmt.Errorf("the plan is still there (%v)", err)
				}
				return nil
			},
		},
		{
			name: "status",
			setup: plan("status", func(p *apiv1beta1.UpgradePlan) {
				p.Spec.NodeUpgradeOption = &apiv1beta1.NodeUpgradeOption{PauseNodes: []string{node}}
				p.Annotations = map[string]string{pausedAnnotation: node}
			}),
			args:    []string{"status", verbsPrefix + "status", "--namespace", c.namespace},
			wantOut: "Held: " + node + " in spec.nodeUpgradeOption.pauseNodes",
		},
		{
			name: "node",
			setup: func(t *testing.T) {
				createVerbObject(t, c, &apiv1beta1.Version{ObjectMeta: metav1.ObjectMeta{Name: verbsVersion},
					Spec: apiv1beta1.VersionSpec{ISOURL: "http://127.0.0.1:9/e2e-verbs.iso", ISOChecksum: "sha512:" + strings.Repeat("0", 128)}})
			},
			args:    []string{"node", node, "--version", verbsVersion, "--name", verbsPrefix + "node"},
			wantOut: "Created upgradeplan " + verbsPrefix + "node: node " + node + " alone to version " + verbsVersion,
			check: func(ctx context.Context) error {
				p, err := getPlan(ctx, "node")
				if err != nil {
					return err
				}
				if o := p.Spec.NodeUpgradeOption; o == nil || len(o.Nodes) != 1 || o.Nodes[0] != node {
					return fmt.Errorf("nodes %v, want [%s]", o, node)
				}
				return nil
			},
		},
	}
	if worker != "" {
		cases = append(cases, verbCase{
			name: "skip", setup: plan("skip", nil), args: []string{"skip", verbsPrefix + "skip", worker},
			wantOut: "Skipped in upgradeplan " + verbsPrefix + "skip: " + worker + " added",
			check: func(ctx context.Context) error {
				p, err := getPlan(ctx, "skip")
				if err != nil {
					return err
				}
				if o := p.Spec.NodeUpgradeOption; o == nil || len(o.SkipNodes) != 1 || o.SkipNodes[0] != worker {
					return fmt.Errorf("skipNodes %v, want [%s]", o, worker)
				}
				return nil
			},
		})
	} else {
		t.Logf("formation %s has no node that is not a control-plane node: skip is not run", c.formation)
	}

	defer stopSequencer(t, c)()
	// Never leave the control plane paused, whatever failed.
	t.Cleanup(func() { _ = exec.Command("docker", "unpause", controlPlane).Run() })
	// Deferred, not a Cleanup: deleteObject waits with the test's context, cancelled before
	// Cleanups run.
	defer func() {
		_ = exec.Command("docker", "unpause", controlPlane).Run()
		for _, vc := range cases {
			deleteObject(t, c, &apiv1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{Name: verbsPrefix + vc.name}})
		}
		deleteObject(t, c, &apiv1beta1.Version{ObjectMeta: metav1.ObjectMeta{Name: verbsVersion}})
	}()

	for _, vc := range cases {
		t.Run(vc.name, func(t *testing.T) {
			vc.setup(t)
			args := append([]string{"upgrade"}, append(vc.args, "--kubeconfig", kubeconfig)...)
			stdout, stderr, took, err := runUnderPausedControlPlane(t, controlPlane, bin, args)
			t.Logf("upgrade-repo %s (%s, err=%v)\nstdout:\n%s\nstderr:\n%s", strings.Join(vc.args, " "), took.Round(time.Second), err, stdout, stderr)
			require.NoError(t, err, "the verb completes once the API server is back")
			require.Contains(t, stderr, "waiting up to", "the verb says it waits")
			require.Contains(t, stderr, "for the API server (", "and for what, and why")
			require.Contains(t, strings.Join(strings.Fields(stdout), " "), vc.wantOut, "stdout, its spaces squashed")
			if vc.check != nil {
				eventually(t, time.Minute, vc.name+"'s change", vc.check)
			}
		})
	}
}

// runUnderPausedControlPlane pauses the control plane's container, runs the CLI with args, and
// unpauses the container apiServerPause after pausing it, from a goroutine, whatever the CLI
// does meanwhile; it returns once both are done.
func runUnderPausedControlPlane(t *testing.T, controlPlane, bin string, args []string) (stdout, stderr string, took time.Duration, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	out, perr := exec.CommandContext(ctx, "docker", "pause", controlPlane).CombinedOutput()
	require.NoError(t, perr, "docker pause %s: %s", controlPlane, out)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-time.After(apiServerPause):
		case <-ctx.Done():
		}
		// Not the test's context: the container must be unpaused even when the test ends.
		if out, err := exec.Command("docker", "unpause", controlPlane).CombinedOutput(); err != nil {
			t.Errorf("docker unpause %s: %v: %s", controlPlane, err, out)
		}
	}()
	var o, e bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &o, &e
	start := time.Now()
	err = cmd.Run()
	took = time.Since(start)
	wg.Wait()
	return o.String(), e.String(), took, err
}

// createVerbObject creates obj, deleting a leftover of an earlier run first.
func createVerbObject(t *testing.T, c *cluster, obj client.Object) {
	t.Helper()
	deleteObject(t, c, obj.DeepCopyObject().(client.Object))
	eventually(t, time.Minute, "create "+obj.GetName(), func(ctx context.Context) error {
		return client.IgnoreAlreadyExists(c.cl.Create(ctx, obj))
	})
}

// markFailed sets the plan's status to Failed in Initializing, as the sequencer records a
// failure, and waits until it reads so (the sequencer leaves a Failed plan as it is). A retry
// takes the plan back to Initializing, where its missing Version holds it.
func markFailed(t *testing.T, c *cluster, name string) {
	t.Helper()
	eventually(t, time.Minute, "mark "+name+" Failed", func(ctx context.Context) error {
		var p apiv1beta1.UpgradePlan
		if err := c.cl.Get(ctx, client.ObjectKey{Name: name}, &p); err != nil {
			return err
		}
		if p.Status.Phase == apiv1beta1.PhaseFailed {
			return nil
		}
		p.Status.Phase, p.Status.FailedPhase = apiv1beta1.PhaseFailed, apiv1beta1.PhaseInitializing
		if err := c.cl.Status().Update(ctx, &p); err != nil {
			return err
		}
		return fmt.Errorf("set %s Failed; reading it again", name)
	})
}
