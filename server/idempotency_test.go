package server

import (
	"bytes"
	"os"
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

// TestIdempotencyDiskBounded: the creates' answers kept on disk stay
// under idemMaxDiskBytes, the oldest removed first; the newest is still
// replayed by a restarted server.
func TestIdempotencyDiskBounded(t *testing.T) {
	defer func(n, d int64) { idemMaxBytes, idemMaxDiskBytes = n, d }(idemMaxBytes, idemMaxDiskBytes)
	idemMaxBytes, idemMaxDiskBytes = 4<<10, 16<<10
	root := t.TempDir()
	i := newIdempotency(root)
	answer := func() (int, []byte) { return 201, bytes.Repeat([]byte("x"), 2<<10) }
	for n := range 40 {
		if _, _, _, err := i.do("POST /v1/sandboxes", "key-"+strconv.Itoa(n), []byte("{}"), true, answer); err != nil {
			t.Fatal(err)
		}
		var disk int64
		ents, _ := os.ReadDir(i.dir)
		for _, e := range ents {
			if fi, err := e.Info(); err == nil {
				disk += fi.Size()
			}
		}
		if disk > idemMaxDiskBytes {
			t.Fatalf("after %d creates, %d files of %d bytes on disk, over %d", n+1, len(ents), disk, idemMaxDiskBytes)
		}
	}
	restarted := newIdempotency(root)
	ran := false
	if _, _, replayed, err := restarted.do("POST /v1/sandboxes", "key-39", []byte("{}"), true, func() (int, []byte) { ran = true; return 201, nil }); err != nil || !replayed || ran {
		t.Errorf("the newest key after a restart: replayed %v, ran %v, %v", replayed, ran, err)
	}
}
