// Command nodetimings prints how the node phase of an UpgradePlan spent its time, node by node,
// from the plan's own node times (status.nodeUpgradeStatuses[].times): the wait for a slot, the
// drain, the node step, and the sequencer's own time, with the distribution of the latter. It
// reads the plan as JSON on standard input (kubectl get upgradeplan NAME -o json);
// hack/node-timings.sh runs it against a cluster.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/sequencer"
)

func main() {
	if err := run(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "nodetimings:", err)
		os.Exit(1)
	}
}

func run(in io.Reader, out io.Writer) error {
	var plan v1beta1.UpgradePlan
	if err := json.NewDecoder(in).Decode(&plan); err != nil {
		return fmt.Errorf("read the plan: %w", err)
	}
	ts := sequencer.NodeTimings(&plan.Status)
	if len(ts) == 0 {
		return fmt.Errorf("plan %s: no node went through NodeUpgrading with its times recorded", plan.Name)
	}
	sec := func(d time.Duration) string { return fmt.Sprintf("%.2f", d.Seconds()) }
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "node\twait s\tdrain s\tstep s\ttotal s\tsequencer s\t")
	var own []time.Duration
	for _, t := range ts {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t\n", t.Node, sec(t.Wait), sec(t.Drain), sec(t.Step), sec(t.Total), sec(t.Sequencer))
		own = append(own, t.Sequencer)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(out, "sequencer time per node: %s\n", sequencer.Distribute(own))
	return err
}
