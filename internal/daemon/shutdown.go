package daemon

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/hotcell/hotcell/internal/inflight"
)

// cleanupWait is how long operations cancelled at the end of the grace
// period get to clean up after themselves (a create removes what it made:
// sandbox.cleanupTimeout bounds that) before the store closes under them.
const cleanupWait = 40 * time.Second

// shutdown takes the daemon down in order; the store closes after it,
// when Run returns.
type shutdown struct {
	log   *slog.Logger
	grace time.Duration
	ops   *inflight.Group
	// servers stop accepting at once and are closed after the operations.
	servers      []*http.Server
	stopLoops    func() // reaper and reconciler
	closeConns   func() // agent sessions; the boxes keep running
	stopServices func() // egress upkeep, gateway usage flush
}

func (s shutdown) run() {
	start := time.Now()
	s.log.Info("shutting down", "grace", s.grace)
	graceCtx, cancel := context.WithTimeout(context.Background(), s.grace)
	defer cancel()

	// 1. Stop accepting: listeners close, new operations are refused, the
	// reaper and reconciler start nothing new.
	s.ops.Close()
	s.stopLoops()
	var servers sync.WaitGroup
	for _, hs := range s.servers {
		if hs == nil {
			continue
		}
		servers.Add(1)
		go func() {
			defer servers.Done()
			if err := hs.Shutdown(graceCtx); err != nil {
				hs.Close()
			}
		}()
	}

	// 2. Wait for the operations in flight for the grace period, then
	// cancel what is left: cancelled operations clean up after themselves.
	cancelled := false
	if n := s.ops.Wait(graceCtx); n > 0 {
		s.log.Warn("grace period over; cancelling operations", "running", n)
		s.ops.Cancel()
		cancelled = true
	}

	// 3. Close connections: requests still open (streams, terminals,
	// tunnels) end, and so do the agent sessions.
	for _, hs := range s.servers {
		if hs != nil && cancelled {
			hs.Close()
		}
	}
	servers.Wait()
	s.closeConns()
	cctx, ccancel := context.WithTimeout(context.Background(), cleanupWait)
	defer ccancel()
	if n := s.ops.Wait(cctx); n > 0 {
		s.log.Error("operations did not end after they were cancelled; closing the store under them", "running", n)
	}

	// 4. Stop the services the operations used; the gateway writes its
	// last usage. The store closes when Run returns.
	s.stopServices()
	s.log.Info("shut down", "took", time.Since(start).Round(time.Millisecond))
}
