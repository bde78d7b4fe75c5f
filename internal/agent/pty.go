package agent

import "net/http"

// ptyRoutes registers the routes of this service (not built yet).
func (h *handler) ptyRoutes(mux *http.ServeMux) {}
