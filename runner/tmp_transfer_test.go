package runner

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/engine"
)

// /tmp takes uploads within its caps, bytes (--tmp-size) and inodes, and
// gives back what the program left there; nested directories are the
// sandbox user's, and nothing crosses into another area.
func TestTmpTransfers(t *testing.T) {
	a := newAreas(t, AreasSpec{TmpSize: 8 << 20, TmpFiles: 64})
	body := []byte("a,b\n1,2\n")
	tr, err := upload(t, a, "/tmp/job/in/data.csv", body)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(body)
	if tr.Decision != DecisionAccepted || tr.SHA256 != hex.EncodeToString(sum[:]) || tr.Size != int64(len(body)) {
		t.Errorf("record %+v", tr)
	}
	for p, mode := range map[string]uint32{"job": 0o755, "job/in": 0o755, "job/in/data.csv": 0o644} {
		var st unix.Stat_t
		unix.Lstat(filepath.Join(a.Tmp, p), &st)
		if st.Uid != testUID || st.Gid != testGID || st.Mode&0o7777 != mode {
			t.Errorf("/tmp/%s: %d:%d %#o, want %d:%d %#o", p, st.Uid, st.Gid, st.Mode&0o7777, testUID, testGID, mode)
		}
	}
	got, tr, err := download(t, a, "/tmp/job/in/data.csv")
	if err != nil || !bytes.Equal(got, body) || tr.SHA256 != hex.EncodeToString(sum[:]) || tr.MIME != "text/csv" {
		t.Errorf("download: %q %+v %v", got, tr, err)
	}
	if _, err := os.Lstat(filepath.Join(a.Workspace, "job")); err == nil {
		t.Error("a /tmp upload landed in the workspace")
	}

	// Past --tmp-size: the tmpfs's ENOSPC, and nothing left behind.
	tr, err = a.Upload(context.Background(), "/tmp/big", io.LimitReader(zeroReader{}, 16<<20), 64<<20)
	wantReason(t, "upload past --tmp-size", tr, err, ReasonNoSpace)
	if _, err := os.Lstat(filepath.Join(a.Tmp, "big")); err == nil {
		t.Error("a refused upload left its file")
	}
	noTemps(t, a)
	if _, err := a.Upload(context.Background(), "/tmp/ok", io.LimitReader(zeroReader{}, 4<<20), 64<<20); err != nil {
		t.Errorf("after a refused upload: %v", err)
	}

	// Past the inode cap: no_space too.
	var last error
	for i := 0; i < 200 && last == nil; i++ {
		_, last = upload(t, a, "/tmp/f"+strconv.Itoa(i), []byte("x"))
	}
	if ReasonOf(last) != ReasonNoSpace {
		t.Errorf("uploads past /tmp's 64 inodes: last error %v, want no_space", last)
	}
	noTemps(t, a)
}

// A sandbox recorded without a /tmp area (one whose /tmp is the engine's
// own) refuses transfers to and from /tmp, as outside its areas.
func TestTmpTransfersWithoutArea(t *testing.T) {
	a := *newAreas(t, AreasSpec{})
	os.WriteFile(filepath.Join(a.Tmp, "x.txt"), []byte("x"), 0o644)
	a.Tmp = ""
	tr, err := upload(t, &a, "/tmp/y.txt", []byte("y"))
	wantReason(t, "upload to /tmp without an area", tr, err, ReasonInvalidPath)
	if !strings.Contains(tr.Detail, "(/home/user)") {
		t.Errorf("the refusal names areas the sandbox lacks: %q", tr.Detail)
	}
	_, tr, err = download(t, &a, "/tmp/x.txt")
	wantReason(t, "download from /tmp without an area", tr, err, ReasonInvalidPath)
	if !strings.Contains(tr.Detail, "(/home/user and /out)") {
		t.Errorf("the refusal names areas the sandbox lacks: %q", tr.Detail)
	}
	_, tr, _ = download(t, newAreas(t, AreasSpec{}), "/etc/passwd")
	if !strings.Contains(tr.Detail, "(/home/user, /tmp and /out)") {
		t.Errorf("the refusal does not name every area: %q", tr.Detail)
	}
}

// Create gives the engine its /tmp area as the TmpSource, never as a
// Mount, keeps it in the sandbox's record, and transfers reach it.
func TestCreateDeclaresTmpArea(t *testing.T) {
	f := &fakeSandboxer{}
	r, _ := newSandboxRunner(t, f)
	ctx := context.Background()
	sb, err := r.Create(ctx, fakeSandboxSpec())
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(ctx)
	if len(f.specs) != 1 {
		t.Fatalf("%d sandboxes created", len(f.specs))
	}
	spec, si := f.specs[0], sb.Info()
	if spec.TmpSource == "" || spec.TmpSource != si.Areas.Tmp {
		t.Fatalf("TmpSource %q, the record's /tmp area %q; want the same, set", spec.TmpSource, si.Areas.Tmp)
	}
	if err := engine.CheckTmpSource(spec.TmpSource); err != nil {
		t.Errorf("the engines would refuse the /tmp area: %v", err)
	}
	for _, m := range spec.Mounts {
		if m.Target == TmpDir || m.Source == spec.TmpSource {
			t.Errorf("the /tmp area is also a mount: %+v", m)
		}
	}
	again, err := r.Open(ctx, sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := again.Upload(ctx, "/tmp/a/b.txt", strings.NewReader("b\n"), 1<<20); err != nil {
		t.Fatalf("upload to /tmp: %v", err)
	}
	var buf bytes.Buffer
	if _, err := again.Download(ctx, "/tmp/a/b.txt", &buf); err != nil || buf.String() != "b\n" {
		t.Fatalf("download from /tmp: %q, %v", buf.String(), err)
	}
}
