// Package imagetest builds small, real OCI images for tests and benchmarks,
// from the host's busybox-static (installed by setup).
package imagetest

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// BusyboxLayout writes an OCI image layout holding busybox-static and
// a link per applet, with a gzip layer. extra files are added to the layer.
func BusyboxLayout(dir string, extra ...string) error {
	var files []File
	for i, content := range extra {
		files = append(files, File{Name: fmt.Sprintf("etc/extra%d", i), Mode: 0o644, Data: []byte(content)})
	}
	return BusyboxLayoutFiles(dir, files...)
}

// File is a regular file to add to a test image.
type File struct {
	Name string
	Mode int64
	Data []byte
}

// BusyboxLayoutFiles is BusyboxLayout with files of any content and mode.
func BusyboxLayoutFiles(dir string, extra ...File) error {
	bin, err := os.ReadFile("/bin/busybox")
	if err != nil {
		return err
	}
	list, err := exec.Command("/bin/busybox", "--list").Output()
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range []string{"bin/", "tmp/", "etc/", "proc/", "dev/", "sys/"} {
		mode := int64(0o755)
		if d == "tmp/" {
			mode = 0o1777
		}
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: mode})
	}
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "bin/busybox", Mode: 0o755, Size: int64(len(bin))})
	tw.Write(bin)
	for _, applet := range strings.Fields(string(list)) {
		if applet == "busybox" {
			continue
		}
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/" + applet, Linkname: "busybox"})
	}
	passwd := "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "etc/passwd", Mode: 0o644, Size: int64(len(passwd))})
	tw.Write([]byte(passwd))
	for _, f := range extra {
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.Name, Mode: f.Mode, Size: int64(len(f.Data))})
		tw.Write(f.Data)
	}
	if err := tw.Close(); err != nil {
		return err
	}
	layerBytes := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerBytes)), nil
	})
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config.Env = []string{"PATH=/bin"}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	return p.AppendImage(img)
}
