package main

import (
	"errors"
	"io"
	"testing"

	"github.com/airlock-sandbox/airlock/service"
)

// airlock mcp's service admits at most --max-execs execs at once, as
// airlock serve's does, and takes no cap below one.
func TestMCPServiceExecCap(t *testing.T) {
	g := &globals{root: t.TempDir(), stderr: io.Discard}
	if _, err := mcpService(g, "auto", 8, 0); !errors.As(err, new(usageError)) {
		t.Fatalf("--max-execs 0: %v; want a usage error", err)
	}
	svc, err := mcpService(g, "auto", 8, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"sb-a", "sb-b"} {
		if _, err := svc.AdmitExec(id); err != nil {
			t.Fatalf("exec in %s: %v", id, err)
		}
	}
	var over *service.ExecsOverLimitError
	if _, err := svc.AdmitExec("sb-c"); !errors.As(err, &over) {
		t.Fatalf("a third exec: %v; want over the cap of 2", err)
	}
}
