package planview

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"sigs.k8s.io/yaml"
)

// NewTable returns the writer of every table the commands print, with kubectl's settings
// (k8s.io/cli-runtime printers.GetNewTabWriter): cells at least 6 wide, 3 spaces between
// columns. The caller writes tab-separated rows and flushes it.
func NewTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 6, 4, 3, ' ', 0)
}

// Encode writes v as one indented JSON document followed by a newline: the one JSON writer of
// every command's -o json.
func Encode(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("write JSON: %w", err)
	}
	return nil
}

// EncodeYAML writes v as one YAML document that starts with "---": its JSON (Encode), field for
// field, as kubectl get -o yaml -w writes one document per change.
func EncodeYAML(w io.Writer, v any) error {
	var b bytes.Buffer
	if err := Encode(&b, v); err != nil {
		return err
	}
	y, err := yaml.JSONToYAML(b.Bytes())
	if err != nil {
		return fmt.Errorf("write YAML: %w", err)
	}
	if _, err := fmt.Fprintf(w, "---\n%s", y); err != nil {
		return fmt.Errorf("write YAML: %w", err)
	}
	return nil
}
