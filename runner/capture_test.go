package runner

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/receipt"
)

func TestCaptureUnderCap(t *testing.T) {
	var live bytes.Buffer
	fired := 0
	c := newCapture(16, &live, func() { fired++ })
	c.Write([]byte("hello "))
	c.Write([]byte("world"))
	s := c.stream()
	if string(s.Head) != "hello world" || s.Bytes != 11 || s.Truncated || s.Tail != nil || fired != 0 {
		t.Fatalf("stream %+v fired %d", s, fired)
	}
	if live.String() != "hello world" {
		t.Errorf("live got %q", live.String())
	}
}

func TestCaptureHeadAndTail(t *testing.T) {
	var live bytes.Buffer
	fired := 0
	c := newCapture(10, &live, func() { fired++ })
	// 10 head bytes, then a long middle, then a recognisable end.
	c.Write([]byte("0123456789abc"))
	for i := 0; i < 1000; i++ {
		c.Write([]byte("xxxxxxx"))
	}
	c.Write([]byte("THE-END"))
	s := c.stream()
	if string(s.Head) != "0123456789" {
		t.Errorf("head %q", s.Head)
	}
	if string(s.Tail) != "xxxTHE-END" {
		t.Errorf("tail %q", s.Tail)
	}
	if s.Bytes != 13+7000+7 || !s.Truncated || fired != 1 {
		t.Errorf("bytes %d truncated %v fired %d", s.Bytes, s.Truncated, fired)
	}
	if live.String() != "0123456789" {
		t.Errorf("live got %q, want the head only", live.String())
	}
}

func TestCaptureTailWraps(t *testing.T) {
	c := newCapture(4, nil, nil)
	c.Write([]byte("head"))
	for _, chunk := range []string{"ab", "cde", "f", "ghij"} {
		c.Write([]byte(chunk))
	}
	if got := string(c.stream().Tail); got != "ghij" {
		t.Errorf("tail %q", got)
	}
	c.Write([]byte("k"))
	if got := string(c.stream().Tail); got != "hijk" {
		t.Errorf("tail after wrap %q", got)
	}
}

func TestCaptureMemoryBounded(t *testing.T) {
	c := newCapture(1<<10, nil, nil)
	chunk := bytes.Repeat([]byte("y\n"), 16<<10)
	for i := 0; i < 1000; i++ {
		c.Write(chunk)
	}
	if cap(c.head) > 1<<10 || cap(c.tail) > 1<<10 {
		t.Errorf("buffers grew: head %d tail %d", cap(c.head), cap(c.tail))
	}
	if c.stream().Bytes != int64(len(chunk))*1000 {
		t.Errorf("count %d", c.stream().Bytes)
	}
}

// A capture that keeps less head than its limit passes every byte up to
// the limit live, holds keep+maxTail at most, counts and hashes the
// whole, and still fires at the limit.
func TestCaptureKeep(t *testing.T) {
	const limit, keep = 8 << 20, 1 << 20
	var live bytes.Buffer
	fired := 0
	c := newCaptureKeep(limit, keep, &live, func() { fired++ })
	var all bytes.Buffer
	for i := 0; all.Len() < 3<<20; i++ {
		chunk := bytes.Repeat([]byte{byte('a' + i%26)}, 4096+i%7)
		all.Write(chunk)
		c.Write(chunk)
	}
	s := c.stream()
	sum := sha256.Sum256(all.Bytes())
	if cap(c.head) > keep || cap(c.tail) > maxTail {
		t.Errorf("buffers: head %d, tail %d", cap(c.head), cap(c.tail))
	}
	if !bytes.Equal(s.Head, all.Bytes()[:keep]) || !bytes.Equal(s.Tail, all.Bytes()[all.Len()-maxTail:]) {
		t.Errorf("head %d bytes, tail %d: not the first %d and last %d", len(s.Head), len(s.Tail), keep, maxTail)
	}
	if s.Bytes != int64(all.Len()) || !s.Truncated || s.SHA256 != hex.EncodeToString(sum[:]) || fired != 0 {
		t.Errorf("bytes %d truncated %v sha256 %s fired %d", s.Bytes, s.Truncated, s.SHA256, fired)
	}
	if !bytes.Equal(live.Bytes(), all.Bytes()) {
		t.Errorf("live got %d bytes, want all %d", live.Len(), all.Len())
	}
	// The limit fires on the byte past it, as without keep, and live
	// gets no more.
	c.Write(make([]byte, limit-all.Len()))
	if fired != 0 || live.Len() != limit {
		t.Fatalf("at the limit: fired %d, live %d", fired, live.Len())
	}
	c.Write([]byte("xy"))
	if s := c.stream(); fired != 1 || live.Len() != limit || s.Bytes != limit+2 || string(s.Tail[len(s.Tail)-2:]) != "xy" || cap(c.head) > keep {
		t.Errorf("past the limit: fired %d, live %d, bytes %d", fired, live.Len(), s.Bytes)
	}
}

// A Result whose heads were kept short verifies, and its verdict, on the
// whole stdout, still holds.
func TestCaptureKeepReceipt(t *testing.T) {
	r := &Runner{root: t.TempDir(), version: "v1"}
	pol := isolation.Default().WithDefaults()
	pol.Limits.Output = 8 << 20
	pol.Seccomp = &isolation.SeccompProfile{SHA256: strings.Repeat("a", 64)}
	job := &engine.SandboxSpec{ID: "sb1", Image: digest.Digest("sha256:" + strings.Repeat("b", 64)), Init: &engine.Process{Argv: []string{"sh"}}, Policy: pol}
	stdout := strings.Repeat("ab é€ 42\n", 300<<10)
	out, errw := newCaptureKeep(8<<20, 1<<20, nil, nil), newCaptureKeep(8<<20, 1<<20, nil, nil)
	out.Write([]byte(stdout))
	errw.Write([]byte("err\xff\n"))
	start := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	res := Result{ID: "ex1", SandboxID: "sb1", Image: job.Image.String(), Engine: "oci", Isolation: string(pol.Isolation), Seccomp: pol.Seccomp.SHA256,
		Reason: ReasonExited, Stdout: out.stream(), Stderr: errw.stream(), Limits: limitsOf(pol.Limits),
		StartedAt: start, FinishedAt: start.Add(time.Second), DurationMS: 1000}
	if !res.Stdout.Truncated || len(res.Stdout.Head) != 1<<20 || res.Stderr.Truncated {
		t.Fatalf("stdout truncated %v with %d head bytes; stderr truncated %v", res.Stdout.Truncated, len(res.Stdout.Head), res.Stderr.Truncated)
	}
	rec, err := resultReceipt(res, policyRecord(job, Spec{Output: Output{Disabled: true}}, engine.Runtime{Name: "runsc", Version: "v1"}), []string{"sh"}, "v1")
	if err != nil {
		t.Fatal(err)
	}
	rec.JobID, rec.Pass = "job-1", receipt.Verdict(rec, &stdout)
	if err := r.seal(rec, &res); err != nil {
		t.Fatal(err)
	}
	if err := receipt.Verify(*res.Receipt, r.key.Public().(ed25519.PublicKey)); err != nil {
		t.Errorf("receipt: %v", err)
	}
	line, _ := json.Marshal(BatchResult{JobID: "job-1", Pass: res.Receipt.Receipt.Pass, Result: res})
	if err := receipt.CheckResult(line); err != nil {
		t.Errorf("CheckResult = %v", err)
	}
	if p := res.Receipt.Receipt.Pass; p == nil || !*p {
		t.Errorf("verdict on the whole stdout: %v, want pass", p)
	}
}

func TestStreamJSON(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    Stream
		want []string
	}{
		{"text", Stream{Head: []byte(`{"reason":"exited"}`), Bytes: 19}, []string{`"text":"{\"reason\":\"exited\"}"`, `"truncated":false`}},
		{"binary", Stream{Head: []byte{0xff, 0x00, 0x01}, Bytes: 3}, []string{`"base64":"/wAB"`}},
		{"split rune", Stream{Head: []byte("h\xc3"), Tail: []byte("\xa9!"), Bytes: 9, Truncated: true},
			[]string{`"text":"h"`, `"base64":"aMM="`, `"tail":"!"`, `"tail_base64":"qSE="`, `"omitted_bytes":5`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(tc.s)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(b), w) {
					t.Errorf("%s lacks %s", b, w)
				}
			}
			var back Stream
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(back.Head, tc.s.Head) || !bytes.Equal(back.Tail, tc.s.Tail) || back.Bytes != tc.s.Bytes {
				t.Errorf("round trip %+v != %+v", back, tc.s)
			}
		})
	}
}
