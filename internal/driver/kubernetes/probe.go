package kubernetes

import (
	"context"
	"fmt"
	"time"

	"github.com/hotcell/hotcell/internal/errdefs"
)

// Probe asks the API server whether it is ready (/readyz). Every failure
// is ErrUnavailable: the reconciler waits for the cluster to come back.
func (d *Driver) Probe(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	if _, err := d.c.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); err != nil {
		return fmt.Errorf("probe kubernetes api server: %w (%s): %w", err, reachHint, errdefs.ErrUnavailable)
	}
	return nil
}
