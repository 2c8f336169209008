package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/internal/printable"
)

// StepPath is where an upgrade image's node step reports its stage to its own node's agent:
// POST $UPGRADE_REPO_URL/v1/step.
const StepPath = "/v1/step"

// maxStepBody is the largest step report accepted, in bytes: a plan's name, a stage and a line of
// message fit many times over.
const maxStepBody = 4 << 10

// StepReport is the body of POST /v1/step.
type StepReport struct {
	// Plan is the UpgradePlan the step runs for (its UPGRADE_PLAN); required.
	Plan string `json:"plan"`
	// Stage is where the step stands: one of the v1beta1 StepStage constants.
	Stage v1beta1.StepStage `json:"stage"`
	// Message says what the step is doing, for humans; optional.
	Message string `json:"message,omitempty"`
}

// stages are the stages a step may report.
var stages = map[v1beta1.StepStage]bool{
	v1beta1.StageKubernetesUpgrading: true,
	v1beta1.StageKubernetesUpgraded:  true,
	v1beta1.StageOSUpgrading:         true,
	v1beta1.StageOSUpgraded:          true,
}

// Validate reports what makes the report unusable, or nil.
func (s StepReport) Validate() error {
	switch {
	case s.Plan == "":
		return errors.New("plan is required")
	case !stages[s.Stage]:
		return fmt.Errorf("stage %q: want one of %s, %s, %s, %s", s.Stage,
			v1beta1.StageKubernetesUpgrading, v1beta1.StageKubernetesUpgraded, v1beta1.StageOSUpgrading, v1beta1.StageOSUpgraded)
	}
	return nil
}

// stepHandler records the node step's reports on the board, once its gate let them through. It
// does not depend on the ISO: a step reports whether or not the node serves one.
type stepHandler struct {
	board *Board
	gate  *stepGate
	log   *slog.Logger
	now   func() time.Time
}

var _ http.Handler = (*stepHandler)(nil)

// ServeHTTP answers 204 once the report is on the board; 401, 403, 429 or 503 when the gate
// refuses it (see stepGate.check), the board unchanged; 400 for a body that is not a valid
// StepReport, 413 for one over maxStepBody, and 405 for a method other than POST. The report's
// text is escaped (package printable) before it is kept or logged: operators read it on their
// terminals.
func (h *stepHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "POST a step report to "+StepPath, http.StatusMethodNotAllowed)
		return
	}
	if err := h.gate.check(r); err != nil {
		var refused *errStepRefused
		code := http.StatusForbidden
		if errors.As(err, &refused) {
			code = refused.code
		}
		if code == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", `Bearer realm="upgrade-repo-step"`)
		}
		if code == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", "2")
		}
		h.log.Warn("node step report refused", "status", code, "remote", r.RemoteAddr, "err", err)
		http.Error(w, err.Error(), code)
		return
	}
	var rep StepReport
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxStepBody))
	dec.DisallowUnknownFields()
	err := dec.Decode(&rep)
	if err == nil {
		if _, extra := dec.Token(); !errors.Is(extra, io.EOF) {
			err = errors.Join(errors.New("the body holds more than one JSON object"), extra)
		}
	}
	if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
		http.Error(w, fmt.Sprintf("step report: the body is over %d bytes", mbe.Limit), http.StatusRequestEntityTooLarge)
		return
	}
	if err == nil {
		err = rep.Validate()
	}
	if err != nil {
		http.Error(w, "step report: "+err.Error(), http.StatusBadRequest)
		return
	}
	rep.Plan, rep.Message = printable.String(rep.Plan), printable.String(rep.Message)
	h.board.step(&v1beta1.RepoNodeStep{
		Plan: rep.Plan, Stage: rep.Stage, Message: rep.Message,
		// The API server keeps seconds: what the RepoNode will carry.
		Time: metav1.NewTime(h.now().Truncate(time.Second)),
	})
	h.log.Info("node step reported", "plan", rep.Plan, "stage", rep.Stage, "message", rep.Message)
	w.WriteHeader(http.StatusNoContent)
}
