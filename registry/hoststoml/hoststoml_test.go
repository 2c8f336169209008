package hoststoml

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestWrite(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		existing   string
		registries []string
		mirror     string
		wantErr    string
	}{
		{name: "fresh directory", registries: []string{"docker.io", "registry.suse.com"}, mirror: "http://10.0.0.5:5050"},
		{name: "replaces its own file", existing: Marker + "\nserver = \"old\"\n", registries: []string{"docker.io"}, mirror: "http://10.0.0.5:5050"},
		{name: "keeps an operator's file", existing: "server = \"https://mine\"\n", registries: []string{"docker.io"}, mirror: "http://10.0.0.5:5050", wantErr: "not written by upgrade-repo"},
		{name: "bad registry", registries: []string{"../etc"}, mirror: "http://10.0.0.5:5050", wantErr: "want a host name"},
		{name: "bad mirror", registries: []string{"docker.io"}, mirror: "10.0.0.5:5050", wantErr: "want an http://"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			if tc.existing != "" {
				require.NoError(t, os.MkdirAll(filepath.Join(dir, "docker.io"), 0o755))
				require.NoError(t, os.WriteFile(filepath.Join(dir, "docker.io", "hosts.toml"), []byte(tc.existing), 0o644))
			}
			err := Write(dir, tc.mirror, tc.registries)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				if tc.existing != "" {
					got, rerr := os.ReadFile(filepath.Join(dir, "docker.io", "hosts.toml"))
					require.NoError(t, rerr)
					require.Equal(t, tc.existing, string(got))
				}
				return
			}
			require.NoError(t, err)
			for _, reg := range tc.registries {
				got, err := os.ReadFile(filepath.Join(dir, reg, "hosts.toml"))
				require.NoError(t, err)
				require.Equal(t, Render(reg, tc.mirror), string(got))
			}
		})
	}
	require.Contains(t, Render("docker.io", "http://n:1"), `server = "https://registry-1.docker.io"`)
	require.Contains(t, Render("docker.io", "http://n:1"), `[host."http://n:1"]`)
}
