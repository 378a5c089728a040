package service

import "testing"

// Work retired once ClosePools waits (a request that outlived the drain)
// runs before retiring returns, rather than joining a wait under way.
func TestRetiringAfterClosePoolsRunsNow(t *testing.T) {
	s := New(t.TempDir(), nil)
	s.ClosePools()
	ran := false
	s.retiring(func() { ran = true })
	if !ran {
		t.Fatal("work retired after ClosePools was left in the background")
	}
	// Before it, work runs in the background and ClosePools waits for it.
	s = New(t.TempDir(), nil)
	release, done := make(chan struct{}), make(chan struct{})
	s.retiring(func() { <-release; close(done) })
	close(release)
	s.ClosePools()
	select {
	case <-done:
	default:
		t.Fatal("ClosePools returned before the retired work ended")
	}
}
