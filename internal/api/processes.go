package api

// processRoutes registers the routes of this feature (not built yet).
func (s *Server) processRoutes() {}
