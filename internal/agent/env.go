package agent

import (
	"maps"
	"net/http"
	"strings"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// The daemon sets a sandbox's env through PUT /v1/env when the box was made
// before its owner was known (a warm pool's box, claimed later): the
// container's env then holds only the template's defaults, and the
// claimer's env (its variables, its gateway tokens) is laid over it for
// every process started from then on. The daemon sends it again each time
// the agent connects, so a restarted agent gets it back before any exec.

// maxEnvVars bounds the set; a create accepts far fewer.
const maxEnvVars = 4096

func (h *handler) envRoutes(mux *http.ServeMux) {
	mux.Handle("PUT /v1/env", h.adapt(h.setEnv))
}

func (h *handler) setEnv(w http.ResponseWriter, r *http.Request) error {
	var req wire.SetEnvRequest
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	if len(req.Env) > maxEnvVars {
		return errdefs.Invalid("env", "at most %d variables, got %d", maxEnvVars, len(req.Env))
	}
	for k, v := range req.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return errdefs.Invalid("env", "%q is not a variable name with a value without NUL", k)
		}
	}
	h.envMu.Lock()
	h.envSet = maps.Clone(req.Env)
	h.envMu.Unlock()
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// baseEnv is the env every process starts from: the box's own with the
// set laid over it.
func (h *handler) baseEnv() []string {
	h.envMu.RLock()
	defer h.envMu.RUnlock()
	if len(h.envSet) == 0 {
		return h.opts.BaseEnv
	}
	return mergeEnv(h.opts.BaseEnv, h.envSet)
}
