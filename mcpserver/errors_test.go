package mcpserver

import (
	"context"
	"errors"
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

// A tool error names its kind once, and still unwraps to its error.
func TestToolErrorSaysKindOnce(t *testing.T) {
	for _, base := range []error{errdefs.ErrUnavailable, errdefs.ErrConflict} {
		err := toolError("doing", fmt.Errorf("%w: dockerd does not answer", base))
		kind := string(errkind.RowOf(base).Kind)
		if strings.Count(err.Error(), kind+":") != 1 || !errors.Is(err, base) {
			t.Errorf("%q: want %q once, and errors.Is %v", err, kind, base)
		}
	}
}

// A run refused because the template's warm pool is empty advises waiting
// for its refill, not destroying sandboxes, which would not refill it.
func TestToolErrorEmptyPoolAdvisesRefill(t *testing.T) {
	err := fmt.Errorf("%w: warm pool %q is empty (2 sandboxes, all claimed or still starting)", errkind.ErrPoolEmpty, "py")
	for _, got := range []string{toolError("running the code", err).Error(), sandboxError("sb-1", err).Error()} {
		if !strings.Contains(got, "over_limit") || !strings.Contains(got, "refill") || strings.Contains(got, "sandbox_destroy") {
			t.Errorf("%q: want over_limit with the pool's advice (wait for the refill), not sandbox_destroy", got)
		}
	}
}
