package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/lifecycle"
)

// stalled gives nothing until release is closed, then EOF (as a reader)
// or takes everything (as a writer); started closes at the first call.
type stalled struct{ started, release chan struct{} }

func newStalled() stalled { return stalled{make(chan struct{}), make(chan struct{})} }

func (s stalled) wait() {
	select {
	case <-s.started:
	default:
		close(s.started)
	}
	<-s.release
}

func (s stalled) Read([]byte) (int, error)    { s.wait(); return 0, io.EOF }
func (s stalled) Write(b []byte) (int, error) { s.wait(); return len(b), nil }

// A transfer in progress is activity, as an exec in progress is: however
// long ago the sandbox's last activity was, it is not past its deadline
// while a transfer runs (the supervisor and every sweep destroy it
// there). Its end is activity too, and leaves no record of it behind.
func TestTransferInProgressIsActivity(t *testing.T) {
	spec := fakeSandboxSpec()
	spec.IdleTimeout = time.Minute
	_, sb, root := newFakeSandbox(t, &fakeSandboxer{}, spec)
	ctx := context.Background()
	defer sb.Close(ctx)
	if _, err := sb.Upload(ctx, WorkspaceDir+"/a.txt", strings.NewReader("hello\n"), 1<<20); err != nil {
		t.Fatal(err)
	}
	cases := map[string]func(stalled) error{
		"upload": func(s stalled) error {
			_, err := sb.Upload(ctx, WorkspaceDir+"/slow.bin", s, 1<<20)
			return err
		},
		"upload tree": func(s stalled) error {
			_, err := sb.UploadTree(ctx, WorkspaceDir+"/tree", s, nil)
			return err
		},
		"download": func(s stalled) error {
			_, err := sb.Download(ctx, WorkspaceDir+"/a.txt", s)
			return err
		},
	}
	for name, transfer := range cases {
		s := newStalled()
		done := make(chan error, 1)
		go func() { done <- transfer(s) }()
		<-s.started
		// The transfer has run for an hour, say.
		setInfo(t, root, sb.ID(), func(si *SandboxInfo) { si.LastActivity = time.Now().Add(-time.Hour) })
		si := infoOf(t, root, sb.ID())
		now := time.Now()
		dl := si.Deadline(now)
		close(s.release)
		if err := <-done; err != nil {
			t.Logf("%s: %v", name, err)
		}
		if !dl.After(now) {
			t.Errorf("%s in progress: the sandbox's deadline %v is past (now %v): it would be destroyed mid-transfer", name, dl, now)
		}
		si = infoOf(t, root, sb.ID())
		if len(si.Transfers) != 0 || time.Since(si.LastActivity) > time.Minute {
			t.Errorf("after the %s: transfers %v, last activity %v; want none, and now", name, si.Transfers, si.LastActivity)
		}
	}
}

// A sandbox with a transfer in progress is not paused, as one with an
// exec in progress is not.
func TestPauseRefusedDuringTransfer(t *testing.T) {
	root := t.TempDir()
	const id = "sb-00000000000000000004"
	liveSandbox(t, root, id, lifecycle.Created, lifecycle.Ready)
	setInfo(t, root, id, func(si *SandboxInfo) { si.Transfers = map[string]owner{"x": self()} })
	eng := &pausing{paused: map[string]bool{}}
	rn := newRunnerAt(t, root, eng)
	if _, err := rn.Pause(t.Context(), id); !errdefs.IsConflict(err) || eng.paused[id] {
		t.Errorf("pausing a sandbox with a transfer in progress: %v", err)
	}
	// One whose airlock process is gone holds nothing up.
	setInfo(t, root, id, func(si *SandboxInfo) { si.Transfers = map[string]owner{"x": deadOwner} })
	if _, err := rn.Pause(t.Context(), id); err != nil || !eng.paused[id] {
		t.Errorf("pausing once the transfer's process is gone: %v", err)
	}
}

// Execs and transfers whose airlock process was killed (never reaching
// their end's bookkeeping) are dropped by the next exec or transfer:
// otherwise they pile up until the record passes maxRecordBytes and
// every exec fails.
func TestDeadExecsAndTransfersPruned(t *testing.T) {
	_, sb, root := newFakeSandbox(t, &fakeSandboxer{}, fakeSandboxSpec())
	ctx := context.Background()
	defer sb.Close(ctx)
	// fill gives the record dead entries until one more would pass the cap.
	fill := func(field func(*SandboxInfo) *map[string]owner) {
		t.Helper()
		setInfo(t, root, sb.ID(), func(si *SandboxInfo) {
			m := map[string]owner{}
			*field(si) = m
			size := func() int { b, _ := json.Marshal(si); return len(b) }
			m[fmt.Sprintf("%020x", 0)] = deadOwner
			one := size()
			m[fmt.Sprintf("%020x", 1)] = deadOwner
			per := size() - one
			for i := 2; i <= (maxRecordBytes-one)/per; i++ {
				m[fmt.Sprintf("%020x", i)] = deadOwner
			}
		})
	}
	fill(func(si *SandboxInfo) *map[string]owner { return &si.Execs })
	if res, err := sb.Exec(ctx, ExecSpec{Argv: []string{"true"}}); err != nil || res.Reason != ReasonExited {
		t.Fatalf("an exec with the record full of dead execs: %v, %v", res.Reason, err)
	}
	fill(func(si *SandboxInfo) *map[string]owner { return &si.Transfers })
	if _, err := sb.Upload(ctx, WorkspaceDir+"/a.txt", bytes.NewReader([]byte("x")), 2); err != nil {
		t.Fatalf("an upload with the record full of dead transfers: %v", err)
	}
	si := infoOf(t, root, sb.ID())
	if len(si.Execs)+len(si.Transfers) != 0 {
		t.Errorf("left: %d execs, %d transfers; want none", len(si.Execs), len(si.Transfers))
	}
	if fi, err := os.Stat(infoPath(root, sb.ID())); err != nil || fi.Size() > 64<<10 {
		t.Errorf("the record: %v, %d bytes", err, fi.Size())
	}
}

// Nor is a snapshot taken of one with a transfer in progress.
func TestSnapshotRefusedDuringTransfer(t *testing.T) {
	root := t.TempDir()
	const id = "sb-00000000000000000005"
	liveSandbox(t, root, id, lifecycle.Created, lifecycle.Ready)
	setInfo(t, root, id, func(si *SandboxInfo) { si.Transfers = map[string]owner{"x": self()} })
	eng := &snapshotting{}
	rn := newRunnerAt(t, root, eng)
	if _, err := rn.Snapshot(t.Context(), id); !errdefs.IsConflict(err) || len(eng.taken) > 0 {
		t.Errorf("snapshotting a sandbox with a transfer in progress: %v (snapshots taken %v)", err, eng.taken)
	}
}
