package docker

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/errdefs"
)

var _ driver.Prober = (*Driver)(nil)

// Probe pings the engine over a connection of its own, never a pooled one:
// an engine on its way down no longer accepts connections, but keeps
// answering on those it accepted (see driver.Prober).
func (d *Driver) Probe(ctx context.Context) error {
	conn, err := d.c.Dialer()(ctx)
	if err != nil {
		return probeErr(err)
	}
	defer conn.Close()
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(5 * time.Second)
	}
	// A socket-activated engine (systemd holds the listener) accepts while
	// no dockerd serves it; the deadline turns that into an error.
	_ = conn.SetDeadline(deadline)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://docker/_ping", nil)
	if err != nil {
		return fmt.Errorf("ping docker engine: %w", err)
	}
	req.Close = true
	if err := req.Write(conn); err != nil {
		return probeErr(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		return probeErr(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("ping docker engine: status %s: %w", resp.Status, errdefs.ErrUnavailable)
	}
	return nil
}

// probeErr classes every failure to reach the engine as unavailable: the
// reconciler waits for it to come back.
func probeErr(err error) error {
	return fmt.Errorf("ping docker engine: %w: %w", err, errdefs.ErrUnavailable)
}
