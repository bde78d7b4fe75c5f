package agent

import "net/http"

// portRoutes registers the routes of this service (not built yet).
func (h *handler) portRoutes(mux *http.ServeMux) {}
