package artifacts

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxName is the longest path component accepted (NAME_MAX).
const maxName = 255

// checkName reports why one path component cannot be delivered under its
// own name, or "" when it can. Names are never rewritten silently: a name
// that is not plain printable UTF-8 is rejected.
func checkName(name string) string {
	switch {
	case name == "" || name == "." || name == "..":
		return "reserved name"
	case len(name) > maxName:
		return "name longer than 255 bytes"
	case strings.ContainsAny(name, "/\\"):
		return "name contains a path separator"
	case !utf8.ValidString(name):
		return "name is not valid UTF-8"
	}
	for _, r := range name {
		if unicode.IsControl(r) || r == utf8.RuneError || !unicode.IsPrint(r) && r != ' ' {
			return "name contains a control or unprintable character"
		}
	}
	if strings.HasPrefix(name, ".airlock-") {
		return "name is reserved for airlock's temporary files"
	}
	return ""
}

// Escape makes a name safe to show anywhere: bytes that are not printable
// UTF-8, and backslashes, become \xNN. Plain names are unchanged.
func Escape(name string) string {
	var b strings.Builder
	for i := 0; i < len(name); {
		r, size := utf8.DecodeRuneInString(name[i:])
		switch {
		case r == utf8.RuneError && size <= 1, r == '\\', unicode.IsControl(r), !unicode.IsPrint(r) && r != ' ':
			for j := 0; j < size; j++ {
				fmt.Fprintf(&b, `\x%02x`, name[i+j])
			}
		default:
			b.WriteString(name[i : i+size])
		}
		i += size
	}
	return b.String()
}
