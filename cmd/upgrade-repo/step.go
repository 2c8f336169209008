package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/upgrade-repo/upgrade-repo/cmd/internal/cli"
	"github.com/upgrade-repo/upgrade-repo/cmd/internal/kubeclient"
	"github.com/upgrade-repo/upgrade-repo/nodestep"
	"github.com/upgrade-repo/upgrade-repo/nodestep/kubeadm"
	"github.com/upgrade-repo/upgrade-repo/sequencer/repoclient"
)

// runStep runs a release's node step inside an UpgradePlan's node Job: `step kubeadm` upgrades
// a kubeadm node (the entry point of the kubeadm upgrade image, Dockerfile.kubeadm).
func runStep(ctx context.Context, a *app, args []string) error {
	const usage = "usage: upgrade-repo step kubeadm [flags]\n  a release's node step, run by an UpgradePlan's node Job (UPGRADE_NODE_NAME, UPGRADE_REPO_URL)\n"
	if cli.IsHelp(args) {
		fmt.Fprint(a.stdout, usage+"steps:\n  kubeadm  upgrade a kubeadm node (upgrade-repo step kubeadm --help)\n")
		return nil
	}
	if len(args) == 0 || args[0] != "kubeadm" {
		return fmt.Errorf("%w: step kubeadm [flags]: the only node step is kubeadm", errUsage)
	}
	fset := flag.NewFlagSet("step kubeadm", flag.ContinueOnError)
	fset.SetOutput(a.stderr)
	fset.Usage = func() { fmt.Fprint(fset.Output(), usage); fset.PrintDefaults() }
	root := fset.String("root", "/host", "`dir` where the node's / is mounted")
	target := fset.String("version", "", "Kubernetes `version` to upgrade to (default: the release's, read from UPGRADE_REPO_URL)")
	readyTimeout := fset.Duration("ready-timeout", 5*time.Minute, "how long to wait for the node to report the new kubelet and be Ready")
	if help, err := parseFlags(a.stdout, fset, args[1:]); help || err != nil {
		return err
	}
	env := nodestep.EnvFrom(os.Getenv)
	if env.Step == nodestep.ClusterStep {
		// kubeadm upgrades the cluster-wide parts (its configuration, CoreDNS, kube-proxy) in
		// `kubeadm upgrade apply`, on the first control-plane node's step.
		a.log.Info("the cluster step of a kubeadm release has nothing to do: kubeadm upgrade apply runs in the first control-plane node's step", "plan", env.Plan)
		return nil
	}
	if env.Node == "" || env.RepoURL == "" {
		return errors.New("step kubeadm: UPGRADE_NODE_NAME and UPGRADE_REPO_URL must be set (it runs in an UpgradePlan's node Job)")
	}
	hc := &http.Client{Timeout: 10 * time.Minute}
	if *target == "" {
		rel, err := repoclient.Load(ctx, hc, env.RepoURL)
		switch {
		case err == nil && rel.Kubernetes != "":
			*target = rel.Kubernetes
		case env.Kubernetes != "":
			*target = env.Kubernetes
		case err != nil:
			return fmt.Errorf("step kubeadm: the release's Kubernetes version: %w", err)
		default:
			return errors.New("step kubeadm: the release names no Kubernetes version")
		}
	}
	cfg, err := kubeclient.Config("", "")
	if err != nil {
		return fmt.Errorf("step kubeadm: %w", err)
	}
	cfg.Timeout = 30 * time.Second
	cs, err := kubeclient.Clientset(cfg)
	if err != nil {
		return fmt.Errorf("step kubeadm: %w", err)
	}
	log := a.log.With("step", "kubeadm", "plan", env.Plan)
	s := &kubeadm.Step{
		Node: env.Node, Target: *target, Force: env.Force, Rollback: env.Rollback, Root: *root,
		Host: kubeadm.NodeHost{Root: *root}, Cluster: kubeadm.KubeCluster{Client: cs},
		Fetch:  &nodestep.Fetcher{HTTP: hc, RepoURL: env.RepoURL},
		Report: &nodestep.Reporter{RepoURL: env.RepoURL, Plan: env.Plan, Log: log, TokenFile: env.TokenFile},
		Log:    log, ReadyTimeout: *readyTimeout,
	}
	switch etcd, err := kubeadm.NewEtcdClient(*root); {
	case errors.Is(err, kubeadm.ErrNoLocalEtcd):
	case err != nil:
		return fmt.Errorf("step kubeadm: %w", err)
	default:
		s.Etcd = etcd
	}
	return stepExit(a, s.Run(ctx), nodestep.TerminationLog)
}

// stepExit leaves a node step's error where the sequencer reads it (the pod's termination
// message, at path) and gives a failure that running the step again would repeat its exit status
// (nodestep.ExitPermanent), on which the node Job fails at once.
func stepExit(a *app, err error, path string) error {
	if err == nil {
		return nil
	}
	if werr := nodestep.WriteTerminationMessage(path, err); werr != nil {
		a.log.Warn("the step's error is in its log only", "err", werr)
	}
	if errors.Is(err, nodestep.ErrPermanent) {
		return &cli.ExitCodeError{Code: nodestep.ExitPermanent, Err: err}
	}
	return err
}
