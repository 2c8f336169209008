package planview

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A message of a node (its step's report, a reason) never reaches the terminal with a control
// character in it: an escape sequence is printed escaped, in the table and in the live lines.
func TestMessagesAreEscaped(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string
	}{
		{name: "escape sequence", in: "\x1b[2J\x1b[Hall good", want: `\x1b[2J\x1b[Hall good`},
		{name: "carriage return folded", in: "failed\roverwritten", want: "failed overwritten"},
		{name: "white space folded", in: "a\n\tb", want: "a b"},
		{name: "bidirectional override", in: "ok\u202ex", want: `ok\u202ex`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, oneLine(tc.in))
		})
	}
}

// The table of WriteText holds no escape character whatever the node's message holds.
func TestWriteTextEscapesNodeMessages(t *testing.T) {
	t.Parallel()
	since := time.Unix(900, 0)
	p := &Plan{Name: "up", Time: time.Unix(1000, 0), Nodes: []NodeStatus{{Name: "n1", State: "KubernetesUpgrading",
		StateTime: &since, Message: "\x1b]0;owned\x07step"}}}
	var buf bytes.Buffer
	require.NoError(t, WriteText(&buf, p))
	require.NotContains(t, buf.String(), "\x1b")
	require.NotContains(t, buf.String(), "\x07")
	require.Contains(t, buf.String(), `\x1b]0;owned\x07step`)
}
