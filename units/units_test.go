package units

import (
	"errors"
	"testing"
	"time"
)

func TestParseBytes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Bytes
		ok   bool
	}{
		{"0", 0, true},
		{"4096", 4096, true},
		{"512MiB", 512 << 20, true},
		{"512mib", 512 << 20, true},
		{"512 MiB", 512 << 20, true},
		{"1.5GiB", 3 << 29, true},
		{"64m", 64 << 20, true},
		{"2GB", 2e9, true},
		{"1KB", 1000, true},
		{".5KiB", 512, true},
		{"8EiB", 0, false},
		{"9000000TiB", 0, false},
		{"1.5B", 0, false},
		{"1.5.5MiB", 0, false},
		{"-1MiB", 0, false},
		{"+1MiB", 0, false},
		{"1e6", 0, false},
		{"MiB", 0, false},
		{"", 0, false},
		{".", 0, false},
		{"12 parsecs", 0, false},
		{"0x10", 0, false},
	} {
		got, err := ParseBytes(tc.in)
		if tc.ok != (err == nil) || got != tc.want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrSyntax) {
			t.Errorf("ParseBytes(%q) error %v does not wrap ErrSyntax", tc.in, err)
		}
	}
}

func TestBytesString(t *testing.T) {
	for b, want := range map[Bytes]string{0: "0B", 1: "1B", 1024: "1KiB", 512 << 20: "512MiB", 1536: "1536B", 1000: "1000B", 3 << 40: "3TiB"} {
		if got := b.String(); got != want {
			t.Errorf("Bytes(%d).String() = %q, want %q", int64(b), got, want)
		}
	}
}

func TestBytesApprox(t *testing.T) {
	for b, want := range map[Bytes]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB", 5 << 20: "5.0 MiB", 3 << 40: "3072.0 GiB"} {
		if got := b.Approx(); got != want {
			t.Errorf("Bytes(%d).Approx() = %q, want %q", int64(b), got, want)
		}
	}
}

func TestParseCPUs(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want MilliCPUs
		ok   bool
	}{
		{"1", 1000, true},
		{"0.5", 500, true},
		{"1.5", 1500, true},
		{"2.125", 2125, true},
		{"0", 0, false},
		{"0.0001", 0, false},
		{"-1", 0, false},
		{"1025", 0, false},
		{"one", 0, false},
		{"", 0, false},
	} {
		got, err := ParseCPUs(tc.in)
		if tc.ok != (err == nil) || got != tc.want {
			t.Errorf("ParseCPUs(%q) = %d, %v; want %d, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
	if got := MilliCPUs(1500).String(); got != "1.5" {
		t.Errorf("String = %q", got)
	}
	if got := MilliCPUs(1500).NanoCPUs(); got != 1_500_000_000 {
		t.Errorf("NanoCPUs = %d", got)
	}
}

// ParseCPUs reads plain decimals only: big.Rat's other forms (signs,
// exponents, fractions, base prefixes, digit separators) are refused.
func TestParseCPUsTakesOnlyDecimals(t *testing.T) {
	for _, s := range []string{"+1", "1e1", "2e-2", "1/2", "0x10", "0b11", "0o7", "1_0", ".", "1..5"} {
		if c, err := ParseCPUs(s); err == nil || !errors.Is(err, ErrSyntax) {
			t.Errorf("ParseCPUs(%q) = %v CPUs, %v; want a syntax error", s, c, err)
		}
	}
	for s, want := range map[string]MilliCPUs{"2.": 2000, ".5": 500, "007": 7000} {
		if c, err := ParseCPUs(s); err != nil || c != want {
			t.Errorf("ParseCPUs(%q) = %v, %v; want %v", s, c, err, want)
		}
	}
}

// A size that reads as a number but is not a whole number of bytes, or
// is past an int64, says so (wire words its refusal from these).
func TestParseBytesReasons(t *testing.T) {
	for s, want := range map[string]error{"1.5": ErrNotWhole, "0.3KiB": ErrNotWhole, "9000000TiB": ErrTooLarge} {
		if _, err := ParseBytes(s); !errors.Is(err, want) || !errors.Is(err, ErrSyntax) {
			t.Errorf("ParseBytes(%q): %v; want %v", s, err, want)
		}
	}
}

func TestParseDuration(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"30s", 30 * time.Second, true},
		{"1.5s", 1500 * time.Millisecond, true},
		{"1m30s", 90 * time.Second, true},
		{"500ms", 500 * time.Millisecond, true},
		{"30", 0, false},
		{"0s", 0, false},
		{"-5s", 0, false},
		{"+5s", 0, false},
		{"5 s", 0, false},
		{"forever", 0, false},
		{"", 0, false},
	} {
		got, err := ParseDuration(tc.in)
		if tc.ok != (err == nil) || got != tc.want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func FuzzParseBytes(f *testing.F) {
	for _, s := range []string{"512MiB", "1.5GiB", "0", "1e9", "..", "9999999999999TiB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, err := ParseBytes(s)
		if err != nil {
			if !errors.Is(err, ErrSyntax) {
				t.Fatalf("error does not wrap ErrSyntax: %v", err)
			}
			return
		}
		if b < 0 {
			t.Fatalf("ParseBytes(%q) = %d, negative", s, b)
		}
		// The printed form must read back to the same value.
		if back, err := ParseBytes(b.String()); err != nil || back != b {
			t.Fatalf("round trip of %q: %q -> %d, %v", s, b.String(), back, err)
		}
	})
}

func FuzzParseCPUs(f *testing.F) {
	for _, s := range []string{"1", "0.5", "2.125", "1e3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParseCPUs(s)
		if err != nil {
			return
		}
		if m <= 0 || m > MaxCPUs*1000 {
			t.Fatalf("ParseCPUs(%q) = %d out of range", s, m)
		}
		if back, err := ParseCPUs(m.String()); err != nil || back != m {
			t.Fatalf("round trip of %q: %q -> %d, %v", s, m.String(), back, err)
		}
	})
}

func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"30s", "1h", "30", "-1s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDuration(s)
		if err == nil && d <= 0 {
			t.Fatalf("ParseDuration(%q) = %v, not positive", s, d)
		}
	})
}
