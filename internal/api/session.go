package api

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/hotcell/hotcell/internal/console"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// The web console (/ui/) signs in once with an API key or the token and
// then authenticates by a session cookie, so that the key is never kept by
// the page (no URL, no localStorage). A cookie is sent by the browser on its
// own, so a request authenticated by one must also prove it comes from the
// console: unsafe methods carry the session's CSRF token in a header (a
// page of another origin cannot read it), and any request that names an
// Origin (fetches, WebSockets) must name this one.

const (
	// DefaultConsoleSessionTTL is how long a sign-in lasts when
	// Options.ConsoleSessionTTL is not set.
	DefaultConsoleSessionTTL = 12 * time.Hour
	// csrfHeader carries the session's CSRF token on unsafe requests.
	csrfHeader = wire.ConsoleCSRFHeader
	// maxSessions bounds the table; signing in needs a valid key, so only a
	// client holding one could fill it, and then the oldest go first.
	maxSessions    = 10000
	maxSessionBody = 8 << 10
)

// sessionCookieName is the cookie's name for r: with TLS it is Secure and
// __Host- prefixed (bound to this host, path /).
func sessionCookieName(r *http.Request) string {
	if r.TLS != nil {
		return "__Host-" + wire.ConsoleSessionCookie
	}
	return wire.ConsoleSessionCookie
}

// session is one signed-in browser. The credential it signed in with is
// kept (in memory only) so that a key revoked later ends its sessions too.
type session struct {
	id      string
	csrf    string
	cred    string
	caller  caller
	created time.Time
	expires time.Time
	seq     uint64 // order of sign-in, for dropping the oldest
}

// sessions is the server-side session table. It lives in memory: a daemon
// restart signs every browser out, which costs a sign-in and keeps no
// credential on disk.
type sessions struct {
	mu   sync.Mutex
	m    map[string]*session
	max  int
	next uint64
}

func newSessions() *sessions { return &sessions{m: map[string]*session{}, max: maxSessions} }

func randomToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func (ss *sessions) add(cred string, c caller, ttl time.Duration) *session {
	now := time.Now()
	s := &session{id: randomToken(), csrf: randomToken(), cred: cred, caller: c, created: now, expires: now.Add(ttl)}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.next++
	s.seq = ss.next
	for id, o := range ss.m {
		if now.After(o.expires) {
			delete(ss.m, id)
		}
	}
	for len(ss.m) >= ss.max {
		var oldest *session
		for _, o := range ss.m {
			if oldest == nil || o.seq < oldest.seq {
				oldest = o
			}
		}
		delete(ss.m, oldest.id)
	}
	ss.m[s.id] = s
	return s
}

// get returns the live session id names; an expired one is removed.
func (ss *sessions) get(id string) (*session, bool) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	s, ok := ss.m[id]
	if !ok {
		return nil, false
	}
	if time.Now().After(s.expires) {
		delete(ss.m, id)
		return nil, false
	}
	return s, true
}

func (ss *sessions) remove(id string) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	delete(ss.m, id)
}

func (s *Server) sessionRoutes() {
	s.handle("POST /v1/session", s.signIn)
	s.handle("GET /v1/session", s.getSession)
	s.handle("DELETE /v1/session", s.signOut)
}

// verify checks a credential as a bearer token would be checked.
func (s *Server) verify(r *http.Request, cred string) (caller, bool) {
	if cred == "" {
		return caller{}, false
	}
	if subtle.ConstantTimeCompare([]byte(cred), []byte(s.opts.Token)) == 1 {
		return caller{admin: true}, true
	}
	if s.opts.APIKeys == nil {
		return caller{}, false
	}
	name, ok := s.opts.APIKeys.Verify(r.Context(), cred)
	if !ok {
		return caller{}, false
	}
	return caller{key: name}, true
}

// signIn is open (it is how a browser gets credentials): it takes the key
// in the body, never the URL, and answers with the session cookie and the
// CSRF token the page sends back on unsafe requests.
func (s *Server) signIn(w http.ResponseWriter, r *http.Request) error {
	if err := checkConsoleOrigin(r, false); err != nil {
		return err
	}
	var req wire.SignInRequest
	if err := readJSON(r, maxSessionBody, &req); err != nil {
		return err
	}
	if req.Key == "" {
		return errdefs.Invalid("key", "is required: an API key (hotcell keys create NAME) or the daemon's token")
	}
	c, ok := s.verify(r, req.Key)
	if !ok {
		s.log.Info("console sign-in refused", "remote", r.RemoteAddr)
		return fmt.Errorf("key: not an API key or the daemon's token (create one with hotcell keys create NAME): %w", errdefs.ErrUnauthenticated)
	}
	sess := s.sessions.add(req.Key, c, s.opts.ConsoleSessionTTL)
	http.SetCookie(w, &http.Cookie{
		Name:     sessionCookieName(r),
		Value:    sess.id,
		Path:     "/",
		Expires:  sess.expires,
		MaxAge:   int(s.opts.ConsoleSessionTTL / time.Second),
		HttpOnly: true,
		Secure:   r.TLS != nil,
		SameSite: http.SameSiteStrictMode,
	})
	s.log.Info("console signed in", "apiKey", c.key, "admin", c.admin, "expires", sess.expires)
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusCreated, sessionInfo(sess))
	return nil
}

func sessionInfo(sess *session) wire.Session {
	return wire.Session{CSRFToken: sess.csrf, ExpiresAt: sess.expires.UTC(), KeyName: sess.caller.key, Admin: sess.caller.admin}
}

// getSession tells a page loaded again whether it is signed in, and hands
// it the CSRF token again (the cookie is HttpOnly; a page of another origin
// cannot read this answer).
func (s *Server) getSession(w http.ResponseWriter, r *http.Request) error {
	c := callerOf(r)
	if c.session == nil {
		return fmt.Errorf("this request was authenticated by a bearer token, not a console session: %w", errdefs.ErrNotFound)
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, sessionInfo(c.session))
	return nil
}

// signOut ends the session the request came with (and clears its cookie).
func (s *Server) signOut(w http.ResponseWriter, r *http.Request) error {
	if c := callerOf(r); c.session != nil {
		s.sessions.remove(c.session.id)
	}
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookieName(r), Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode,
	})
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// authenticateSession accepts the session cookie, but only with the
// request's proof of coming from the console: a matching Origin when one
// is named (always for WebSockets and unsafe methods), and the CSRF token
// on unsafe methods.
func (s *Server) authenticateSession(r *http.Request) (caller, error) {
	ck, err := r.Cookie(sessionCookieName(r))
	if err != nil || ck.Value == "" {
		return caller{}, errNoCredentials
	}
	sess, ok := s.sessions.get(ck.Value)
	if !ok {
		return caller{}, fmt.Errorf("the console session has expired or was signed out; sign in again at /ui/: %w", errdefs.ErrUnauthenticated)
	}
	unsafe := r.Method != http.MethodGet && r.Method != http.MethodHead && r.Method != http.MethodOptions
	websocket := r.Header.Get("Upgrade") != ""
	if err := checkConsoleOrigin(r, unsafe || websocket); err != nil {
		return caller{}, err
	}
	if unsafe && subtle.ConstantTimeCompare([]byte(r.Header.Get(csrfHeader)), []byte(sess.csrf)) != 1 {
		return caller{}, fmt.Errorf("a request authenticated by the console's cookie must carry its CSRF token in %s: %w", csrfHeader, errdefs.ErrPermissionDenied)
	}
	// The credential is checked again so that revoking a key ends the
	// sessions signed in with it.
	c, ok := s.verify(r, sess.cred)
	if !ok {
		s.sessions.remove(sess.id)
		return caller{}, fmt.Errorf("the key this console session signed in with was revoked; sign in again at /ui/: %w", errdefs.ErrUnauthenticated)
	}
	c.session = sess
	return c, nil
}

var errNoCredentials = fmt.Errorf("missing or wrong bearer token: send Authorization: Bearer <token from the data dir's token file, or an API key from hotcell keys create>: %w", errdefs.ErrUnauthenticated)

// checkConsoleOrigin checks the Origin header against the host the
// request was sent to (sameOrigin, preview.go). required makes a missing
// Origin an error too (browsers send it on every unsafe fetch and every
// WebSocket).
func checkConsoleOrigin(r *http.Request, required bool) error {
	origin := r.Header.Get("Origin")
	if origin == "" {
		if required {
			return fmt.Errorf("a request authenticated by the console's cookie must name its Origin: %w", errdefs.ErrPermissionDenied)
		}
		return nil
	}
	if !sameOrigin(origin, r) {
		return fmt.Errorf("cross-origin request from %q refused: the console and the API are served from %s: %w", clip(origin), r.Host, errdefs.ErrPermissionDenied)
	}
	return nil
}

// consolePrefix is where the web console's files are served.
const consolePrefix = console.Prefix

var consoleHandler = console.Handler()

func serveConsole(w http.ResponseWriter, r *http.Request) { consoleHandler.ServeHTTP(w, r) }
