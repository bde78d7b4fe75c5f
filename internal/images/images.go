// Package images builds the images hotcell needs without a registry: the
// hotcell/base development image (from debian:bookworm-slim when a registry
// answers, else from debootstrap) and the tiny busybox-based test images.
// Every image is a root filesystem streamed as a tar into the engine's image
// import, labelled LabelImage=true.
package images

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"

	"github.com/moby/moby/api/types/jsonstream"
	"github.com/moby/moby/client"
)

// Refs of the images this package builds.
const (
	BaseRef    = "hotcell/base:latest"
	BusyboxRef = "hotcell/test-busybox:latest"
	NoShellRef = "hotcell/test-noshell:latest"
)

// LabelImage marks images hotcell built.
const LabelImage = "hotcell.image"

// PathEnv is the PATH every image gets; an imported image has no config, and
// the agent and `docker run` need one to find programs by name.
const PathEnv = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// commonChanges are Dockerfile instructions applied to every imported image.
var commonChanges = []string{
	"ENV " + PathEnv,
	"WORKDIR /workspace",
	"LABEL " + LabelImage + "=true",
}

// importTar streams the tar that write produces into the engine as image
// ref, without holding it in memory or on disk.
func importTar(ctx context.Context, c *client.Client, ref string, changes []string, write func(io.Writer) error) error {
	old := imageID(ctx, c, ref)
	pr, pw := io.Pipe()
	go func() {
		// Closing with the error makes ImageImport's upload fail instead of
		// importing a truncated root filesystem.
		pw.CloseWithError(write(pw))
	}()
	resp, err := c.ImageImport(ctx, client.ImageImportSource{Source: pr, SourceName: "-"}, ref,
		client.ImageImportOptions{Changes: append(append([]string(nil), commonChanges...), changes...)})
	if err != nil {
		pr.CloseWithError(err)
		return fmt.Errorf("import image %s: %w", ref, err)
	}
	defer resp.Close()
	if err := readMessages(resp); err != nil {
		pr.CloseWithError(err)
		return fmt.Errorf("import image %s: %w", ref, err)
	}
	dropReplaced(ctx, c, ref, old)
	return nil
}

// imageID returns the id of the image ref names, or "" when it names
// none (or the engine does not answer).
func imageID(ctx context.Context, c *client.Client, ref string) string {
	img, err := c.ImageInspect(ctx, ref)
	if err != nil {
		return ""
	}
	return img.ID
}

// dropReplaced removes old, the image ref named before a build, once the
// build has moved ref to another: without it every rebuild of an image
// (the agent's, the hotcell image, at each test run or binary change)
// left the one it replaced behind, untagged. An image still in use (a
// container, a child image, another tag) is kept: the engine refuses,
// and that is not an error.
func dropReplaced(ctx context.Context, c *client.Client, ref, old string) {
	if old == "" || imageID(ctx, c, ref) == old {
		return
	}
	_, _ = c.ImageRemove(ctx, old, client.ImageRemoveOptions{})
}

// readMessages drains an engine JSON message stream and returns the first
// error it reports.
func readMessages(r io.Reader) error {
	dec := json.NewDecoder(r)
	for {
		var m jsonstream.Message
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if m.Error != nil {
			return errors.New(m.Error.Message)
		}
	}
}

// refPattern accepts Docker references: [registry[:port]/]name[:tag][@digest].
var refPattern = regexp.MustCompile(`^[a-z0-9]([a-z0-9._-]*[a-z0-9])?(:[0-9]+)?(/[a-z0-9]([a-z0-9._-]*[a-z0-9])?)*(:[A-Za-z0-9_][A-Za-z0-9._-]{0,127})?(@sha256:[a-f0-9]{64})?$`)

// ValidRef reports whether ref is an image reference a create accepts.
func ValidRef(ref string) bool { return len(ref) <= 255 && refPattern.MatchString(ref) }
