package api

// statsRoutes registers the routes of this feature (not built yet).
func (s *Server) statsRoutes() {}
