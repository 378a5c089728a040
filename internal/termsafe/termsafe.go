// Package termsafe neutralises terminal control sequences in untrusted
// output before it reaches a person's terminal.
package termsafe

import (
	"fmt"
	"io"
	"sync"
)

// Writer forwards bytes to a terminal, replacing every C0 control byte
// except newline and tab, DEL, and the C1 controls (U+0080–U+009F, as UTF-8)
// with a visible escape such as "\x1b". Carriage return is escaped too, since
// it lets output overwrite what came before it.
type Writer struct {
	mu      sync.Mutex
	w       io.Writer
	pending bool // the previous Write ended with 0xC2, a possible C1 lead byte
}

// New returns a Writer over w.
func New(w io.Writer) *Writer { return &Writer{w: w} }

// Write reports len(p) on success, whatever the escaping added.
func (t *Writer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]byte, 0, len(p)+16)
	i := 0
	if t.pending {
		t.pending = false
		if len(p) > 0 && p[0] >= 0x80 && p[0] <= 0x9f {
			out = fmt.Appendf(out, `\u%04x`, p[0])
			i = 1
		} else {
			out = append(out, 0xc2)
		}
	}
	for ; i < len(p); i++ {
		b := p[i]
		switch {
		case b == '\n' || b == '\t':
			out = append(out, b)
		case b < 0x20 || b == 0x7f:
			out = fmt.Appendf(out, `\x%02x`, b)
		case b == 0xc2:
			if i+1 == len(p) {
				t.pending = true
				continue
			}
			if n := p[i+1]; n >= 0x80 && n <= 0x9f {
				out = fmt.Appendf(out, `\u%04x`, n)
				i++
				continue
			}
			out = append(out, b)
		default:
			out = append(out, b)
		}
	}
	if _, err := t.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush writes a byte held back at the end of the last Write.
func (t *Writer) Flush() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pending {
		t.pending = false
		_, err := t.w.Write([]byte{0xc2})
		return err
	}
	return nil
}

// JSON escapes the C1 controls (U+0080–U+009F, as UTF-8) in encoding/json
// output as \u0080…\u009f. encoding/json already escapes C0 controls but
// writes C1 raw, and a terminal in UTF-8 mode may act on them (U+009B is
// CSI) when a person looks at --json output. In valid JSON such bytes can
// only sit inside strings, so the result is the same JSON value.
func JSON(b []byte) []byte {
	n := 0
	for i := 0; i+1 < len(b); i++ {
		if b[i] == 0xC2 && b[i+1] >= 0x80 && b[i+1] <= 0x9F {
			n++
		}
	}
	if n == 0 {
		return b
	}
	out := make([]byte, 0, len(b)+4*n)
	for i := 0; i < len(b); i++ {
		if b[i] == 0xC2 && i+1 < len(b) && b[i+1] >= 0x80 && b[i+1] <= 0x9F {
			out = fmt.Appendf(out, `\u%04x`, b[i+1])
			i++
			continue
		}
		out = append(out, b[i])
	}
	return out
}
