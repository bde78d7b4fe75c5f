package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"net"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/hotcell/hotcell/internal/errdefs"
)

// reachHint is what a user who sees ErrUnavailable needs to do next.
const reachHint = "is the cluster's API server up? check the kubeconfig in the daemon's config (kubectl --kubeconfig FILE get nodes)"

func isNotFound(err error) bool { return apierrors.IsNotFound(err) }

// classify wraps an API error with the hotcell error class it belongs to,
// so that callers and the API decide by class, never by message. The API
// server's error stays in the chain for logs.
func classify(op string, err error) error {
	if err == nil {
		return nil
	}
	var class error
	var netErr net.Error
	switch {
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("%s: %w", op, err)
	case errors.Is(err, context.DeadlineExceeded), apierrors.IsTimeout(err), apierrors.IsServerTimeout(err):
		class = errdefs.ErrDeadlineExceeded
	case apierrors.IsNotFound(err):
		class = errdefs.ErrNotFound
	case apierrors.IsAlreadyExists(err):
		class = errdefs.ErrAlreadyExists
	case apierrors.IsConflict(err):
		class = errdefs.ErrConflict
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
		class = errdefs.ErrInvalidArgument
	case apierrors.IsForbidden(err), apierrors.IsUnauthorized(err):
		class = errdefs.ErrPermissionDenied
	case apierrors.IsServiceUnavailable(err), apierrors.IsTooManyRequests(err), apierrors.IsInternalError(err):
		class = errdefs.ErrUnavailable
	case errors.As(err, &netErr), errors.Is(err, net.ErrClosed):
		return fmt.Errorf("%s: %w (%s): %w", op, err, reachHint, errdefs.ErrUnavailable)
	default:
		var se apierrors.APIStatus
		if !errors.As(err, &se) {
			// Not an answer of the API server: the connection failed.
			return fmt.Errorf("%s: %w (%s): %w", op, err, reachHint, errdefs.ErrUnavailable)
		}
		return fmt.Errorf("%s: %w", op, err)
	}
	return fmt.Errorf("%s: %w: %w", op, err, class)
}

func isAlreadyExists(err error) bool { return apierrors.IsAlreadyExists(err) }
