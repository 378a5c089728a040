package mcpserver

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/errkind"
)

// Every kind reaches a tool error with its word and errkind's advice.
func TestToolErrorEveryKind(t *testing.T) {
	for kind, err := range map[errkind.Kind]error{
		errkind.SandboxLost: engine.ErrSandboxLost, errkind.InvalidInput: errdefs.ErrInvalidArgument,
		errkind.NotFound: errdefs.ErrNotFound, errkind.AlreadyExists: errdefs.ErrAlreadyExists,
		errkind.Unauthorized: errdefs.ErrUnauthenticated, errkind.PermissionDenied: errdefs.ErrPermissionDenied,
		errkind.OverLimit: errdefs.ErrResourceExhausted, errkind.Conflict: errdefs.ErrConflict,
		errkind.Timeout: context.DeadlineExceeded, errkind.Canceled: context.Canceled,
		errkind.Unavailable: errdefs.ErrUnavailable, errkind.Internal: fmt.Errorf("boom"),
	} {
		row, _ := errkind.Lookup(kind)
		if got := toolError("doing", err).Error(); !strings.Contains(got, string(kind)) || !strings.Contains(got, row.Advice) {
			t.Errorf("%s: %q lacks the kind or its advice", kind, got)
		}
		if got := sandboxError("sb-1", err).Error(); !strings.Contains(got, string(kind)) {
			t.Errorf("%s: sandbox error %q lacks the kind", kind, got)
		}
	}
	if len(errkind.Table) != 12 {
		t.Errorf("errkind has %d kinds; this test covers 12", len(errkind.Table))
	}
}
