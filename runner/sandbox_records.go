package runner

// The sandboxes' record store: one JSON record per sandbox under
// <root>/sandboxes, read and written whole (atomicfile), and the checks on
// what goes into one.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/internal/atomicfile"
	"github.com/airlock-sandbox/airlock/internal/flock"
	"github.com/airlock-sandbox/airlock/lifecycle"
)

// Deadline is when the sandbox ends unless something runs in it: the
// earlier of its TTL and its idle timeout, counting an exec or a transfer
// in progress (whose airlock process is alive) as activity now. A paused
// sandbox (si.State) has only its TTL: its idle timeout starts again at
// resume. One with no idle timeout recorded (a sandbox on a cluster, whose
// pod's deadline is its end) has only its ExpiresAt.
func (si *SandboxInfo) Deadline(now time.Time) time.Time {
	// An idle timeout past what a Duration holds (a record Create did not
	// write) never comes before the TTL.
	if si.State == lifecycle.Paused || si.IdleTimeoutMS <= 0 || si.IdleTimeoutMS > math.MaxInt64/int64(time.Millisecond) {
		return si.ExpiresAt
	}
	last := si.LastActivity
	if si.liveExecs() > 0 || si.liveTransfers() > 0 {
		last = now
	}
	idle := last.Add(time.Duration(si.IdleTimeoutMS) * time.Millisecond)
	if idle.Before(si.ExpiresAt) {
		return idle
	}
	return si.ExpiresAt
}

// self is this process, as an exec's or a transfer's owner.
func self() owner { return owner{PID: os.Getpid(), Start: procStart(os.Getpid())} }

// pruneDead drops the execs and transfers whose airlock process is gone
// (SIGKILLed, say): nothing else removes them, and a record is capped
// (maxRecordBytes).
func (si *SandboxInfo) pruneDead() {
	dead := func(_ string, o owner) bool { return !o.alive() }
	maps.DeleteFunc(si.Execs, dead)
	maps.DeleteFunc(si.Transfers, dead)
}

// liveExecs counts the execs whose airlock process is alive.
func (si *SandboxInfo) liveExecs() int { return countAlive(si.Execs) }

// liveTransfers counts the transfers whose airlock process is alive.
func (si *SandboxInfo) liveTransfers() int { return countAlive(si.Transfers) }

func countAlive(m map[string]owner) int {
	n := 0
	for _, o := range m {
		if o.alive() {
			n++
		}
	}
	return n
}

// CheckSandboxID refuses what is not an airlock sandbox id.
func CheckSandboxID(id string) error {
	if !sandboxIDPattern.MatchString(id) {
		return fmt.Errorf("%w: %q is not a sandbox id (sb- and 20 hex digits); `airlock sandbox ls` lists them", errdefs.ErrInvalidArgument, id)
	}
	return nil
}

func sandboxesDir(root string) string { return filepath.Join(root, "sandboxes") }

func infoPath(root, id string) string { return filepath.Join(sandboxesDir(root), id+".json") }

func goneError(id string) error {
	return fmt.Errorf("%w: sandbox %q is gone: destroyed, expired, or never made (`airlock sandbox ls` lists the live ones)", errdefs.ErrNotFound, id)
}

// ReadSandbox reads sandbox id's record; the state is the lifecycle's.
func ReadSandbox(root, id string) (SandboxInfo, error) {
	if err := CheckSandboxID(id); err != nil {
		return SandboxInfo{}, err
	}
	si, err := readInfo(root, id)
	if err != nil {
		return si, err
	}
	lc, err := lifecycle.Open(root)
	if err != nil {
		return si, fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
	}
	rec, err := lc.Get(id)
	if err != nil {
		si.State = lifecycle.Orphaned
		return si, nil
	}
	si.State, si.Error = rec.State, rec.Error
	if si.State == "" || si.State == lifecycle.Terminated || si.State == lifecycle.Terminating {
		return si, goneError(id)
	}
	return si, nil
}

func readInfo(root, id string) (SandboxInfo, error) {
	var si SandboxInfo
	b, err := os.ReadFile(infoPath(root, id))
	if errors.Is(err, fs.ErrNotExist) {
		return si, goneError(id)
	}
	if err != nil {
		return si, fmt.Errorf("%w: reading sandbox %q: %v", errdefs.ErrUnavailable, id, err)
	}
	if err := json.Unmarshal(b, &si); err != nil || si.ID != id {
		return si, fmt.Errorf("%w: the record of sandbox %q is corrupt; `airlock sandbox rm %s` or `airlock reap` removes it", errdefs.ErrDataLoss, id, id)
	}
	return si, nil
}

// recordCache is the last record read of one sandbox, for a reader that
// reads it again and again (the supervisor, every superviseTick): an
// unchanged file (the same inode, size and modification time; every write
// replaces the file) is not parsed again. Since a freed inode may be
// reused within the clock's granularity, a record is parsed again at least
// every recordCacheAge, and a reader about to act on a cached record
// (cached says so) reads it afresh first.
type recordCache struct {
	root, id string
	fi       os.FileInfo
	at       time.Time
	si       SandboxInfo
	parses   int // for tests
}

const recordCacheAge = time.Minute

// read is readInfo, parsing the record only when its file has changed;
// cached reports a record not parsed now.
func (c *recordCache) read() (si SandboxInfo, cached bool, err error) {
	fi, err := os.Stat(infoPath(c.root, c.id))
	if err == nil && c.fi != nil && sameFile(c.fi, fi) && time.Since(c.at) < recordCacheAge {
		return c.si, true, nil
	}
	c.fi = nil
	c.parses++
	si, err = readInfo(c.root, c.id)
	if err == nil && fi != nil {
		c.fi, c.at, c.si = fi, time.Now(), si
	}
	return si, false, err
}

// forget makes the next read parse the record.
func (c *recordCache) forget() { c.fi = nil }

// sameFile reports whether a and b, two stats of one path, saw the same
// unchanged file.
func sameFile(a, b os.FileInfo) bool {
	return os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}

// updateInfo changes sandbox id's record under the sandboxes lock; a
// record that is gone stays gone. The change is not synced: no sandbox
// outlives a power loss, and an exec's bookkeeping (twice per exec) is
// what live processes are doing.
func updateInfo(root, id string, fn func(*SandboxInfo) error) error {
	return flock.With(filepath.Join(sandboxesDir(root), ".lock"), func() error {
		si, err := readInfo(root, id)
		if err != nil {
			return err
		}
		if err := fn(&si); err != nil {
			return err
		}
		return saveInfo(root, &si, atomicfile.Replace)
	})
}

// writeInfo writes a sandbox's record, synced.
func writeInfo(root string, si *SandboxInfo) error {
	return saveInfo(root, si, atomicfile.WriteFile)
}

// maxRecordBytes caps a sandbox's record. Every face caps the lists that
// go into one (package wire), so a real record is a few KiB; the record is
// read at every exec, listing and supervisor tick, so one past the cap is
// a bug, refused before it is written.
const maxRecordBytes = 1 << 20

func saveInfo(root string, si *SandboxInfo, write func(string, []byte, os.FileMode) error) error {
	saved := *si
	saved.State, saved.Error = "", "" // the lifecycle's to say
	b, _ := json.Marshal(saved)
	if len(b) > maxRecordBytes {
		return fmt.Errorf("%w: the record of sandbox %q would be %d bytes, past the cap of %d", errdefs.ErrInternal, si.ID, len(b), maxRecordBytes)
	}
	if err := write(infoPath(root, si.ID), b, 0o600); err != nil {
		return fmt.Errorf("%w: writing the record of sandbox %q: %v", errdefs.ErrUnavailable, si.ID, err)
	}
	return nil
}

// removeSandboxFiles removes sandbox id's areas, then its record.
func removeSandboxFiles(ctx context.Context, root, id string) error {
	if err := RemoveAreas(ctx, SandboxDir(root, id)); err != nil {
		return err
	}
	return flock.With(filepath.Join(sandboxesDir(root), ".lock"), func() error {
		if err := os.Remove(infoPath(root, id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%w: removing the record of sandbox %q: %v", errdefs.ErrUnavailable, id, err)
		}
		return nil
	})
}

// CheckLabels refuses labels a sandbox may not have, as invalid input:
// more than 64, a key other than 1-63 letters, digits, '.', '_' or '-', a
// value other than one line of at most 256 bytes of text.
func CheckLabels(l map[string]string) error { return checkLabels(l) }

func checkLabels(l map[string]string) error {
	if len(l) > 64 {
		return fmt.Errorf("%w: %d labels; at most 64", errdefs.ErrInvalidArgument, len(l))
	}
	for k, v := range l {
		if !labelKey.MatchString(k) {
			return fmt.Errorf("%w: label key %q must be 1-63 letters, digits, '.', '_' or '-'", errdefs.ErrInvalidArgument, k)
		}
		if len(v) > 256 || !utf8.ValidString(v) || strings.ContainsFunc(v, unicode.IsControl) {
			return fmt.Errorf("%w: label %q: the value must be one line of at most 256 bytes of UTF-8 text, without control characters", errdefs.ErrInvalidArgument, k)
		}
	}
	return nil
}

// CountSandboxes counts what ListSandboxes lists and the sandboxes being
// destroyed, which their engines may still hold until their records go:
// what admission counts.
func CountSandboxes(root string) (int, error) {
	files, _ := filepath.Glob(filepath.Join(sandboxesDir(root), "sb-*.json"))
	n := len(listPooled(root))
	for _, f := range files {
		si, err := ReadSandbox(root, strings.TrimSuffix(filepath.Base(f), ".json"))
		if !errdefs.IsNotFound(err) || si.State == lifecycle.Terminating {
			n++
		}
	}
	return n, nil
}

// ListSandboxes lists every sandbox that has a record under root, oldest
// first, warm pools' sandboxes included (state pooled); a record whose
// sandbox is gone is left out.
func ListSandboxes(root string) ([]SandboxInfo, error) {
	files, _ := filepath.Glob(filepath.Join(sandboxesDir(root), "sb-*.json"))
	out := []SandboxInfo{}
	for _, f := range files {
		id := strings.TrimSuffix(filepath.Base(f), ".json")
		si, err := ReadSandbox(root, id)
		if errdefs.IsNotFound(err) {
			continue
		}
		if err != nil {
			si = SandboxInfo{ID: id, State: lifecycle.Orphaned, Error: err.Error(), Labels: map[string]string{}}
		}
		out = append(out, si)
	}
	out = append(out, listPooled(root)...)
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.Before(out[j].CreatedAt)
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}
