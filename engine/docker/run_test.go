package docker

import (
	"testing"
	"time"
)

// dockerd's times stand when they make a run; inverted (a program that
// ended before dockerd recorded its start), missing or zero, the
// engine's own do.
func TestRunTimes(t *testing.T) {
	own0 := time.Date(2026, 12, 6, 16, 42, 57, 0, time.UTC)
	own1 := own0.Add(50 * time.Millisecond)
	for _, c := range []struct {
		name                  string
		startedAt, finishedAt string
		want0, want1          time.Time
	}{
		{"dockerd's", "2026-12-06T16:42:57.01Z", "2026-12-06T16:42:57.04Z", own0.Add(10 * time.Millisecond), own0.Add(40 * time.Millisecond)},
		{"equal", "2026-12-06T16:42:57.01Z", "2026-12-06T16:42:57.01Z", own0.Add(10 * time.Millisecond), own0.Add(10 * time.Millisecond)},
		{"inverted", "2026-12-06T16:42:57.081081263Z", "2026-12-06T16:42:57.080851542Z", own0, own1},
		{"not finished", "2026-12-06T16:42:57.01Z", "0001-01-01T00:00:00Z", own0, own1},
		{"unparsable", "", "2026-12-06T16:42:57.04Z", own0, own1},
	} {
		got0, got1 := runTimes(c.startedAt, c.finishedAt, own0, own1)
		if !got0.Equal(c.want0) || !got1.Equal(c.want1) {
			t.Errorf("%s: %v, %v; want %v, %v", c.name, got0, got1, c.want0, c.want1)
		}
	}
}
