package fetch

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// Rendezvous ownership spreads the chunks evenly, even over names that differ by one character,
// and moves only the chunks of a member that leaves.
func TestOwnerSpreadsChunks(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		names []string
	}{
		{name: "numbered", names: []string{"node2", "node3", "node4", "node5", "node6"}},
		{name: "hostnames", names: []string{"worker-a", "worker-b", "cp-1", "cp-2", "cp-3"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const chunks = 1500
			count := map[string]int{}
			for c := range chunks {
				count[owner(c, tc.names)]++
			}
			for _, n := range tc.names {
				share := float64(count[n]) / chunks
				require.InDelta(t, 1.0/float64(len(tc.names)), share, 0.05, fmt.Sprint(count))
			}
			rest := tc.names[1:]
			for c := range chunks {
				if o := owner(c, tc.names); o != tc.names[0] {
					require.Equal(t, o, owner(c, rest), "chunk %d moved although its owner stayed", c)
				}
			}
		})
	}
}
