package artifacts

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// Real sample bytes of the data types users allow, built the way their
// writers build them.
func samples(t *testing.T) map[string][]byte {
	t.Helper()
	rnd := make([]byte, 8192)
	r := rand.NewChaCha8([32]byte{1})
	r.Read(rnd)

	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	w.Write(bytes.Repeat([]byte("compressible line\n"), 100))
	w.Close()

	var zb bytes.Buffer
	z := zip.NewWriter(&zb)
	f, _ := z.Create("archive/data.pkl")
	f.Write(rnd[:512])
	z.Close()

	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	tw.WriteHeader(&tar.Header{Name: "a.txt", Size: 3, Mode: 0o644, Typeflag: tar.TypeReg})
	tw.Write([]byte("hi\n"))
	tw.Close()

	// NumPy format 1.0: magic, version, header length, a dict padded with
	// spaces to a multiple of 64 and ended by '\n', then the data.
	hdr := []byte("{'descr': '<f8', 'fortran_order': False, 'shape': (4,), }")
	pad := 64 - (10+len(hdr)+1)%64
	hdr = append(append(hdr, bytes.Repeat([]byte(" "), pad)...), '\n')
	npy := append([]byte("\x93NUMPY\x01\x00"), binary.LittleEndian.AppendUint16(nil, uint16(len(hdr)))...)
	npy = append(append(npy, hdr...), rnd[:32]...)

	// Parquet: "PAR1", column chunks, a footer, its length, "PAR1".
	par := append([]byte("PAR1"), rnd[:200]...)
	par = binary.LittleEndian.AppendUint32(par, 100)
	par = append(par, "PAR1"...)

	// A pickle (protocol 4) of {'a': 1}.
	pkl := []byte("\x80\x04\x95\x0a\x00\x00\x00\x00\x00\x00\x00}\x94\x8c\x01a\x94K\x01s.")

	return map[string][]byte{
		"random": rnd, "gzip": gz.Bytes(), "zip": zb.Bytes(), "tar": tb.Bytes(),
		"npy": npy, "parquet": par, "pickle": pkl, "zeros": make([]byte, 4096),
		"html": []byte("<!DOCTYPE html><html><body><script>alert(1)</script></body></html>"),
		"svg":  []byte(`<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"><rect/></svg>`),
		"text": []byte("plain words\n"),
		"elf":  elfBytes(t),
	}
}

func TestTypeAndExtensionTable(t *testing.T) {
	s := samples(t)
	octet := []string{"application/octet-stream"}
	for _, tc := range []struct {
		sample, name string
		types        []string
		want         Reason // "" accepted
	}{
		{"random", "data.bin", octet, ""},
		{"random", "data.dat", octet, ""},
		{"random", "data", octet, ""},
		{"random", "weights.pt", octet, ""},
		{"random", "DATA.BIN", octet, ""},
		{"npy", "array.npy", octet, ""},
		{"pickle", "model.pkl", octet, ""},
		{"zeros", "blank.raw", octet, ""},
		{"random", "data.bin", nil, ReasonTypeNotAllowed},
		{"random", "data.txt", octet, ReasonTypeMismatch},
		{"random", "page.html", octet, ReasonTypeMismatch},
		{"random", "run.sh", octet, ReasonTypeMismatch},
		{"random", "image.png", octet, ReasonTypeMismatch},
		{"random", "x.xyz", octet, ReasonTypeMismatch},
		{"elf", "data.bin", octet, ReasonTypeNotAllowed},
		{"elf", "data", octet, ReasonTypeNotAllowed},

		{"gzip", "logs.gz", []string{"application/gzip"}, ""},
		{"gzip", "logs.tar.gz", []string{"application/gzip"}, ""},
		{"gzip", "bundle.tgz", []string{"application/x-gzip"}, ""},
		{"gzip", "logs.txt", []string{"application/gzip"}, ReasonTypeMismatch},
		{"gzip", "logs.gz", octet, ReasonTypeNotAllowed},

		{"zip", "out.zip", []string{"application/zip"}, ""},
		{"zip", "pkg-1.0-py3-none-any.whl", []string{"application/zip"}, ""},
		{"zip", "arrays.npz", []string{"application/zip"}, ""},
		{"zip", "model.pt", []string{"application/zip"}, ""},
		{"zip", "out.exe", []string{"application/zip"}, ReasonTypeMismatch},

		{"tar", "out.tar", []string{"application/x-tar"}, ""},
		{"tar", "out.txt", []string{"application/x-tar"}, ReasonTypeMismatch},

		{"parquet", "table.parquet", []string{"application/vnd.apache.parquet"}, ""},
		{"parquet", "table.parquet", octet, ReasonTypeNotAllowed},
		{"parquet", "table.bin", []string{"application/vnd.apache.parquet"}, ReasonTypeMismatch},

		// Nothing interpreted hides behind a text or data name.
		{"html", "x.txt", nil, ReasonTypeNotAllowed},
		{"html", "x.txt", []string{"text/html", "text/plain"}, ReasonTypeMismatch},
		{"html", "x.htm", []string{"text/html"}, ""},
		{"svg", "x.txt", []string{"image/svg+xml", "text/plain"}, ReasonTypeMismatch},
		{"svg", "x.bin", []string{"image/svg+xml", "application/octet-stream"}, ReasonTypeMismatch},
		{"text", "x.html", nil, ReasonTypeMismatch},
		{"text", "x.bin", []string{"text/plain", "application/octet-stream"}, ReasonTypeMismatch},
	} {
		src := t.TempDir()
		tree{t, src}.file(tc.name, s[tc.sample], 0o644)
		rep, err := Collect(context.Background(), src, Options{MaxFileBytes: 1 << 20, MaxTotalBytes: 1 << 20, MaxFiles: 1, Types: tc.types})
		if err != nil {
			t.Fatal(err)
		}
		var got Reason
		var detail string
		if len(rep.Rejected) > 0 {
			got, detail = rep.Rejected[0].Reason, rep.Rejected[0].Detail
		}
		if got != tc.want {
			mime := ""
			if len(rep.Artifacts) > 0 {
				mime = rep.Artifacts[0].MIME
			}
			t.Errorf("%s as %s, types %v: reason %q (%s%s), want %q", tc.sample, tc.name, tc.types, got, detail, mime, tc.want)
		}
	}
}
