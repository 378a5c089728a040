package images

import (
	"errors"
	"strings"
	"testing"
)

const hexID = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestParseRef(t *testing.T) {
	for _, tc := range []struct {
		in      string
		name    string
		wantErr error
	}{
		{in: "sha256:" + hexID},
		{in: "airlock/default@sha256:" + hexID, name: "airlock/default"},
		{in: "localhost:5000/team/py@sha256:" + hexID, name: "localhost:5000/team/py"},
		{in: "python", wantErr: ErrNotPinned},
		{in: "python:3.12", wantErr: ErrNotPinned},
		{in: "localhost:5000/py:3", wantErr: ErrNotPinned},
		{in: "python:3.12@sha256:" + hexID, wantErr: ErrBadRef},
		{in: "sha256:" + hexID[:63], wantErr: ErrBadRef},
		{in: "sha256:" + strings.ToUpper(hexID), wantErr: ErrBadRef},
		{in: "py@sha512:" + hexID + hexID, wantErr: ErrBadRef},
		{in: "py@md5:abc", wantErr: ErrBadRef},
		{in: "UPPER@sha256:" + hexID, wantErr: ErrBadRef},
		{in: "@sha256:" + hexID, wantErr: ErrBadRef},
		{in: "", wantErr: ErrBadRef},
		{in: "a b", wantErr: ErrBadRef},
	} {
		r, err := ParseRef(tc.in)
		if tc.wantErr != nil {
			if !errors.Is(err, tc.wantErr) {
				t.Errorf("ParseRef(%q) = %v, %v; want error %v", tc.in, r, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseRef(%q): %v", tc.in, err)
			continue
		}
		if r.Name != tc.name || r.ID.Encoded() != hexID || r.String() != tc.in {
			t.Errorf("ParseRef(%q) = %+v (%s)", tc.in, r, r)
		}
	}
}

func TestParseRefTagErrorTeaches(t *testing.T) {
	_, err := ParseRef("python:3.12")
	msg := err.Error()
	for _, want := range []string{"python@sha256:<64 hex digits>", "airlock image ls", "docker image inspect"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not mention %q", msg, want)
		}
	}
}

func FuzzParseRef(f *testing.F) {
	for _, s := range []string{"sha256:" + hexID, "a/b@sha256:" + hexID, "python:3", "x@y@sha256:" + hexID, "host:1/a@sha256:" + hexID} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRef(s)
		if err != nil {
			if !errors.Is(err, ErrBadRef) && !errors.Is(err, ErrNotPinned) {
				t.Fatalf("unclassified error: %v", err)
			}
			return
		}
		if r.ID.Validate() != nil || len(r.ID.Encoded()) != 64 {
			t.Fatalf("ParseRef(%q) accepted a bad digest %q", s, r.ID)
		}
		back, err := ParseRef(r.String())
		if err != nil || back != r {
			t.Fatalf("round trip %q -> %q: %v", s, r.String(), err)
		}
	})
}
