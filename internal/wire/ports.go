package wire

// PortWaitResult answers GET /v1/sandboxes/{id}/ports/{port}/wait once
// something inside the sandbox accepts connections on the port.
type PortWaitResult struct {
	Port     int   `json:"port"`
	Ready    bool  `json:"ready"`
	WaitedMs int64 `json:"waitedMs"`
}

// SetPortPublicRequest is the body of POST /v1/sandboxes/{id}/ports/{port}/public.
type SetPortPublicRequest struct {
	Public bool `json:"public"`
}

// PortAccess says whether a port's preview needs a token.
type PortAccess struct {
	Port   int  `json:"port"`
	Public bool `json:"public"`
}

// PreviewURL answers POST /v1/sandboxes/{id}/ports/{port}/preview-url: where
// a browser or any HTTP client reaches the port, with the sandbox's preview
// token (which grants preview access to this sandbox and nothing else).
type PreviewURL struct {
	Port int `json:"port"`
	// URL is the host-name preview, {port}-{id}.<preview domain>, with the
	// token as a query parameter that the daemon turns into a cookie. Empty
	// when the daemon has no preview domain.
	URL string `json:"url,omitempty"`
	// PathURL is the preview by path under the API's own address.
	PathURL string `json:"pathUrl"`
	// Token is the sandbox's preview token: send it as the
	// X-Hotcell-Preview-Token header or the hotcell_preview_token query
	// parameter.
	Token  string `json:"token"`
	Public bool   `json:"public"`
}

// TCP tunnel control messages. Data travels in binary WebSocket messages;
// these travel as JSON text messages.
const (
	// TunnelCloseWrite (client → sandbox) half-closes the connection to the
	// port: the program there reads EOF and may still answer.
	TunnelCloseWrite = "close_write"
	// TunnelEOF (sandbox → client) says the program closed its side; no
	// more data follows, but the client may still send.
	TunnelEOF = "eof"
)

// TunnelControl is a text message on a TCP tunnel.
type TunnelControl struct {
	Type string `json:"type"`
}

// Preview credentials other than the API token.
const (
	PreviewTokenHeader = "X-Hotcell-Preview-Token"
	PreviewTokenQuery  = "hotcell_preview_token"
	PreviewTokenCookie = "hotcell_preview_token"
)
