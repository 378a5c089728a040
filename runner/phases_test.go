package runner

import (
	"bytes"
	"context"
	"log/slog"
	"regexp"
	"testing"

	"github.com/airlock-sandbox/airlock/engine"
)

// --debug shows where a run's time went, phase by phase, in order.
func TestRunLogsItsPhases(t *testing.T) {
	fe := &fakeEngine{run: func(context.Context, *engine.SandboxSpec) (engine.Exit, error) { return engine.Exit{}, nil }}
	var log bytes.Buffer
	r, _ := newFakeRunner(t, fe, WithLogger(slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	if _, err := r.Run(context.Background(), fakeSpec()); err != nil {
		t.Fatal(err)
	}
	want := regexp.MustCompile(`msg="run phases" plan=\S+ begin=\S+ scratch=\S+ create=\S+ record=\S+ wait=\S+ scan=\S+ seal=\S+ destroy=\S+ finish=\S+\n`)
	if !want.Match(log.Bytes()) {
		t.Fatalf("no phase line in the debug log:\n%s", log.String())
	}
}
