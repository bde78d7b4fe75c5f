package e2b

// filesRoutes registers envd's plain HTTP /files: uploads, downloads, signed URLs (e2b-protocol.md §6).
func (s *Server) filesRoutes() {}
