// Package timing summarises measured durations for the benchmarks.
package timing

import (
	"slices"
	"time"
)

// Percentile returns the p-th percentile (nearest rank) of d.
func Percentile(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[max(0, min(len(s)-1, i-1))]
}

// Mean returns the average of d.
func Mean(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	var t time.Duration
	for _, x := range d {
		t += x
	}
	return t / time.Duration(len(d))
}

// MS is d in milliseconds, with microsecond precision.
func MS(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
