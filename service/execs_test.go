package service

import (
	"errors"
	"testing"

	"github.com/containerd/errdefs"
)

// TestAdmitExec: execs are counted server-wide and per sandbox; past
// either cap one is refused as resource exhausted, and a release, however
// often called, gives back one.
func TestAdmitExec(t *testing.T) {
	s := New(t.TempDir(), nil, WithExecLimits(3, 2))
	var rel []func()
	for _, id := range []string{"a", "a", "b"} {
		r, err := s.AdmitExec(id)
		if err != nil {
			t.Fatalf("exec in %s below the caps: %v", id, err)
		}
		rel = append(rel, r)
	}
	for _, c := range []struct {
		id         string
		perSandbox bool
	}{{"c", false}, {"a", false}} {
		_, err := s.AdmitExec(c.id)
		var ol *ExecsOverLimitError
		if !errors.As(err, &ol) || !errdefs.IsResourceExhausted(err) || ol.PerSandbox != c.perSandbox {
			t.Errorf("exec in %s past the server's cap: %v", c.id, err)
		}
	}
	rel[2]()
	rel[2]()
	if _, err := s.AdmitExec("a"); err == nil {
		t.Error("a third exec in a admitted past its cap of 2")
	} else if ol := (*ExecsOverLimitError)(nil); !errors.As(err, &ol) || !ol.PerSandbox {
		t.Errorf("a third exec in a: %v, want the sandbox's cap", err)
	}
	if _, err := s.AdmitExec("c"); err != nil {
		t.Errorf("exec in c after one ended: %v", err)
	}
	if _, err := s.AdmitExec("d"); err == nil {
		t.Error("one release given back twice")
	}
	if _, err := New(t.TempDir(), nil).AdmitExec("a"); err != nil {
		t.Errorf("without WithExecLimits: %v", err)
	}
}
