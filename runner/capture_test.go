package runner

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
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
