package priority

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLowerRejects(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                   string
		nice, ioClass, ioLevel int
	}{
		{"nice zero", 0, IOClassBestEffort, 7},
		{"nice above 19", 20, IOClassBestEffort, 7},
		{"realtime class", 10, 1, 0},
		{"level above 7", 10, IOClassBestEffort, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Error(t, Lower(tc.nice, tc.ioClass, tc.ioLevel))
		})
	}
}

// TestLowerEveryThread runs Lower in a child process (priorities cannot be raised back without
// privileges) and checks every thread of the child.
func TestLowerEveryThread(t *testing.T) {
	t.Parallel()
	if os.Getenv("PRIORITY_CHILD") == "1" {
		// A thread already nicer than 12 (a test run under nice) keeps its value: Lower never raises.
		before, _, err := Current(os.Getpid())
		require.NoError(t, err)
		want := max(12, before)
		require.NoError(t, Lower(12, IOClassIdle, 0))
		tasks, err := os.ReadDir("/proc/self/task")
		require.NoError(t, err)
		for _, task := range tasks {
			tid, err := strconv.Atoi(task.Name())
			require.NoError(t, err)
			nice, ioprio, err := Current(tid)
			if err != nil {
				continue // the thread has exited
			}
			require.Equal(t, want, nice, "thread %d", tid)
			require.Equal(t, IOClassIdle<<ioprioClassShift, ioprio, "thread %d", tid)
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestLowerEveryThread$", "-test.v")
	cmd.Env = append(os.Environ(), "PRIORITY_CHILD=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.True(t, strings.Contains(string(out), "--- PASS: TestLowerEveryThread"), "%s", out)
}
