// Package termsafe neutralises terminal control sequences in untrusted
// output before it reaches a person's terminal.
package termsafe

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"unicode/utf8"
)

// Writer forwards bytes to a terminal, replacing with a visible escape:
//   - every C0 control byte except newline and tab, and DEL ("\x1b");
//     carriage return too, since it lets output overwrite what came before;
//   - the C1 controls U+0080–U+009F ("\u009b");
//   - the bidirectional formatting characters, which reorder what a
//     person sees (U+061C, U+200E, U+200F, U+202A–U+202E, U+2066–U+2069);
//   - every byte that is not part of valid UTF-8 ("\x9b"): a lone 0x9B is
//     CSI to a terminal that is not in UTF-8 mode, and overlong or
//     surrogate encodings are read differently by different decoders.
//
// So the output is valid UTF-8 free of all of those. A sequence split
// across Writes is held back until it is whole; Flush escapes what is held.
//
// Valid UTF-8 still holds bytes 0x80–0x9F inside multi-byte characters
// ("Û" is C3 9B), which a terminal not in UTF-8 mode reads as C1 controls.
// For such a terminal use NewASCII, which escapes every byte above 0x7F.
type Writer struct {
	mu      sync.Mutex
	w       io.Writer
	ascii   bool
	pending []byte // the start of a UTF-8 sequence the last Write ended in
}

// New returns a Writer over w for a terminal in UTF-8 mode.
func New(w io.Writer) *Writer { return &Writer{w: w} }

// NewASCII returns a Writer over w that also escapes every byte above 0x7F,
// for a terminal that is not in UTF-8 mode.
func NewASCII(w io.Writer) *Writer { return &Writer{w: w, ascii: true} }

// ForLocale returns New(w), or NewASCII(w) when the locale (LC_ALL, else
// LC_CTYPE, else LANG, as getenv gives them) names a character set other
// than UTF-8, the C and POSIX locales included. With none set the terminal
// is taken to be in UTF-8 mode, as terminals are by default.
func ForLocale(w io.Writer, getenv func(string) string) *Writer {
	for _, k := range []string{"LC_ALL", "LC_CTYPE", "LANG"} {
		if v := getenv(k); v != "" {
			if v = strings.ToLower(v); !strings.Contains(v, "utf-8") && !strings.Contains(v, "utf8") {
				return NewASCII(w)
			}
			break
		}
	}
	return New(w)
}

// Write reports len(p) on success, whatever the escaping added.
func (t *Writer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	in := p
	if len(t.pending) > 0 {
		in = append(t.pending, p...)
		t.pending = nil
	}
	out := make([]byte, 0, len(in)+16)
	for i := 0; i < len(in); {
		b := in[i]
		if t.ascii && b >= utf8.RuneSelf {
			out = fmt.Appendf(out, `\x%02x`, b)
			i++
			continue
		}
		if b < utf8.RuneSelf {
			out = appendASCII(out, b)
			i++
			continue
		}
		if !utf8.FullRune(in[i:]) {
			// The start of a valid sequence that the next Write may finish.
			t.pending = append(t.pending[:0], in[i:]...)
			break
		}
		r, n := utf8.DecodeRune(in[i:])
		if r == utf8.RuneError && n == 1 {
			out = fmt.Appendf(out, `\x%02x`, b)
		} else {
			out = appendRune(out, r, in[i:i+n])
		}
		i += n
	}
	if _, err := t.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush escapes and writes what the last Write held back: an unfinished
// UTF-8 sequence, which is invalid once nothing more comes.
func (t *Writer) Flush() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.pending) == 0 {
		return nil
	}
	var out []byte
	for _, b := range t.pending {
		out = fmt.Appendf(out, `\x%02x`, b)
	}
	t.pending = nil
	_, err := t.w.Write(out)
	return err
}

func appendASCII(out []byte, b byte) []byte {
	if b == '\n' || b == '\t' || b >= 0x20 && b != 0x7f {
		return append(out, b)
	}
	return fmt.Appendf(out, `\x%02x`, b)
}

// appendRune appends r, whose valid encoding is enc, or its escape.
func appendRune(out []byte, r rune, enc []byte) []byte {
	if Dangerous(r) {
		return fmt.Appendf(out, `\u%04x`, r)
	}
	return append(out, enc...)
}

// Dangerous reports whether r is a control a terminal may act on, or a
// bidirectional formatting character that reorders text, beyond ASCII: the
// C1 controls and the bidi embeddings, overrides, isolates and marks.
func Dangerous(r rune) bool {
	switch {
	case r >= 0x80 && r <= 0x9f:
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f:
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true
	}
	return false
}

// JSON escapes the C1 controls and the bidi formatting characters (see
// Dangerous) in encoding/json output as \u0080…\u009f, \u202e and so on.
// encoding/json already escapes C0 controls and replaces invalid UTF-8 but
// writes these raw, and a terminal may act on them (U+009B is CSI, U+202E
// reverses text) when a person looks at --json output. In valid JSON such
// runes can only sit inside strings, so the result is the same JSON value.
func JSON(b []byte) []byte {
	i := 0
	for i < len(b) {
		if b[i] < utf8.RuneSelf {
			i++
			continue
		}
		r, n := utf8.DecodeRune(b[i:])
		if Dangerous(r) {
			break
		}
		i += n
	}
	if i == len(b) {
		return b
	}
	out := append(make([]byte, 0, len(b)+16), b[:i]...)
	for i < len(b) {
		if b[i] < utf8.RuneSelf {
			out = append(out, b[i])
			i++
			continue
		}
		r, n := utf8.DecodeRune(b[i:])
		if Dangerous(r) {
			out = fmt.Appendf(out, `\u%04x`, r)
		} else {
			out = append(out, b[i:i+n]...)
		}
		i += n
	}
	return out
}
