package templates

// The JSON form of a template, as stored and as printed.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/units"
	"github.com/airlock-sandbox/airlock/wire"
)

// wireTemplate is the JSON form: the API's field names and the CLI's units.
type wireTemplate struct {
	Name            string   `json:"name"`
	Version         string   `json:"version,omitempty"`
	Image           string   `json:"image"`
	Engine          string   `json:"engine"`
	Isolation       string   `json:"isolation"`
	Timeout         string   `json:"timeout"`
	Memory          string   `json:"memory"`
	CPUs            string   `json:"cpus"`
	Pids            int64    `json:"pids"`
	OutputLimit     string   `json:"output_limit"`
	TmpSize         string   `json:"tmp_size"`
	FileSize        string   `json:"file_size"`
	OpenFiles       int64    `json:"open_files"`
	Env             []string `json:"env"`
	Workdir         string   `json:"workdir"`
	OutDir          string   `json:"out_dir"`
	OutLimit        string   `json:"out_limit,omitempty"`
	OutFiles        int      `json:"out_files,omitempty"`
	ArtifactMaxSize string   `json:"artifact_max_size,omitempty"`
	ArtifactTypes   []string `json:"artifact_types,omitempty"`
	SeccompSHA256   string   `json:"seccomp_profile_sha256"`
	// AllowHost and Credential are left out when empty, so that a
	// template without egress keeps the version it always had.
	AllowHost   []string `json:"allow_host,omitempty"`
	Credential  []string `json:"credential,omitempty"`
	EgressLimit string   `json:"egress_limit,omitempty"`
	// Warm and Snapshot, too, are left out when empty.
	Warm      []string  `json:"warm,omitempty"`
	Snapshot  string    `json:"snapshot,omitempty"`
	CreatedAt time.Time `json:"created_at"`
}

func (t *Template) wire() wireTemplate {
	l := t.Limits
	w := wireTemplate{
		Name: t.Name, Image: t.Image, Engine: t.Engine, Isolation: string(t.Isolation),
		Timeout: l.Timeout.String(), Memory: l.Memory.String(), CPUs: l.CPUs.String(), Pids: l.Pids,
		OutputLimit: l.Output.String(), TmpSize: l.Tmp.String(), FileSize: l.FileSize.String(), OpenFiles: l.OpenFiles,
		Env: t.Env, Workdir: t.Workdir, SeccompSHA256: t.SeccompSHA256, CreatedAt: t.CreatedAt,
		Warm: t.Warm, Snapshot: t.Snapshot,
	}
	if w.Env == nil {
		w.Env = []string{}
	}
	if e := t.Egress; e.On() {
		w.AllowHost = e.Allow.Entries()
		for _, c := range e.Credentials {
			w.Credential = append(w.Credential, c.String())
		}
		if e.Bytes != 0 {
			w.EgressLimit = e.Bytes.String()
		}
	}
	if o := t.Output; o.Disabled {
		w.OutDir = "none"
	} else {
		w.OutDir, w.OutLimit, w.OutFiles, w.ArtifactMaxSize, w.ArtifactTypes = o.Dir, o.Size.String(), o.Files, o.MaxFileSize.String(), o.Types
	}
	return w
}

// MarshalJSON writes the template in the API's field names and the CLI's
// units ("512MiB", "30s"), with its Version.
func (t *Template) MarshalJSON() ([]byte, error) {
	w := t.wire()
	w.Version = t.Version()
	return json.Marshal(w)
}

// UnmarshalJSON reads what MarshalJSON writes, strictly: an unknown field,
// a key not as written (wire.CheckKeys), a malformed value or a version
// that does not match is an error.
func (t *Template) UnmarshalJSON(b []byte) error {
	var w wireTemplate
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return err
	}
	if err := wire.CheckKeys(b, &w); err != nil {
		return err
	}
	var n Template
	n.Name, n.Image, n.Engine, n.Isolation = w.Name, w.Image, w.Engine, isolation.Mode(w.Isolation)
	n.Env, n.Workdir, n.SeccompSHA256, n.CreatedAt = w.Env, w.Workdir, w.SeccompSHA256, w.CreatedAt
	n.Warm, n.Snapshot = w.Warm, w.Snapshot
	l := &n.Limits
	l.Pids, l.OpenFiles = w.Pids, w.OpenFiles
	// A template file's values go through the one wire parser.
	var err error
	if l.Timeout, err = wire.Duration("timeout", w.Timeout); err != nil {
		return err
	}
	if l.CPUs, err = wire.CPUs("cpus", w.CPUs); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		s    string
		dst  *units.Bytes
	}{{"memory", w.Memory, &l.Memory}, {"output_limit", w.OutputLimit, &l.Output}, {"tmp_size", w.TmpSize, &l.Tmp}, {"file_size", w.FileSize, &l.FileSize}} {
		if *f.dst, err = wire.Size(f.name, f.s); err != nil {
			return err
		}
	}
	if n.Egress, err = wire.ParseEgress(w.AllowHost, w.Credential); err != nil {
		return err
	}
	if w.EgressLimit != "" {
		if n.Egress.Bytes, err = wire.Size("egress_limit", w.EgressLimit); err != nil {
			return err
		}
	}
	if w.OutDir == "none" {
		n.Output.Disabled = true
		if w.OutLimit != "" || w.OutFiles != 0 || w.ArtifactMaxSize != "" || w.ArtifactTypes != nil {
			return errors.New("out_dir is none, yet the output directory's settings are given")
		}
	} else {
		o := &n.Output
		o.Dir, o.Files, o.Types = w.OutDir, w.OutFiles, w.ArtifactTypes
		if o.Size, err = wire.Size("out_limit", w.OutLimit); err != nil {
			return err
		}
		if o.MaxFileSize, err = wire.Size("artifact_max_size", w.ArtifactMaxSize); err != nil {
			return err
		}
	}
	if w.Version != "" && w.Version != n.Version() {
		return fmt.Errorf("version %s does not match the template's content (%s)", w.Version, n.Version())
	}
	n.dir, n.profile = t.dir, nil
	*t = n
	return nil
}
