package admission

import (
	"errors"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
)

func TestGate(t *testing.T) {
	g := New(t.TempDir(), 2)
	r1, err := g.Admit()
	if err != nil {
		t.Fatal(err)
	}
	r2, err := g.Admit()
	if err != nil {
		t.Fatal(err)
	}
	_, err = g.Admit()
	var ol *OverLimitError
	if !errors.As(err, &ol) || !errdefs.IsResourceExhausted(err) || !strings.Contains(err.Error(), "--max-sandboxes 2") {
		t.Fatalf("a third admission under 2: %v", err)
	}
	r1()
	r1() // twice is once
	r3, err := g.Admit()
	if err != nil {
		t.Fatalf("after a release: %v", err)
	}
	if _, err := g.Admit(); err == nil {
		t.Fatal("a release given twice freed two places")
	}
	r2()
	r3()
}

func TestNilGateAdmits(t *testing.T) {
	var g *Gate
	release, err := g.Admit()
	if err != nil {
		t.Fatal(err)
	}
	release()
}
