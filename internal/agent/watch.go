package agent

import "net/http"

// watchRoutes registers the routes of this service (not built yet).
func (h *handler) watchRoutes(mux *http.ServeMux) {}
