package proc

import (
	"testing"
	"time"
)

func TestParseHostCPU(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		bad  bool
	}{
		// user nice system idle iowait irq softirq steal guest guest_nice
		{in: "cpu  100 2 30 5000 40 1 2 3 0 0\ncpu0 50 1 15 2500 20 0 1 1 0 0\n", want: 138 * clockTick},
		{in: "cpu  1 0 0 9 9 0 0 0\n", want: clockTick},
		{in: "cpu0 1 0 0 9 9 0 0 0\n", bad: true},
		{in: "cpu  1 0 0\n", bad: true},
		{in: "cpu  1 x 0 9 9 0 0 0\n", bad: true},
		{in: "", bad: true},
	} {
		got, err := ParseHostCPU([]byte(tc.in))
		if tc.bad {
			if err == nil {
				t.Errorf("ParseHostCPU(%q) = %v; want an error", tc.in, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseHostCPU(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

// The host has been busy for some time since it booted.
func TestHostCPU(t *testing.T) {
	if d, err := HostCPU(); err != nil || d <= 0 {
		t.Fatalf("HostCPU: %v, %v", d, err)
	}
}
