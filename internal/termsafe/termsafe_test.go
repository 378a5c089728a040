package termsafe

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode/utf8"
)

func TestWriter(t *testing.T) {
	for _, tc := range []struct {
		name   string
		chunks []string
		want   string
	}{
		{"plain", []string{"hello\tworld\n"}, "hello\tworld\n"},
		{"escape", []string{"\x1b]0;pwned\x07red\x1b[31m"}, `\x1b]0;pwned\x07red\x1b[31m`},
		{"carriage return", []string{"ok\rFAKE"}, `ok\x0dFAKE`},
		{"del and nul", []string{"a\x7fb\x00"}, `a\x7fb\x00`},
		{"c1 csi", []string{"a\xc2\x9b31m"}, `a\u009b31m`},
		{"c1 split", []string{"a\xc2", "\x9b31m"}, `a\u009b31m`},
		{"latin1 kept", []string{"caf\xc3\xa9 \xc2\xa0nbsp"}, "caf\xc3\xa9 \xc2\xa0nbsp"},
		{"c2 split kept", []string{"\xc2", "\xa0"}, "\xc2\xa0"},
		{"raw 8-bit csi", []string{"a\x9b31mred"}, `a\x9b31mred`},
		{"raw 8-bit csi after a lead byte", []string{"\xc3\x9b"}, "\xc3\x9b"}, // U+00DB is a letter
		{"lone continuation bytes", []string{"\x80\xbf"}, `\x80\xbf`},
		{"rlo", []string{"file\u202egpj.exe"}, `file\u202egpj.exe`},
		{"every bidi control", []string{"\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c"},
			`\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c`},
		{"bidi split three ways", []string{"x\xe2", "\x80", "\xaey"}, `x\u202ey`},
		{"neighbours of bidi kept", []string{"\u2029\u202f\u2065\u206a\u200d"}, "\u2029\u202f\u2065\u206a\u200d"},
		{"overlong slash", []string{"\xc0\xaf"}, `\xc0\xaf`},
		{"overlong three bytes", []string{"\xe0\x80\xaf"}, `\xe0\x80\xaf`},
		{"overlong esc", []string{"\xc0\x9b"}, `\xc0\x9b`},
		{"overlong split", []string{"\xe0", "\x80\xaf"}, `\xe0\x80\xaf`},
		{"surrogate", []string{"\xed\xa0\x80"}, `\xed\xa0\x80`},
		{"beyond U+10FFFF", []string{"\xf4\x90\x80\x80"}, `\xf4\x90\x80\x80`},
		{"f5 and ff", []string{"\xf5\xff"}, `\xf5\xff`},
		{"truncated then ascii", []string{"\xe2\x80", "A"}, `\xe2\x80A`},
		{"four bytes split", []string{"\xf0\x9f", "\x98", "\x80!"}, "\U0001f600!"},
		{"unfinished at flush", []string{"ok\xe2\x80"}, `ok\xe2\x80`},
		{"c2 at flush", []string{"ok\xc2"}, `ok\xc2`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			w := New(&buf)
			for _, c := range tc.chunks {
				if n, err := w.Write([]byte(c)); err != nil || n != len(c) {
					t.Fatalf("Write = %d, %v", n, err)
				}
			}
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			if buf.String() != tc.want {
				t.Errorf("got %q, want %q", buf.String(), tc.want)
			}
			checkSafe(t, buf.Bytes())
		})
	}
}

// checkSafe fails unless out is valid UTF-8 without ESC or any other C0
// control but newline and tab, DEL, C1 controls, a raw 0x9B, or bidi
// formatting characters.
func checkSafe(t *testing.T, out []byte) {
	t.Helper()
	if !utf8.Valid(out) {
		t.Fatalf("invalid UTF-8 in %q", out)
	}
	// Valid UTF-8 holds 0x9B only inside a multi-byte character.
	for i, r := range string(out) {
		if r < 0x20 && r != '\n' && r != '\t' || r == 0x7f {
			t.Fatalf("control %#x at %d in %q", r, i, out)
		}
		if Dangerous(r) {
			t.Fatalf("U+%04X at %d in %q", r, i, out)
		}
	}
}

func TestASCII(t *testing.T) {
	var buf bytes.Buffer
	w := NewASCII(&buf)
	w.Write([]byte("caf\xc3\xa9 \xc3\x9b[2J \x9b \xe2\x80"))
	w.Write([]byte("\xae\x1b\n"))
	w.Flush()
	if want := `caf\xc3\xa9 \xc3\x9b[2J \x9b \xe2\x80\xae\x1b` + "\n"; buf.String() != want {
		t.Errorf("got %q, want %q", buf.String(), want)
	}
}

func TestForLocale(t *testing.T) {
	for _, tc := range []struct {
		env   map[string]string
		ascii bool
	}{
		{nil, false},
		{map[string]string{"LANG": "en_US.UTF-8"}, false},
		{map[string]string{"LANG": "C.utf8"}, false},
		{map[string]string{"LANG": "en_US.UTF-8", "LC_ALL": "C"}, true},
		{map[string]string{"LANG": "C", "LC_CTYPE": "de_DE.UTF-8"}, false},
		{map[string]string{"LANG": "de_DE.ISO-8859-1"}, true},
		{map[string]string{"LC_ALL": "POSIX"}, true},
	} {
		if w := ForLocale(nil, func(k string) string { return tc.env[k] }); w.ascii != tc.ascii {
			t.Errorf("%v: ascii %v, want %v", tc.env, w.ascii, tc.ascii)
		}
	}
}

func TestDangerous(t *testing.T) {
	for _, r := range []rune{0x80, 0x9b, 0x9f, 0x61c, 0x200e, 0x200f, 0x202a, 0x202e, 0x2066, 0x2069} {
		if !Dangerous(r) {
			t.Errorf("U+%04X is not dangerous", r)
		}
	}
	for _, r := range []rune{'a', 0x7f, 0xa0, 0xe9, 0x200d, 0x2029, 0x202f, 0x2065, 0x206a, 0x1f600} {
		if Dangerous(r) {
			t.Errorf("U+%04X is dangerous", r)
		}
	}
}

// FuzzWriter: whatever the input and however it is split across three
// Writes, the output is safe (checkSafe), and input that is already safe
// passes through unchanged.
func FuzzWriter(f *testing.F) {
	f.Add([]byte("\x1b[2J\xc2\x9b\r\n"), 3, 5)
	f.Add([]byte("a\x9b31m\u202eb\xc0\xaf\xe0\x80\xaf\xed\xa0\x80"), 2, 9)
	f.Add([]byte("\xf0\x9f\x98\x80 caf\xc3\xa9"), 1, 3)
	f.Fuzz(func(t *testing.T, p []byte, a, b int) {
		cut := func(n int) int {
			if n < 0 || n > len(p) {
				return len(p) / 2
			}
			return n
		}
		a, b = cut(a), cut(b)
		if a > b {
			a, b = b, a
		}
		var buf bytes.Buffer
		w := New(&buf)
		for _, chunk := range [][]byte{p[:a], p[a:b], p[b:]} {
			if n, err := w.Write(chunk); err != nil || n != len(chunk) {
				t.Fatalf("Write = %d, %v", n, err)
			}
		}
		w.Flush()
		checkSafe(t, buf.Bytes())
		var whole bytes.Buffer
		ww := New(&whole)
		ww.Write(p)
		ww.Flush()
		if !bytes.Equal(whole.Bytes(), buf.Bytes()) {
			t.Fatalf("split at %d, %d: %q; whole: %q", a, b, buf.Bytes(), whole.Bytes())
		}
		if safe(p) && !bytes.Equal(buf.Bytes(), p) {
			t.Fatalf("safe input %q changed to %q", p, buf.Bytes())
		}
		var ascii bytes.Buffer
		aw := NewASCII(&ascii)
		aw.Write(p[:a])
		aw.Write(p[a:])
		aw.Flush()
		for i, c := range ascii.Bytes() {
			if c >= 0x80 || c < 0x20 && c != '\n' && c != '\t' || c == 0x7f {
				t.Fatalf("ASCII writer: byte %#x at %d in %q", c, i, ascii.Bytes())
			}
		}
	})
}

func safe(p []byte) bool {
	if !utf8.Valid(p) {
		return false
	}
	for _, r := range string(p) {
		if r < 0x20 && r != '\n' && r != '\t' || r == 0x7f || Dangerous(r) {
			return false
		}
	}
	return true
}

func TestJSONEscapesC1AndBidi(t *testing.T) {
	v := map[string]string{"text": "a\u009b31mred\u0085é\u00a0z\u202eexe.txt\u2066"}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	got := JSON(b)
	for _, r := range string(got) {
		if Dangerous(r) {
			t.Fatalf("raw U+%04X left in %q", r, got)
		}
	}
	var back map[string]string
	if err := json.Unmarshal(got, &back); err != nil || back["text"] != v["text"] {
		t.Errorf("%q decodes to %q (%v), want %q", got, back["text"], err, v["text"])
	}
	if plain := []byte(`{"a":"é\u2029"}`); !bytes.Equal(JSON(plain), plain) {
		t.Error("changed JSON with nothing to escape in it")
	}
}
