package egress

import (
	"testing"
	"time"
)

// A burst of refusals is written up to refusedBurst; then one per
// refusedEvery, the first after a gap carrying the count left out.
func TestSampler(t *testing.T) {
	var s sampler
	t0 := time.Unix(1000, 0)
	for i := range refusedBurst {
		if write, skipped := s.take(t0); !write || skipped != 0 {
			t.Fatalf("refusal %d of the burst: write %v, skipped %d", i, write, skipped)
		}
	}
	for i := range 36 {
		if write, _ := s.take(t0); write {
			t.Fatalf("refusal %d past the burst written", i)
		}
	}
	t1 := t0.Add(10 * refusedEvery)
	if write, skipped := s.take(t1); !write || skipped != 36 {
		t.Fatalf("first refusal after the gap: write %v, skipped %d; want true, 36", write, skipped)
	}
	for range 9 {
		if write, skipped := s.take(t1); !write || skipped != 0 {
			t.Fatalf("refill: write %v, skipped %d", write, skipped)
		}
	}
	if write, _ := s.take(t1); write {
		t.Fatal("written past the refill")
	}
	if n := s.drain(); n != 1 {
		t.Fatalf("drain: %d; want 1", n)
	}
	if n := s.drain(); n != 0 {
		t.Fatalf("second drain: %d; want 0", n)
	}
	// A long quiet refills the bucket to the burst, no more.
	t2 := t1.Add(1000 * refusedEvery)
	n := 0
	for {
		if write, _ := s.take(t2); !write {
			break
		}
		n++
	}
	if n != refusedBurst {
		t.Fatalf("after a long quiet, %d written at once; want %d", n, refusedBurst)
	}
}

// However fast refusals come, the records account for every one: each
// written refusal, what it says was left out before it, and the record
// the proxy writes at its end.
func TestRefusalFloodAccounted(t *testing.T) {
	h := newHarness(t, []string{"pypi.org"})
	c, stop := h.serveDNS()
	const sent = 4 * refusedBurst
	for range sent {
		c.Write([]byte("x"))
	}
	// UDP may drop some: wait until the proxy has taken in what it will.
	for prev := int64(-1); ; {
		time.Sleep(200 * time.Millisecond)
		n := h.p.Stats().Totals.Refused
		if n == prev {
			break
		}
		prev = n
	}
	if err := stop(); err != nil {
		t.Fatalf("ServeDNS: %v", err)
	}
	refused := h.p.Stats().Totals.Refused
	h.mu.Lock()
	recs := append([]Record(nil), h.recs...)
	h.mu.Unlock()
	var accounted int64
	for _, r := range recs {
		switch {
		case r.Reason == ReasonSuppressed:
			accounted += r.Suppressed
		case !r.Allowed:
			accounted += 1 + r.Suppressed
		}
	}
	if refused == 0 || accounted != refused {
		t.Fatalf("%d refusals taken in, %d accounted for by %d records", refused, accounted, len(recs))
	}
	if int64(len(recs)) > refused {
		t.Fatalf("%d records for %d refusals", len(recs), refused)
	}
	t.Logf("%d of %d refusals taken in; %d records written", refused, sent, len(recs))
}
