package termsafe

import (
	"bytes"
	"testing"
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
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			w := New(&buf)
			for _, c := range tc.chunks {
				if n, err := w.Write([]byte(c)); err != nil || n != len(c) {
					t.Fatalf("Write = %d, %v", n, err)
				}
			}
			w.Flush()
			if buf.String() != tc.want {
				t.Errorf("got %q, want %q", buf.String(), tc.want)
			}
		})
	}
}

func FuzzWriter(f *testing.F) {
	f.Add([]byte("\x1b[2J\xc2\x9b\r\n"), 3)
	f.Fuzz(func(t *testing.T, p []byte, split int) {
		var buf bytes.Buffer
		w := New(&buf)
		if split < 0 || split > len(p) {
			split = len(p) / 2
		}
		w.Write(p[:split])
		w.Write(p[split:])
		w.Flush()
		for i, b := range buf.Bytes() {
			if b < 0x20 && b != '\n' && b != '\t' || b == 0x7f {
				t.Fatalf("control byte %#x at %d in %q", b, i, buf.Bytes())
			}
			if b == 0xc2 && i+1 < buf.Len() && buf.Bytes()[i+1] >= 0x80 && buf.Bytes()[i+1] <= 0x9f {
				t.Fatalf("C1 control at %d in %q", i, buf.Bytes())
			}
		}
	})
}
