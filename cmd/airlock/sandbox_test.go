package main

import (
	"io"
	"strings"
	"testing"
)

// --download-types goes through wire's MIME list, as the API's
// download_types does: the same refusals and the same cap.
func TestSandboxCreateDownloadTypes(t *testing.T) {
	for _, c := range []struct{ types, want string }{
		{"text/nope", `--download-types "text/nope": unknown MIME type`},
		{" , ", "empty; list at least one MIME type"},
		{strings.Repeat("text/plain,", 65), "give at most 64 MIME types"},
	} {
		cmd := newSandboxCreateCmd(&globals{root: t.TempDir()})
		cmd.SetArgs([]string{"--download-types", c.types})
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		if err := cmd.Execute(); exitCode(err) != exitUsage || !strings.Contains(err.Error(), c.want) {
			t.Errorf("--download-types %.40q: %v; want a usage error saying %q", c.types, err, c.want)
		}
	}
}
