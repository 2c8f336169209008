// Package nodestep is the node side of an UpgradePlan's node Job: what any upgrade image that
// runs on a node may rely on and is asked to do.
//
// The sequencer runs the upgrade image once per node, in a Job pinned to the node (privileged,
// the node's / at /host, the node's PID namespace), with the environment Env describes. The
// step:
//
//   - reads the release from UPGRADE_REPO_URL, the node's own agent, reachable without cluster
//     DNS (Fetch, Install);
//   - reports the stage it is in to that agent (Reporter, POST /v1/step), which writes it into
//     its RepoNode; the sequencer shows it as the node's state in the plan. Each report carries
//     the pod's projected service-account token for the agent's audience (TokenFile), the proof
//     that it comes from this node's step;
//   - is idempotent: a run after a reboot, a killed pod or a retried plan finds the work done
//     and exits 0.
//
// Imports: backoff, checksum and the standard library; the kubeadm step is in nodestep/kubeadm.
package nodestep

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/upgrade-repo/upgrade-repo/checksum"
	"github.com/upgrade-repo/upgrade-repo/internal/backoff"
)

// Env is what the sequencer tells a node Job through its environment. cmd reads it with
// EnvFrom(os.Getenv); nothing else in the module reads the environment.
type Env struct {
	// Step is UPGRADE_STEP: ClusterStep for the plan's one cluster Job, NodeStep for a node's.
	Step string
	// Node is UPGRADE_NODE_NAME: the node the Job runs on.
	Node string
	// Plan is UPGRADE_PLAN: the UpgradePlan's name.
	Plan string
	// RepoURL is UPGRADE_REPO_URL: the node's own agent, reachable without cluster DNS.
	RepoURL string
	// Force is UPGRADE_FORCE: the plan asks to go past the checks that can be skipped.
	Force bool
	// Rollback is UPGRADE_ROLLBACK: the plan rolls an upgrade back, a patch downgrade within
	// one minor version that the step would refuse otherwise.
	Rollback bool
	// Kubernetes is UPGRADE_RELEASE_KUBERNETES: the release's Kubernetes version, once the
	// sequencer has read the release's metadata.
	Kubernetes string
	// TokenFile is UPGRADE_STEP_TOKEN_FILE: the pod's projected service-account token whose
	// audience is the agent's (TokenAudience), which the kubelet renews in place; empty in a
	// cluster Job.
	TokenFile string
}

// TokenAudience is the audience of the token a node step presents to its agent with each report
// (the agent's StepTokenAudience): a token for this audience alone, which the API server itself
// does not accept.
const TokenAudience = "upgrade-repo-step"

// TokenPath is where a node Job's pod holds that token (Env.TokenFile).
const TokenPath = "/var/run/secrets/upgrade-repo/step/token"

// EnvFrom reads Env through getenv (os.Getenv in cmd).
func EnvFrom(getenv func(string) string) Env {
	force, _ := strconv.ParseBool(getenv("UPGRADE_FORCE")) // anything but a true value is false
	rollback, _ := strconv.ParseBool(getenv("UPGRADE_ROLLBACK"))
	return Env{Rollback: rollback,
		Step: getenv("UPGRADE_STEP"), Node: getenv("UPGRADE_NODE_NAME"), Plan: getenv("UPGRADE_PLAN"), RepoURL: getenv("UPGRADE_REPO_URL"),
		Force: force, Kubernetes: getenv("UPGRADE_RELEASE_KUBERNETES"), TokenFile: getenv("UPGRADE_STEP_TOKEN_FILE"),
	}
}

// The values of Env.Step.
const (
	ClusterStep = "cluster"
	NodeStep    = "node"
)

// Stage is a stage a step reports, in the upgrade design's names of a node's states (the values
// of api/v1beta1.StepStage).
type Stage string

// The stages a step reports.
const (
	KubernetesUpgrading Stage = "KubernetesUpgrading"
	KubernetesUpgraded  Stage = "KubernetesUpgraded"
	OSUpgrading         Stage = "OSUpgrading"
	OSUpgraded          Stage = "OSUpgraded"
)

// Reporter tells the node's agent which stage the step is in. A report that cannot be delivered
// is logged and dropped: the stage is shown to operators, it never decides the step's outcome.
type Reporter struct {
	// HTTP is the client; http.DefaultClient when nil.
	HTTP *http.Client
	// RepoURL is the agent's base URL (Env.RepoURL); an empty URL reports nothing.
	RepoURL string
	// Plan names the plan in every report.
	Plan string
	// Log receives the reports and the failures to deliver them.
	Log *slog.Logger
	// TokenFile holds the step's token for the agent (Env.TokenFile), read again for each report
	// since the kubelet renews it; empty: reports carry no token, and the agent refuses them.
	TokenFile string
}

// Report sends stage and message to the agent, trying three times within about ten seconds.
func (r *Reporter) Report(ctx context.Context, stage Stage, message string) {
	if r.Log != nil {
		r.Log.Info("stage", "stage", stage, "message", message)
	}
	if r.RepoURL == "" {
		return
	}
	body, _ := json.Marshal(map[string]string{"plan": r.Plan, "stage": string(stage), "message": message}) // strings always marshal
	err := backoff.Retry(ctx, backoff.Policy{Initial: 2 * time.Second, Jitter: 0.2, Attempts: 3}, func(ctx context.Context) error {
		return r.post(ctx, body)
	})
	if err == nil {
		return
	}
	if r.Log != nil {
		r.Log.Warn("stage report not delivered", "stage", stage, "err", err)
	}
}

func (r *Reporter) post(ctx context.Context, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(r.RepoURL, "/")+"/v1/step", bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("report stage: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	if r.TokenFile != "" {
		token, err := os.ReadFile(r.TokenFile)
		if err != nil {
			return backoff.Permanent(fmt.Errorf("report stage: the step's token: %w", err))
		}
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	}
	resp, err := client(r.HTTP).Do(req)
	if err != nil {
		return fmt.Errorf("report stage: %w", err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512)) // only for the error message
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("report stage: agent answered %s: %s", resp.Status, strings.TrimSpace(string(msg)))
	}
	return nil
}

func client(c *http.Client) *http.Client {
	if c == nil {
		return http.DefaultClient
	}
	return c
}

// ErrChecksum is returned when a file of the release does not match the checksum the release
// gives for it.
var ErrChecksum = errors.New("checksum mismatch")

// ErrPermanent marks a step's failure that running the step again would only repeat, such as
// a release whose control plane does not come up on the node: its node Job fails at once
// instead of running the step again for each retry of its backoff limit.
var ErrPermanent = errors.New("running the step again would repeat this")

// ExitPermanent is the exit status of a node step that failed with ErrPermanent. The node Job's
// pod failure policy fails the Job on it at once; an upgrade image may exit with it too.
const ExitPermanent = 86

// TerminationLog is where a node step leaves its error for the sequencer (the pod's
// terminationMessagePath, Kubernetes' default): the plan says why the step failed, not only that
// its Job did.
const TerminationLog = "/dev/termination-log"

// maxTerminationMessage is what the kubelet keeps of a termination message.
const maxTerminationMessage = 4096

// WriteTerminationMessage leaves err's text at path (TerminationLog in a node Job's pod) for the
// sequencer, cut to what the kubelet keeps; where it cannot, nothing is lost but that message.
func WriteTerminationMessage(path string, err error) error {
	msg := err.Error()
	if len(msg) > maxTerminationMessage {
		msg = msg[:maxTerminationMessage-3] + "..."
	}
	if werr := os.WriteFile(path, []byte(msg), 0o644); werr != nil {
		return fmt.Errorf("write the termination message: %w", werr)
	}
	return nil
}

// SumsFile is the name of the checksum list beside a release's binaries: `sha256sum` output,
// "HEX  NAME" a line.
const SumsFile = "SHA256SUMS"

// Fetcher reads files of the release from the node's agent.
type Fetcher struct {
	// HTTP is the client; http.DefaultClient when nil.
	HTTP *http.Client
	// RepoURL is the agent's base URL.
	RepoURL string
	// Attempts is how many times a failing request is tried (default 5, 2 s apart, doubling).
	Attempts int
}

// Sums reads the SumsFile of dir (a directory of the release, such as kubernetes/linux-amd64)
// into a map from file name to its checksum.
func (f *Fetcher) Sums(ctx context.Context, dir string) (map[string]checksum.SHA256, error) {
	var buf bytes.Buffer
	if err := f.get(ctx, dir+"/"+SumsFile, &limitedWriter{w: &buf, n: 1 << 20}); err != nil {
		return nil, err
	}
	sums, err := checksum.ParseSHA256List(&buf)
	if err != nil {
		return nil, fmt.Errorf("%s/%s: %w", dir, SumsFile, err)
	}
	return sums, nil
}

// Install fetches the release file src and puts it at dst atomically with mode: it is written
// beside dst, checked against sum, synced and renamed over dst, so dst is at every
// moment either the old file or the whole new one. A dst that already has sum is left alone;
// changed reports whether dst was replaced.
func (f *Fetcher) Install(ctx context.Context, src string, sum checksum.SHA256, dst string, mode os.FileMode) (changed bool, err error) {
	if have, err := fileSum(dst); err == nil && have.Equal(sum) {
		return false, nil
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".upgrade-*")
	if err != nil {
		return false, fmt.Errorf("install %s: %w", dst, err)
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	defer tmp.Close()
	h := sha256.New()
	if err := f.get(ctx, src, &resetWriter{f: tmp, h: h}); err != nil {
		return false, fmt.Errorf("install %s: %w", dst, err)
	}
	if got, _ := checksum.NewSHA256(h.Sum(nil)); !got.Equal(sum) {
		return false, fmt.Errorf("install %s: %s has sha256 %s, the release says %s: %w", dst, src, got.Hex(), sum.Hex(), ErrChecksum)
	}
	if err := tmp.Chmod(mode); err != nil {
		return false, fmt.Errorf("install %s: %w", dst, err)
	}
	if err := tmp.Sync(); err != nil {
		return false, fmt.Errorf("install %s: %w", dst, err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return false, fmt.Errorf("install %s: %w", dst, err)
	}
	if d, err := os.Open(filepath.Dir(dst)); err == nil {
		_ = d.Sync() // best effort: the rename is already visible
		d.Close()
	}
	return true, nil
}

// get writes the release file p to w, retrying a failing request from the start under
// backoff.Retry. A writer that is a resetter is reset before every attempt.
func (f *Fetcher) get(ctx context.Context, p string, w io.Writer) error {
	attempts := f.Attempts
	if attempts <= 0 {
		attempts = 5
	}
	u := strings.TrimRight(f.RepoURL, "/") + "/" + strings.TrimLeft(p, "/")
	policy := backoff.Policy{Initial: 2 * time.Second, Jitter: 0.2, Attempts: attempts}
	err := backoff.Retry(ctx, policy, func(ctx context.Context) error {
		if r, ok := w.(interface{ reset() error }); ok {
			if err := r.reset(); err != nil {
				return backoff.Permanent(err)
			}
		}
		retry, err := f.getOnce(ctx, u, w)
		if err != nil && !retry {
			return backoff.Permanent(err)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("get %s from the node's agent: %w", p, err)
	}
	return nil
}

func (f *Fetcher) getOnce(ctx context.Context, u string, w io.Writer) (retry bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return false, err
	}
	resp, err := client(f.HTTP).Do(req)
	if err != nil {
		return true, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		return false, fmt.Errorf("the release has no such file (%s)", resp.Status)
	default:
		return backoff.RetryableStatus(resp.StatusCode), fmt.Errorf("agent answered %s", resp.Status)
	}
	n, err := io.Copy(w, resp.Body)
	if err != nil {
		return true, err
	}
	if resp.ContentLength >= 0 && n != resp.ContentLength {
		return true, fmt.Errorf("got %d of %d bytes", n, resp.ContentLength)
	}
	return false, nil
}

// fileSum is the sha256 of the file at p.
func fileSum(p string) (checksum.SHA256, error) {
	f, err := os.Open(p)
	if err != nil {
		return checksum.SHA256{}, err
	}
	defer f.Close()
	return checksum.SHA256Of(f)
}

// resetWriter writes to a file and a hash, and starts both over on reset.
type resetWriter struct {
	f *os.File
	h interface {
		io.Writer
		Reset()
	}
}

func (w *resetWriter) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	_, _ = w.h.Write(p[:n]) // a hash.Hash never fails
	return n, err
}

func (w *resetWriter) reset() error {
	w.h.Reset()
	if err := w.f.Truncate(0); err != nil {
		return err
	}
	_, err := w.f.Seek(0, io.SeekStart)
	return err
}

// limitedWriter refuses to hold more than n bytes.
type limitedWriter struct {
	w *bytes.Buffer
	n int
}

func (w *limitedWriter) Write(p []byte) (int, error) {
	if w.w.Len()+len(p) > w.n {
		return 0, fmt.Errorf("more than %d bytes", w.n)
	}
	return w.w.Write(p)
}

func (w *limitedWriter) reset() error { w.w.Reset(); return nil }
