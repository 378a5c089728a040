package docker

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
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

// ImageInUse reports whether a container that exists uses image id.
func (e *Engine) ImageInUse(ctx context.Context, id digest.Digest) (bool, error) {
	list, err := e.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("ancestor", id.String()))})
	if err != nil {
		return false, unavailable(e.cli.DaemonHost(), err)
	}
	return len(list) > 0, nil
}

// RemoveImage removes image id (and its tags) from dockerd. removed is
// false when dockerd did not hold it. dockerd refuses while a container
// uses the image; that is an errdefs conflict.
func (e *Engine) RemoveImage(ctx context.Context, id digest.Digest) (removed bool, err error) {
	if has, err := e.HasImage(ctx, id.String()); err != nil || !has {
		return false, err
	}
	if _, err := e.cli.ImageRemove(ctx, id.String(), image.RemoveOptions{Force: true, PruneChildren: true}); err != nil {
		if errdefs.IsConflict(err) {
			return false, fmt.Errorf("%w: dockerd keeps image %s: %v", errdefs.ErrConflict, id, err)
		}
		return false, classify("removing image from dockerd", e.cli.DaemonHost(), err)
	}
	return true, nil
}
