// Package timing summarises measured durations for the benchmarks.
package timing

import (
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
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

// Row is one scenario of a benchmark's table: its name and its timings.
type Row struct {
	Name string
	Took []time.Duration
}

// Table writes rows to w, right-aligned, under a header whose first
// column is title: runs, p50, p99 and mean, in milliseconds.
func Table(w io.Writer, title string, rows []Row) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%s\truns\tp50 ms\tp99 ms\tmean ms\t\n", title)
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.1f\t%.1f\t\n", r.Name, len(r.Took), MS(Percentile(r.Took, 50)), MS(Percentile(r.Took, 99)), MS(Mean(r.Took)))
	}
	return tw.Flush()
}
