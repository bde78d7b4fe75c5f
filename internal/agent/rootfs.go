package agent

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"github.com/hotcell/hotcell/internal/fspath"
	"github.com/hotcell/hotcell/internal/wire"
)

// A driver that cannot commit a box through its engine (Kubernetes: a
// pod's root filesystem is the node's, out of the API's reach) saves it
// from inside: GET /v1/rootfs streams the root filesystem as a tar, and
// GET /v1/env says the box's own env, the image config's Env to be.

func (h *handler) rootfsRoutes(mux *http.ServeMux) {
	mux.Handle("GET /v1/rootfs", h.adapt(h.rootfs))
	mux.Handle("GET /v1/env", h.adapt(h.boxEnv))
}

// rootfs streams a tar of / with names relative to it. What is mounted
// over the root filesystem is not part of it (the workspace, /proc, /dev,
// the agent's own directory, the runtime's /etc/hosts): a mount point's
// directory is kept empty and a file mounted over is left out, as an
// engine's commit leaves them.
func (h *handler) rootfs(w http.ResponseWriter, r *http.Request) error {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("read the mounts: %w", err)
	}
	mounts, err := mountPoints(f)
	f.Close()
	if err != nil {
		return err
	}
	delete(mounts, "/")
	w.Header().Set("Content-Type", "application/x-tar")
	w.WriteHeader(http.StatusOK)
	return writeTar(w, "/", mounts)
}

// mountPoints reads a mountinfo table (proc(5)): the set of mount points.
func mountPoints(r io.Reader) (map[string]bool, error) {
	points := map[string]bool{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			return nil, fmt.Errorf("read the mounts: a line of %d fields: %q", len(fields), sc.Text())
		}
		points[fspath.UnescapeMount(fields[4])] = true
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read the mounts: %w", err)
	}
	return points, nil
}

// boxEnv answers the box's own env: the image's and the engine's, not the
// set laid over it (PUT /v1/env), which holds a claimer's tokens.
func (h *handler) boxEnv(w http.ResponseWriter, r *http.Request) error {
	env := map[string]string{}
	for _, kv := range h.opts.BaseEnv {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			env[k] = v
		}
	}
	return writeJSON(w, http.StatusOK, wire.SetEnvRequest{Env: env})
}
