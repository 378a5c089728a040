package egress

import (
	"sync"
	"time"
)

// A sandbox that is refused in a loop (connections to hosts not on its
// list, DNS queries) would have the host write an audit record for each,
// as fast as it can ask: the host's disk would pay for it. Refusals are
// counted in full (Stats), but written at most refusedBurst at once and one
// every refusedEvery after that; a written refusal carries the count of
// those left out before it, and the proxy's end writes one record with
// the rest. Allowed connections that moved no byte either way (a failed
// dial, a tunnel opened and closed empty) cost no budget, so they are
// sampled with them. Other allowed connections are always written: each
// took at least one byte from the budget, so the byte limit bounds how
// many there are, and they carry the bytes.
const (
	refusedBurst = 64
	refusedEvery = 100 * time.Millisecond
)

// ReasonSuppressed is the Reason of the record that counts refusals not
// written (its Suppressed), when a proxy ends.
const ReasonSuppressed = "refusals_not_written"

// sampler is a token bucket over refused records.
type sampler struct {
	mu         sync.Mutex
	tokens     float64
	last       time.Time
	suppressed int64
}

// take reports whether a refusal at now is written, and if so, how many
// were left out since the last one written.
func (s *sampler) take(now time.Time) (write bool, skipped int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last.IsZero() {
		s.tokens = refusedBurst
	} else if d := now.Sub(s.last); d > 0 {
		s.tokens = min(refusedBurst, s.tokens+float64(d)/float64(refusedEvery))
	}
	s.last = now
	if s.tokens < 1 {
		s.suppressed++
		return false, 0
	}
	s.tokens--
	skipped, s.suppressed = s.suppressed, 0
	return true, skipped
}

// drain returns the refusals left out and not yet reported.
func (s *sampler) drain() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.suppressed
	s.suppressed = 0
	return n
}
