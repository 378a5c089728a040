package runner

import (
	"context"
	"time"
)

// A clock times the phases of one run for --debug: each mark is the time
// since the previous one. It lives in the run's context and costs nothing
// when the context has none.
type clock struct {
	last  time.Time
	attrs []any
}

type clockKey struct{}

func withClock(ctx context.Context) context.Context {
	return context.WithValue(ctx, clockKey{}, &clock{last: time.Now()})
}

// mark ends the phase called name.
func mark(ctx context.Context, name string) {
	c, _ := ctx.Value(clockKey{}).(*clock)
	if c == nil {
		return
	}
	now := time.Now()
	c.attrs = append(c.attrs, name, now.Sub(c.last).Round(10*time.Microsecond).String())
	c.last = now
}

// phases returns the marks as log attributes.
func phases(ctx context.Context) []any {
	c, _ := ctx.Value(clockKey{}).(*clock)
	if c == nil {
		return nil
	}
	return c.attrs
}
