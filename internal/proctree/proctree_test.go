package proctree

import (
	"slices"
	"testing"
)

// The kill's victims are read from the tree: the session, and every
// descendant, however it left the session; never init, never another
// exec's processes.
func TestOf(t *testing.T) {
	ps := []Proc{
		{1, 0, 1, 1},     // init
		{10, 1, 10, 10},  // the exec
		{11, 10, 10, 10}, // its child
		{12, 11, 12, 12}, // a grandchild that called setsid
		{13, 1, 10, 10},  // orphaned to init, still in the session
		{14, 13, 14, 14}, // its child in a session of its own
		{20, 1, 20, 20},  // another exec
		{21, 20, 20, 20}, // and its child
		{30, 1, 1, 1},    // in init's session
	}
	want := []int{10, 11, 12, 13, 14}
	if got := Of(ps, 10); !slices.Equal(sorted(got), want) {
		t.Fatalf("Of = %v; want %v", got, want)
	}
	// Where sessions are unknown (gVisor), process groups stand in.
	for i := range ps {
		ps[i].Sid = -1
	}
	if got := Of(ps, 10); !slices.Equal(sorted(got), want) {
		t.Fatalf("Of by process groups = %v; want %v", got, want)
	}
	// Where neither is known, descendants alone.
	for i := range ps {
		ps[i].Pgid = -1
	}
	if got, want := Of(ps, 10), []int{10, 11, 12}; !slices.Equal(sorted(got), want) {
		t.Fatalf("Of without sessions = %v; want %v", got, want)
	}
}

func sorted(s []int) []int {
	slices.Sort(s)
	return s
}
