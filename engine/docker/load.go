package docker

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/containerd/errdefs"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/opencontainers/go-digest"
)

// Load streams img into dockerd as a `docker save` archive tagged tag, and
// checks that dockerd now holds it under exactly id. The tag is only for
// people reading `docker image ls`; airlock never resolves it.
func (e *Engine) Load(ctx context.Context, img v1.Image, id digest.Digest, tag name.Tag) error {
	pr, pw := io.Pipe()
	go func() {
		pw.CloseWithError(tarball.Write(tag, img, pw))
	}()
	resp, err := e.cli.ImageLoad(ctx, pr)
	if err != nil {
		pr.CloseWithError(err)
		return classify("loading image into dockerd", e.cli.DaemonHost(), err)
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for {
		var msg struct {
			Stream      string `json:"stream"`
			Error       string `json:"error"`
			ErrorDetail *struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		if err := dec.Decode(&msg); err == io.EOF {
			break
		} else if err != nil {
			return fmt.Errorf("loading image into dockerd: reading the daemon's answer: %w", err)
		}
		if msg.Error != "" {
			return fmt.Errorf("loading image into dockerd: %w: %s", errdefs.ErrInternal, msg.Error)
		}
		e.log.Debug("load", "msg", msg.Stream)
	}
	pr.Close()
	if err := e.checkImage(ctx, id.String()); err != nil {
		return fmt.Errorf("after loading: %w", err)
	}
	return nil
}
