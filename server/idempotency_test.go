package server

import (
	"strconv"
	"strings"
	"testing"
)

// TestIdempotencyBounded: the answers held for replay stay under
// idemMaxBytes, the oldest forgotten first: a retry of a forgotten key
// runs again, a retry of a kept one is replayed.
func TestIdempotencyBounded(t *testing.T) {
	defer func(n int64) { idemMaxBytes = n }(idemMaxBytes)
	idemMaxBytes = 100
	i := newIdempotency(t.TempDir())
	runs := map[string]int{}
	answer := func(key string) func() (int, []byte) {
		return func() (int, []byte) {
			runs[key]++
			return 200, []byte(strings.Repeat(key, 40/len(key)))
		}
	}
	for n := range 5 {
		key := "k" + strconv.Itoa(n)
		if _, _, replayed, err := i.do("/v1/runs", key, nil, false, answer(key)); err != nil || replayed {
			t.Fatalf("%s: replayed %v, %v", key, replayed, err)
		}
		if i.bytes > idemMaxBytes {
			t.Fatalf("after %s, %d bytes held, over %d", key, i.bytes, idemMaxBytes)
		}
	}
	if _, _, replayed, _ := i.do("/v1/runs", "k4", nil, false, answer("k4")); !replayed || runs["k4"] != 1 {
		t.Errorf("the newest key: replayed %v, ran %d times", replayed, runs["k4"])
	}
	if _, _, replayed, _ := i.do("/v1/runs", "k0", nil, false, answer("k0")); replayed || runs["k0"] != 2 {
		t.Errorf("the oldest key, forgotten: replayed %v, ran %d times", replayed, runs["k0"])
	}
}
