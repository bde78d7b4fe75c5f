package wire

import "time"

// ConsoleSessionCookie is the web console's session cookie (with TLS it is
// named __Host-hotcell_session).
const ConsoleSessionCookie = "hotcell_session"

// ConsoleCSRFHeader carries a console session's CSRF token on every
// request but GET, HEAD and OPTIONS that the session's cookie authenticates.
const ConsoleCSRFHeader = "X-Hotcell-CSRF"

// SignInRequest is POST /v1/session: the web console's sign-in.
type SignInRequest struct {
	// Key is an API key or the daemon's token.
	Key string `json:"key"`
}

// Session is a web console session (POST and GET /v1/session).
type Session struct {
	// CSRFToken goes back in the X-Hotcell-CSRF header of unsafe requests.
	CSRFToken string    `json:"csrfToken"`
	ExpiresAt time.Time `json:"expiresAt"`
	// KeyName is the API key the session signed in with; empty for the
	// daemon's token (Admin).
	KeyName string `json:"keyName,omitempty"`
	Admin   bool   `json:"admin"`
}
