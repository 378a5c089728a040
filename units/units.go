// Package units parses the human quantities that airlock takes on its
// command line: byte sizes ("512MiB"), CPU counts ("1.5") and durations
// ("30s").
//
// The parsers are strict. Anything they cannot read exactly is an error that
// says which forms are accepted; nothing is rounded, clamped or guessed.
package units

import (
	"errors"
	"fmt"
	"math/big"
	"strings"
	"time"
)

// ErrSyntax is wrapped by every parse error, so callers can classify it as
// invalid input.
var ErrSyntax = errors.New("invalid quantity")

// ErrNotWhole and ErrTooLarge are wrapped too by a size that reads as a
// number but is not a whole number of bytes ("1.5"), or is past an int64.
var (
	ErrNotWhole = errors.New("is not a whole number of bytes")
	ErrTooLarge = errors.New("is too large")
)

// Bytes is a count of bytes.
type Bytes int64

var byteUnits = map[string]int64{
	"":    1,
	"b":   1,
	"k":   1 << 10,
	"kb":  1000,
	"kib": 1 << 10,
	"m":   1 << 20,
	"mb":  1000 * 1000,
	"mib": 1 << 20,
	"g":   1 << 30,
	"gb":  1000 * 1000 * 1000,
	"gib": 1 << 30,
	"t":   1 << 40,
	"tb":  1000 * 1000 * 1000 * 1000,
	"tib": 1 << 40,
}

const bytesForms = `use a number with an optional unit, such as 1048576, 512KiB, 64MiB, 1.5GiB or 2GB (KiB/MiB/GiB/TiB are powers of 1024, KB/MB/GB/TB powers of 1000)`

// ParseBytes reads a size such as "512MiB", "1.5GiB", "100MB" or "4096".
// The number must be non-negative and the result a whole number of bytes
// that fits in an int64.
func ParseBytes(s string) (Bytes, error) {
	in := strings.TrimSpace(s)
	i := 0
	for i < len(in) && (in[i] >= '0' && in[i] <= '9' || in[i] == '.') {
		i++
	}
	num, unit := in[:i], strings.ToLower(strings.TrimSpace(in[i:]))
	mult, ok := byteUnits[unit]
	if num == "" || !ok {
		return 0, fmt.Errorf("%w: size %q: %s", ErrSyntax, s, bytesForms)
	}
	r, ok := parseDecimal(num)
	if !ok {
		return 0, fmt.Errorf("%w: size %q: %s", ErrSyntax, s, bytesForms)
	}
	r.Mul(r, new(big.Rat).SetInt64(mult))
	if !r.IsInt() {
		return 0, fmt.Errorf("%w: size %q %w", ErrSyntax, s, ErrNotWhole)
	}
	if !r.Num().IsInt64() {
		return 0, fmt.Errorf("%w: size %q %w", ErrSyntax, s, ErrTooLarge)
	}
	return Bytes(r.Num().Int64()), nil
}

// parseDecimal reads "123", "1.5" or ".5" exactly: digits with at most
// one point. big.Rat.SetString alone would also take signs, exponents,
// fractions ("1/2"), base prefixes ("0x10") and separators ("1_0").
func parseDecimal(s string) (*big.Rat, bool) {
	if strings.Trim(s, ".") == "" || strings.Count(s, ".") > 1 || len(s) > 40 {
		return nil, false
	}
	for _, c := range []byte(s) {
		if (c < '0' || c > '9') && c != '.' {
			return nil, false
		}
	}
	r, ok := new(big.Rat).SetString(s)
	return r, ok
}

// String prints the size in the largest binary unit that divides it exactly.
func (b Bytes) String() string {
	for _, u := range []struct {
		name string
		n    int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if b != 0 && int64(b)%u.n == 0 {
			return fmt.Sprintf("%d%s", int64(b)/u.n, u.name)
		}
	}
	return fmt.Sprintf("%dB", int64(b))
}

// Approx prints the size for people, to one decimal in the largest binary
// unit it reaches: "1.5 GiB", "312.0 KiB", "17 B".
func (b Bytes) Approx() string {
	for _, u := range []struct {
		name string
		n    int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if int64(b) >= u.n {
			return fmt.Sprintf("%.1f %s", float64(b)/float64(u.n), u.name)
		}
	}
	return fmt.Sprintf("%d B", int64(b))
}

// MilliCPUs is a CPU allowance in thousandths of a CPU.
type MilliCPUs int64

// MaxCPUs bounds ParseCPUs; no host airlock targets has more.
const MaxCPUs = 1024

// ParseCPUs reads a CPU count such as "1", "0.5" or "2.25", with at most
// three decimal places, greater than zero.
func ParseCPUs(s string) (MilliCPUs, error) {
	r, ok := parseDecimal(strings.TrimSpace(s))
	if !ok {
		return 0, fmt.Errorf("%w: cpus %q: use a positive decimal number such as 1, 0.5 or 2", ErrSyntax, s)
	}
	r.Mul(r, big.NewRat(1000, 1))
	if !r.IsInt() {
		return 0, fmt.Errorf("%w: cpus %q: at most three decimal places", ErrSyntax, s)
	}
	if r.Sign() <= 0 || r.Cmp(big.NewRat(MaxCPUs*1000, 1)) > 0 {
		return 0, fmt.Errorf("%w: cpus %q: must be more than 0 and at most %d", ErrSyntax, s, MaxCPUs)
	}
	return MilliCPUs(r.Num().Int64()), nil
}

// NanoCPUs converts to the unit the Docker API uses.
func (m MilliCPUs) NanoCPUs() int64 { return int64(m) * 1e6 }

func (m MilliCPUs) String() string {
	if m%1000 == 0 {
		return fmt.Sprintf("%d", m/1000)
	}
	return strings.TrimRight(fmt.Sprintf("%d.%03d", m/1000, m%1000), "0")
}

// ParseDuration reads a Go duration such as "30s", "1m30s" or "1.5h". A
// bare number is refused, because "30" could mean seconds or milliseconds.
// The result must be positive.
func ParseDuration(s string) (time.Duration, error) {
	t := strings.TrimSpace(s)
	if _, ok := parseDecimal(t); ok {
		return 0, fmt.Errorf("%w: duration %q has no unit: write %ss (or ms, m, h)", ErrSyntax, s, t)
	}
	d, err := time.ParseDuration(t)
	if err != nil || strings.HasPrefix(t, "-") || strings.HasPrefix(t, "+") {
		return 0, fmt.Errorf("%w: duration %q: use a number and unit such as 500ms, 30s, 2m or 1h30m", ErrSyntax, s)
	}
	if d <= 0 {
		return 0, fmt.Errorf("%w: duration %q must be more than zero", ErrSyntax, s)
	}
	return d, nil
}
