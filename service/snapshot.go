package service

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/internal/forkserver"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/runner"
	"github.com/airlock-sandbox/airlock/templates"
)

// snapshotEngine is the one engine with snapshots.
const snapshotEngine = templates.EngineOCI

// PutWarmTemplate stores t with a snapshot of w's warm program: a
// sandbox of t is made on the oci engine, w's program started in it and
// waited for (runner.Warm), the sandbox snapshotted and destroyed, one
// sandbox restored from the snapshot and destroyed (checkRestore), and t
// stored naming the snapshot (replacing a template of its name when
// replace is set, whose own snapshot then goes). On error nothing is
// left: no sandbox, no snapshot, no template.
func (s *Service) PutWarmTemplate(ctx context.Context, t *templates.Template, w runner.WarmSpec, replace bool) (err error) {
	if t.Engine != templates.EngineAuto && t.Engine != snapshotEngine {
		return fmt.Errorf("%w: a template with --warm runs on engine oci (snapshots are the oci engine's, under gVisor), not %s", errdefs.ErrNotImplemented, t.Engine)
	}
	if t.Isolation != isolation.GVisor {
		return fmt.Errorf("%w: template %q runs under runc (--isolation %s), which cannot checkpoint a sandbox's processes and memory; only gVisor templates take --warm (use --isolation gvisor)", errdefs.ErrNotImplemented, t.Name, t.Isolation)
	}
	t.Engine = snapshotEngine
	old, _ := s.templates.Get(t.Name)
	if old != nil && !replace {
		return fmt.Errorf("%w: template %q exists; give --replace to replace it", errdefs.ErrAlreadyExists, t.Name)
	}
	rn, done, err := s.ForNew(ctx, snapshotEngine)
	if err != nil {
		return err
	}
	defer done()
	spec, err := t.NarrowSandbox(runner.SandboxSpec{})
	if err != nil {
		return err
	}
	spec.Labels = map[string]string{"template": t.Name, "warming": "true"}
	snap, err := rn.Warm(ctx, spec, w)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			if rerr := rn.RemoveSnapshot(context.WithoutCancel(ctx), snap); rerr != nil {
				err = fmt.Errorf("%w (and removing its snapshot: %v; `airlock reap` removes it)", err, rerr)
			}
		}
	}()
	t.Warm, t.Snapshot = append([]string(nil), w.Argv...), snap
	if err := t.Validate(); err != nil {
		return err
	}
	begin := time.Now()
	runCode := forkserver.Is(w.Argv)
	if err := checkRestore(ctx, rn, spec, snap, runCode); err != nil {
		return fmt.Errorf("template %q was not stored: %w", t.Name, err)
	}
	if w.Progress != nil {
		checked := "a sandbox restores from the snapshot"
		if runCode {
			checked = "the fork server answers in a restored sandbox"
		}
		fmt.Fprintf(w.Progress, "%s (%v)\n", checked, time.Since(begin).Round(time.Millisecond))
	}
	put := s.templates.Put
	if replace {
		put = s.templates.Replace
	}
	if err := put(t); err != nil {
		return err
	}
	if old != nil && old.Snapshot != "" && old.Snapshot != snap {
		if err := rn.RemoveSnapshot(ctx, old.Snapshot); err != nil {
			s.log.Warn("removing a replaced template's snapshot", "template", t.Name, "snapshot", old.Snapshot, "err", err)
		}
	}
	return nil
}

// checkRestore restores a sandbox of spec from snapshot snap, as the
// template's sandboxes are made, and destroys it: a snapshot that does
// not restore (its warm program kept a file of the warming sandbox's
// /tmp or workspace open, which a new sandbox's fresh areas lack) fails
// the template's creation, rather than every sandbox of it. With
// forkServer the restored fork server is primed too, as a pool does
// before it pools one.
func checkRestore(ctx context.Context, rn *runner.Runner, spec runner.SandboxSpec, snap string, forkServer bool) (err error) {
	spec.Snapshot = snap
	spec.Labels = map[string]string{"template": spec.Labels["template"], "checking": "true"}
	sb, err := rn.Create(ctx, spec)
	if err != nil {
		return fmt.Errorf("restoring a sandbox from its snapshot to check it: %w", err)
	}
	defer func() {
		if derr := rn.Destroy(context.WithoutCancel(ctx), sb.ID()); derr != nil && err == nil {
			err = fmt.Errorf("destroying the sandbox that checked its snapshot: %w", derr)
		}
	}()
	if !forkServer {
		return nil
	}
	res, err := sb.Exec(ctx, runner.ExecSpec{Argv: forkserver.PrimeArgv(), Timeout: time.Minute})
	if err != nil {
		return fmt.Errorf("checking the fork server of its snapshot: %w", err)
	}
	return forkServerCheckFailed(res)
}

// forkServerCheckFailed is the error of a fork server check whose result
// is res, or nil if it passed.
func forkServerCheckFailed(res runner.Result) error {
	if res.Reason != runner.ReasonExited || res.ExitCode != 0 {
		return fmt.Errorf("%w: a sandbox restored from its snapshot has no working fork server (%s, exit %d: %s); create the template again", errdefs.ErrUnavailable, res.Reason, res.ExitCode, quoteHead(res.Stderr))
	}
	return nil
}

// maxQuoted bounds the output an error quotes: it is one line on the
// operator's terminal.
const maxQuoted = 400

// quoteHead quotes the start of s for an error, at most maxQuoted bytes
// cut at a character's start, saying how much it wrote in all when more.
func quoteHead(s runner.Stream) string {
	head := bytes.TrimSpace(s.Head)
	if len(head) <= maxQuoted && !s.Truncated {
		return strconv.Quote(string(head))
	}
	n := min(len(head), maxQuoted)
	for i := 1; i < utf8.UTFMax && n < len(head) && !utf8.RuneStart(head[n]); i++ {
		n--
	}
	return fmt.Sprintf("%q… (%d bytes in all)", head[:n], s.Bytes)
}

// RemoveTemplate removes template name and its snapshot, if it has one.
// Sandboxes restored from the snapshot run on.
func (s *Service) RemoveTemplate(ctx context.Context, name string) error {
	t, _ := s.templates.Get(name)
	if err := s.templates.Remove(name); err != nil {
		return err
	}
	if t == nil || t.Snapshot == "" {
		return nil
	}
	rn, done, err := s.ForNew(ctx, snapshotEngine)
	if err != nil {
		return fmt.Errorf("template %q removed, but not its snapshot (`airlock reap` removes it): %w", name, err)
	}
	defer done()
	return rn.RemoveSnapshot(ctx, t.Snapshot)
}

// snapshotGrace spares a snapshot no template names yet: a template
// create --warm stores its template only once its snapshot is taken.
const snapshotGrace = 10 * time.Minute

// reapSnapshots removes the snapshots that no template names, taken more
// than snapshotGrace ago, from every engine that has snapshots; it
// returns their names.
func (s *Service) reapSnapshots(ctx context.Context, reapers []engine.Reaper) ([]string, error) {
	list, listErr := s.templates.List()
	if listErr != nil {
		// A template that cannot be read may name a snapshot: keep all.
		return nil, fmt.Errorf("reading the templates, so no snapshot was reaped: %w", listErr)
	}
	named := map[string]bool{}
	for _, t := range list {
		named[t.Snapshot] = true
	}
	var gone []string
	var errs []error
	for _, r := range reapers {
		sn, ok := r.(engine.Snapshotter)
		if !ok {
			continue
		}
		snaps, err := sn.Snapshots(ctx)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for name, taken := range snaps {
			if named[name] || time.Since(taken) < snapshotGrace {
				continue
			}
			if err := sn.RemoveSnapshot(ctx, name); err != nil {
				errs = append(errs, err)
				continue
			}
			gone = append(gone, "snapshot "+name)
		}
	}
	return gone, errors.Join(errs...)
}
