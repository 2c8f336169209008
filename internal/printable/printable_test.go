package printable_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/internal/printable"
)

func TestString(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string
	}{
		{name: "plain", in: "kubeadm upgrade node", want: "kubeadm upgrade node"},
		{name: "non-ASCII prints", in: "nœud café 节点", want: "nœud café 节点"},
		{name: "empty", in: "", want: ""},
		{name: "escape sequence", in: "\x1b[2J\x1b[Hall good", want: `\x1b[2J\x1b[Hall good`},
		{name: "carriage return and newline", in: "failed\r\nok", want: `failed\x0d\x0aok`},
		{name: "tab", in: "a\tb", want: `a\x09b`},
		{name: "DEL and a C1 control", in: "a\x7fb\u009bc", want: `a\x7fb\x9bc`},
		{name: "bidirectional override", in: "ok\u202edeliaf", want: `ok\u202edeliaf`},
		{name: "invalid UTF-8", in: "a\xffb", want: `a\xffb`},
		{name: "a literal replacement character prints", in: "a\uFFFDb", want: "a\uFFFDb"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, printable.String(tc.in))
		})
	}
}
