package wire

import "encoding/json"

// The list and map fields of request bodies cap their entries while they
// are decoded: DecodeList counts a field's entries on its raw JSON before
// decoding any, so a list past its cap costs nothing, where decoded first
// it would cost about 18 times its bytes (a 16MiB body of empty strings,
// 300MiB). Each such field has a type of its own, whose UnmarshalJSON
// knows the field's name and cap.

// Caps on the lists of request bodies beside the policy's (MaxEnv and
// the others above).
const (
	// MaxArgv caps argv: a program takes at most 2MiB of arguments (with
	// a pointer each), and no real command has this many.
	MaxArgv = 65536
	// MaxLabels caps a sandbox's labels, as its record does.
	MaxLabels = 64
	// MaxCodeFiles caps /run_code's files.
	MaxCodeFiles = 4096
)

// DecodeList decodes b, the raw JSON of field, into v (a *[]string or a
// *map[string]string). A list or object of more than max entries is
// refused, naming the field and the cap ("give at most max what"),
// before any entry is decoded.
func DecodeList(b []byte, v any, field string, max int, what string) error {
	if n := entries(b); n > max {
		return tooMany(field, n, max, what)
	}
	return json.Unmarshal(b, v)
}

// entries counts the entries of b, a valid JSON value: those of an array
// or an object, zero for anything else.
func entries(b []byte) int {
	depth, commas, seen := 0, 0, false
	outsideStrings(b, func(c byte) {
		switch c {
		case ' ', '\t', '\n', '\r', ':':
			return
		case ',':
			if depth == 1 {
				commas++
			}
			return
		case ']', '}':
			depth--
			return
		}
		if depth == 1 {
			seen = true
		}
		if c == '[' || c == '{' {
			depth++
		}
	})
	if !seen {
		return 0
	}
	return commas + 1
}

// Values is at least the number of values inside b's arrays and objects,
// at any depth (one more for each array or object than its entries), for
// a cap on a whole message whose fields are decoded by others.
func Values(b []byte) int {
	n := 0
	outsideStrings(b, func(c byte) {
		if c == ',' || c == '[' || c == '{' {
			n++
		}
	})
	return n
}

// outsideStrings calls f with each byte of JSON b that is not inside a
// string, each string's opening quote included.
func outsideStrings(b []byte, f func(c byte)) {
	inString, escaped := false, false
	for _, c := range b {
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		if c == '"' {
			inString = true
		}
		f(c)
	}
}

// Env is env: NAME=VALUE entries, MaxEnv at most.
type Env []string

func (l *Env) UnmarshalJSON(b []byte) error {
	return DecodeList(b, (*[]string)(l), "env", MaxEnv, "NAME=VALUE entries")
}

// ArtifactTypes is artifact_types: MIME types, MaxMIMETypes at most.
type ArtifactTypes []string

func (l *ArtifactTypes) UnmarshalJSON(b []byte) error {
	return DecodeList(b, (*[]string)(l), "artifact_types", MaxMIMETypes, "MIME types")
}

// AllowHosts is allow_host: HOST[:PORT] entries, MaxAllowHosts at most.
type AllowHosts []string

func (l *AllowHosts) UnmarshalJSON(b []byte) error {
	return DecodeList(b, (*[]string)(l), "allow_host", MaxAllowHosts, allowHostWant)
}

// Credentials is credential: routes, MaxCredentials at most.
type Credentials []string

func (l *Credentials) UnmarshalJSON(b []byte) error {
	return DecodeList(b, (*[]string)(l), "credential", MaxCredentials, "credential routes")
}
