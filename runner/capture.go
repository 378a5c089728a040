package runner

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"hash"
	"io"
	"sync"
	"unicode/utf8"
)

// maxTail bounds the tail kept after a stream passes its cap.
const maxTail = 64 << 10

// capture keeps a bounded picture of one output stream: the first keep
// bytes (the head), and once the stream has passed them, the last bytes
// after the head (the tail). The first limit bytes go to live, and the
// byte past limit calls over. Memory stays at keep+maxTail whatever the
// program writes. Write never fails, so the engine keeps draining (and
// counting) until the sandbox is gone.
type capture struct {
	mu      sync.Mutex
	sum     hash.Hash // of every byte, kept or not
	limit   int64
	keep    int64 // <= limit
	head    []byte
	tail    []byte // ring buffer, len == cap once full
	tailPos int
	total   int64
	live    io.Writer
	over    func()
	fired   bool
}

// newCapture keeps the head up to the limit.
func newCapture(limit int64, live io.Writer, over func()) *capture {
	return newCaptureKeep(limit, 0, live, over)
}

// newCaptureKeep keeps at most keep bytes of the head; 0, or more than
// limit, keeps limit's.
func newCaptureKeep(limit, keep int64, live io.Writer, over func()) *capture {
	if keep <= 0 || keep > limit {
		keep = limit
	}
	return &capture{sum: sha256.New(), limit: limit, keep: keep, head: make([]byte, 0, min(keep, 64<<10)), tail: make([]byte, 0, min(limit, maxTail)), live: live, over: over}
}

func (c *capture) Write(p []byte) (int, error) {
	c.mu.Lock()
	n := len(p)
	at := c.total
	c.total += int64(n)
	c.sum.Write(p)
	if room := c.limit - at; room > 0 && c.live != nil {
		// A slow or broken terminal must not stall the sandbox's pipe.
		c.live.Write(p[:min(int64(len(p)), room)])
	}
	if room := c.keep - int64(len(c.head)); room > 0 {
		take := p[:min(int64(len(p)), room)]
		c.grow(len(take))
		c.head = append(c.head, take...)
		p = p[len(take):]
	}
	if len(p) > 0 {
		c.addTail(p)
	}
	if c.total > c.limit && !c.fired {
		c.fired = true
		c.mu.Unlock()
		if c.over != nil {
			c.over()
		}
		return n, nil
	}
	c.mu.Unlock()
	return n, nil
}

// grow makes room for k more head bytes, never past keep.
func (c *capture) grow(k int) {
	need := len(c.head) + k
	if need <= cap(c.head) {
		return
	}
	h := make([]byte, len(c.head), min(c.keep, max(int64(need), 2*int64(cap(c.head)))))
	copy(h, c.head)
	c.head = h
}

func (c *capture) addTail(p []byte) {
	tc := cap(c.tail)
	if tc == 0 {
		return
	}
	if len(p) >= tc {
		c.tail = append(c.tail[:0], p[len(p)-tc:]...)
		c.tailPos = 0
		return
	}
	for len(p) > 0 {
		if len(c.tail) < tc {
			k := min(tc-len(c.tail), len(p))
			c.tail = append(c.tail, p[:k]...)
			p = p[k:]
			continue
		}
		k := copy(c.tail[c.tailPos:], p)
		c.tailPos = (c.tailPos + k) % tc
		p = p[k:]
	}
}

// Stream is one output stream as the Result reports it.
type Stream struct {
	// Head is the first bytes, up to the cap.
	Head []byte
	// Tail is the last bytes after the head, kept only when Truncated.
	Tail []byte
	// Bytes is how many bytes the program wrote in total.
	Bytes int64
	// Truncated is set when Bytes passed the cap, or the head kept
	// (ExecSpec.ResultBytes), or when the Result was cut to fit a size
	// (Sandbox.FitResult).
	Truncated bool
	// SHA256 is the hex sha256 of all Bytes, including those not kept.
	SHA256 string
}

func (c *capture) stream() Stream {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := Stream{Head: append([]byte{}, c.head...), Bytes: c.total, Truncated: c.total > c.keep, SHA256: hex.EncodeToString(c.sum.Sum(nil))}
	if s.Truncated {
		s.Tail = append(append([]byte{}, c.tail[c.tailPos:]...), c.tail[:c.tailPos]...)
	}
	return s
}

// MarshalJSON writes {"text"|"base64", "bytes", "truncated"} and, when
// truncated, "tail"|"tail_base64" and "omitted_bytes". Captured bytes that
// are not UTF-8 go out as base64, exactly.
func (s Stream) MarshalJSON() ([]byte, error) {
	out := map[string]any{"bytes": s.Bytes, "truncated": s.Truncated, "sha256": s.SHA256}
	put(out, "text", "base64", s.Head, s.Truncated, false)
	if s.Truncated {
		put(out, "tail", "tail_base64", s.Tail, false, true)
		out["omitted_bytes"] = s.Bytes - int64(len(s.Head)) - int64(len(s.Tail))
	}
	return json.Marshal(out)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (s *Stream) UnmarshalJSON(b []byte) error {
	var in struct {
		Text       *string `json:"text"`
		Base64     []byte  `json:"base64"`
		Tail       *string `json:"tail"`
		TailBase64 []byte  `json:"tail_base64"`
		Bytes      int64   `json:"bytes"`
		Truncated  bool    `json:"truncated"`
		SHA256     string  `json:"sha256"`
	}
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	*s = Stream{Head: in.Base64, Tail: in.TailBase64, Bytes: in.Bytes, Truncated: in.Truncated, SHA256: in.SHA256}
	// base64, when present, holds the exact bytes.
	if in.Base64 == nil && in.Text != nil {
		s.Head = []byte(*in.Text)
	}
	if in.TailBase64 == nil && in.Tail != nil {
		s.Tail = []byte(*in.Tail)
	}
	return nil
}

// put stores b as text when it is UTF-8. A cut at the head's end or the
// tail's start may split one character; that split alone does not force
// base64, but then the text field carries only whole characters and the
// base64 field the exact bytes.
func put(out map[string]any, textKey, b64Key string, b []byte, cutEnd, cutStart bool) {
	if utf8.Valid(b) {
		out[textKey] = string(b)
		return
	}
	out[b64Key] = base64.StdEncoding.EncodeToString(b)
	trimmed := b
	if cutEnd {
		trimmed = trimPartialEnd(trimmed)
	}
	if cutStart {
		trimmed = trimPartialStart(trimmed)
	}
	if len(trimmed) != len(b) && utf8.Valid(trimmed) {
		out[textKey] = string(trimmed)
	}
}

func trimPartialEnd(b []byte) []byte {
	for i := 1; i <= 3 && i <= len(b); i++ {
		if utf8.RuneStart(b[len(b)-i]) {
			if !utf8.FullRune(b[len(b)-i:]) {
				return b[:len(b)-i]
			}
			break
		}
	}
	return b
}

func trimPartialStart(b []byte) []byte {
	i := 0
	for i < 3 && i < len(b) && !utf8.RuneStart(b[i]) {
		i++
	}
	return b[i:]
}
