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

// What CountAlso counts is live too, and a count that fails refuses.
func TestGateCountsOthers(t *testing.T) {
	g := New(t.TempDir(), 2)
	others, fail := 1, error(nil)
	g.CountAlso(func() (int, error) { return others, fail })
	release, err := g.Admit()
	if err != nil {
		t.Fatal(err)
	}
	var ol *OverLimitError
	if _, err := g.Admit(); !errors.As(err, &ol) || ol.Live != 2 {
		t.Fatalf("an admission with 1 other and 1 pending under 2: %v", err)
	}
	release()
	others = 0
	if !g.Room() {
		t.Fatal("no room once the others are gone")
	}
	fail = errors.New("unreadable")
	if _, err := g.Admit(); !errors.Is(err, fail) || g.Room() {
		t.Fatalf("a failed count: %v, room %v", err, g.Room())
	}
}
