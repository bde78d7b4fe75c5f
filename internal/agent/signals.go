package agent

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// forwarded are the signals PID 1 passes on to its children's process
// groups, so `docker kill -s HUP` reaches the workload as it would without
// an init in between.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGQUIT}

// WaitForTermination forwards signals to r's children until the agent is
// told to stop: SIGTERM, or also SIGINT when not PID 1 (someone's terminal),
// or ctx's end. The caller then stops serving and calls r.Shutdown.
func WaitForTermination(ctx context.Context, r *Reaper, pid1 bool) os.Signal {
	c := make(chan os.Signal, 8)
	signal.Notify(c, append([]os.Signal{syscall.SIGTERM}, forwarded...)...)
	defer signal.Stop(c)
	for {
		select {
		case <-ctx.Done():
			return nil
		case sig := <-c:
			if sig == syscall.SIGTERM || (sig == syscall.SIGINT && !pid1) {
				return sig
			}
			r.Signal(sig.(syscall.Signal))
		}
	}
}
