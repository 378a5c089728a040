package errkind

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/engine"
)

// Every errdefs class has one kind, wrapped or not.
func TestOfEveryClass(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want Kind
	}{
		{errdefs.ErrUnknown, Internal},
		{errdefs.ErrInvalidArgument, InvalidInput},
		{errdefs.ErrNotFound, NotFound},
		{errdefs.ErrAlreadyExists, AlreadyExists},
		{errdefs.ErrPermissionDenied, PermissionDenied},
		{errdefs.ErrResourceExhausted, OverLimit},
		{errdefs.ErrFailedPrecondition, Conflict},
		{errdefs.ErrConflict, Conflict},
		{errdefs.ErrNotModified, Internal},
		{errdefs.ErrAborted, Conflict},
		{errdefs.ErrOutOfRange, InvalidInput},
		{errdefs.ErrNotImplemented, InvalidInput},
		{errdefs.ErrInternal, Internal},
		{errdefs.ErrUnavailable, Unavailable},
		{errdefs.ErrDataLoss, Internal},
		{errdefs.ErrUnauthenticated, Unauthorized},
		{context.Canceled, Canceled},
		{context.DeadlineExceeded, Timeout},
		{engine.ErrSandboxLost, SandboxLost},
		{fmt.Errorf("%w: %w", engine.ErrSandboxLost, errdefs.ErrUnavailable), SandboxLost},
		{errors.New("plain"), Internal},
	} {
		for _, err := range []error{tc.err, fmt.Errorf("doing x %q: %w", "id", tc.err)} {
			if got := Of(err); got != tc.want {
				t.Errorf("Of(%v) = %s, want %s", err, got, tc.want)
			}
		}
	}
	if Of(nil) != "" {
		t.Error("nil has a kind")
	}
}

// Every kind has one full row, and only the last row holds for anything.
func TestTable(t *testing.T) {
	seen := map[Kind]bool{}
	for i, r := range Table {
		if seen[r.Kind] {
			t.Errorf("%s twice", r.Kind)
		}
		seen[r.Kind] = true
		if r.Exit == 0 || r.Status < 400 || r.Advice == "" || r.When == "" || r.is == nil {
			t.Errorf("%s: incomplete row %+v", r.Kind, r)
		}
		if r.is(errors.New("plain")) != (i == len(Table)-1) {
			t.Errorf("%s: holds for a plain error: %v", r.Kind, r.is(errors.New("plain")))
		}
		if got, ok := Lookup(r.Kind); !ok || got.Kind != r.Kind {
			t.Errorf("Lookup(%s) = %v, %v", r.Kind, got.Kind, ok)
		}
	}
	for _, k := range []Kind{SandboxLost, InvalidInput, NotFound, AlreadyExists, Unauthorized, PermissionDenied, OverLimit, Conflict, Timeout, Canceled, Unavailable, Internal} {
		if !seen[k] {
			t.Errorf("%s has no row", k)
		}
	}
	if Table[len(Table)-1].Kind != Internal {
		t.Error("Internal is not the last row")
	}
}

// An empty warm pool is over_limit, reads as errdefs' words, and advises
// waiting for the refill, not freeing sandboxes.
func TestPoolEmptyAdvice(t *testing.T) {
	err := fmt.Errorf("%w: warm pool %q is empty", ErrPoolEmpty, "py")
	if Of(err) != OverLimit || err.Error() != `resource exhausted: warm pool "py" is empty` {
		t.Errorf("%q is %s, want over_limit in errdefs' words", err, Of(err))
	}
	row, _ := Lookup(OverLimit)
	if got := Advice(err); got == row.Advice || !strings.Contains(got, "refill") || strings.Contains(got, "sandbox_destroy") {
		t.Errorf("Advice(%v) = %q, want the pool's own: wait for the refill", err, got)
	}
	if got := Advice(errdefs.ErrResourceExhausted); got != row.Advice {
		t.Errorf("Advice(%v) = %q, want the kind's %q", errdefs.ErrResourceExhausted, got, row.Advice)
	}
}
