package agent

import "net/http"

// processRoutes registers the routes of this service (not built yet).
func (h *handler) processRoutes(mux *http.ServeMux) {}
