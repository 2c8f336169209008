package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// node is a fake node for the upgrade step: a root and a /proc whose boot identity the test sets.
type node struct {
	root, proc string
}

func newNode(t *testing.T) *node {
	t.Helper()
	n := &node{root: t.TempDir(), proc: t.TempDir()}
	require.NoError(t, os.MkdirAll(filepath.Join(n.proc, "sys/kernel/random"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(n.proc, "1"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(n.proc, "sys/kernel/random/boot_id"), []byte("3f1c9a2e-host-kernel\n"), 0o644))
	n.boot(t, 1000)
	return n
}

// boot restarts the fake node: its PID 1 starts at clock tick start.
func (n *node) boot(t *testing.T, start int) {
	t.Helper()
	// The command holds a space and a parenthesis, as a hostile one may.
	stat := "1 (systemd (x)) S 0 1 1 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 1 0 " + strconv.Itoa(start) + " 1000 100\n"
	require.NoError(t, os.WriteFile(filepath.Join(n.proc, "1/stat"), []byte(stat), 0o644))
}

// run runs the node step once; the fake reboot ends the run as a real reboot kills the pod.
func (n *node) run(t *testing.T) (reboots int, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	err = upgrade(ctx, slog.New(slog.DiscardHandler), step{
		root: n.root, proc: n.proc, node: "n1", version: "v1.5.2", repo: "skip",
		reboot: func() error { reboots++; cancel(); return nil },
	})
	return reboots, err
}

func (n *node) markerLines(t *testing.T) int {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(n.root, markerDir, "n1"))
	require.NoError(t, err)
	return strings.Count(string(data), "\n")
}

func TestUpgradeNodeStep(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// rebootBefore is the sequence of runs: true reboots the node before the run.
		rebootBefore []bool
		wantReboots  []int
		wantErr      []bool
	}{
		{name: "first run works and reboots", rebootBefore: []bool{false}, wantReboots: []int{1}, wantErr: []bool{true}},
		{name: "run after the reboot exits at once", rebootBefore: []bool{false, true}, wantReboots: []int{1, 0}, wantErr: []bool{true, false}},
		{name: "retry in the same boot reboots without redoing the work", rebootBefore: []bool{false, false, true}, wantReboots: []int{1, 1, 0}, wantErr: []bool{true, true, false}},
		{name: "runs after the reboot stay done", rebootBefore: []bool{false, true, false, true}, wantReboots: []int{1, 0, 0, 0}, wantErr: []bool{true, false, false, false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			n := newNode(t)
			for i, rb := range tt.rebootBefore {
				if rb {
					n.boot(t, 2000+i)
				}
				reboots, err := n.run(t)
				require.Equal(t, tt.wantReboots[i], reboots, "run %d: reboots", i)
				if tt.wantErr[i] {
					require.Error(t, err, "run %d ends with the reboot, not in success", i)
				} else {
					require.NoError(t, err, "run %d", i)
				}
				require.Equal(t, 1, n.markerLines(t), "run %d: the work ran once", i)
			}
		})
	}
}

func TestBootIdentityChangesWithInit(t *testing.T) {
	t.Parallel()
	n := newNode(t)
	a, err := bootIdentity(n.proc)
	require.NoError(t, err)
	require.Equal(t, "3f1c9a2e-host-kernel/1000", a)
	n.boot(t, 1234)
	b, err := bootIdentity(n.proc)
	require.NoError(t, err)
	require.NotEqual(t, a, b)
}
