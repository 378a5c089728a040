package timing

import (
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	var d []time.Duration
	for i := 100; i >= 1; i-- {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	if got := Percentile(d, 50); got != 50*time.Millisecond {
		t.Errorf("p50 = %v", got)
	}
	if got := Percentile(d, 99); got != 99*time.Millisecond {
		t.Errorf("p99 = %v", got)
	}
	if d[0] != 100*time.Millisecond {
		t.Error("Percentile sorted its input")
	}
	if Mean(d) != 50500*time.Microsecond || Percentile(nil, 50) != 0 || MS(1500*time.Microsecond) != 1.5 {
		t.Error("Mean or MS")
	}
}
