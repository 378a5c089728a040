package claim

import (
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/runner"
)

// A claimed pod whose spec widens what airlock renders (its template was
// edited after render) is refused, and the claim given back.
func TestCreateRefusesWideningPod(t *testing.T) {
	a := &apiServer{widen: func(s map[string]any) { s["hostNetwork"] = true }}
	cfg, s := setup(t, a)
	id, _ := runner.NewSandboxID()
	_, err := s.Create(context.Background(), CreateOptions{ID: id, Config: cfg, WarmPool: "py"})
	if !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "spec.hostNetwork") || !strings.Contains(err.Error(), "airlock kube render") {
		t.Fatalf("a widened pod: %v; want failed precondition naming the field and the fix", err)
	}
	if n, _ := s.Count(); n != 0 || a.deletes != 1 {
		t.Errorf("%d records, %d claims deleted; want none left", n, a.deletes)
	}
}

// renderedSpec, the tests' API server's pod, passes.
func TestRenderedSpecPasses(t *testing.T) {
	var spec map[string]any
	json.Unmarshal([]byte(renderedSpec), &spec)
	if err := CheckPodSpec(spec); err != nil {
		t.Fatal(err)
	}
}

// An activeDeadlineSeconds past what a time.Duration holds saturates.
func TestActiveDeadlineSaturates(t *testing.T) {
	if got := ActiveDeadline(600); got != 10*time.Minute {
		t.Errorf("600: %v", got)
	}
	for _, d := range []int64{math.MaxInt64, 1 << 40, int64(math.MaxInt64/time.Second) + 1} {
		if got := ActiveDeadline(d); got != maxDeadline || got+time.Hour < got {
			t.Errorf("%d: %v; want %v", d, got, maxDeadline)
		}
	}
	a := &apiServer{deadline: math.MaxInt64}
	cfg, s := setup(t, a)
	id, _ := runner.NewSandboxID()
	rec, err := s.Create(context.Background(), CreateOptions{ID: id, Config: cfg, WarmPool: "py"})
	if err != nil {
		t.Fatal(err)
	}
	if start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC); !rec.ExpiresAt.After(start.Add(50 * 365 * 24 * time.Hour)) {
		t.Errorf("a deadline of %d s expires at %v", int64(math.MaxInt64), rec.ExpiresAt)
	}
}
