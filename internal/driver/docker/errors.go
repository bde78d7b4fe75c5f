package docker

import (
	"context"
	"errors"
	"fmt"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/hotcell/hotcell/internal/errdefs"
)

// startDockerHint is what a user who sees ErrUnavailable needs to do next.
const startDockerHint = "is the Docker Engine running? start it with `sudo systemctl start docker` (or `sudo dockerd &`), or point DOCKER_HOST at it"

// classify wraps an engine error with the hotcell error class it belongs to,
// so that callers and the API decide by class, never by engine message.
// The engine's error stays in the chain for logs.
func classify(op string, err error) error {
	if err == nil {
		return nil
	}
	var class error
	switch {
	case client.IsErrConnectionFailed(err):
		return fmt.Errorf("%s: %w (%s): %w", op, err, startDockerHint, errdefs.ErrUnavailable)
	case errors.Is(err, context.DeadlineExceeded), cerrdefs.IsDeadlineExceeded(err):
		class = errdefs.ErrDeadlineExceeded
	case errors.Is(err, context.Canceled):
		// A canceled caller is not an engine fault; keep context.Canceled
		// visible without inventing a class.
		return fmt.Errorf("%s: %w", op, err)
	case cerrdefs.IsNotFound(err):
		class = errdefs.ErrNotFound
	case cerrdefs.IsConflict(err), cerrdefs.IsFailedPrecondition(err):
		class = errdefs.ErrConflict
	case cerrdefs.IsAlreadyExists(err):
		class = errdefs.ErrAlreadyExists
	case cerrdefs.IsInvalidArgument(err):
		class = errdefs.ErrInvalidArgument
	case cerrdefs.IsPermissionDenied(err), cerrdefs.IsUnauthorized(err):
		class = errdefs.ErrPermissionDenied
	case cerrdefs.IsUnavailable(err):
		class = errdefs.ErrUnavailable
	case cerrdefs.IsNotImplemented(err):
		class = errdefs.ErrNotImplemented
	default:
		return fmt.Errorf("%s: %w", op, err)
	}
	return fmt.Errorf("%s: %w: %w", op, err, class)
}
