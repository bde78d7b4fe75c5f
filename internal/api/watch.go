package api

// watchRoutes registers the routes of this feature (not built yet).
func (s *Server) watchRoutes() {}
