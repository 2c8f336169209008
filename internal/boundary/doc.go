// Package boundary holds no code: its test keeps the dependency rules of the module, the one place
// where they are written down. Adapters alone import their technology (containerd, memberlist),
// the ISO reader knows only the format, the server knows fs.FS and HTTP, policies and API types stay
// free of everything else; the agent decides and is handed its adapters; cmd wires them together.
// `make test` and `make lint` (hack/lint.sh) run it; .golangci.yml holds no copy of the rules
// (TestDependencyRulesInOnePlace), and names no path that matches no file.
//
// Imports: the standard library, go/parser and testify, in its tests only.
package boundary
