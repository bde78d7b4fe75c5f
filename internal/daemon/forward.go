package daemon

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hotcell/hotcell/internal/config"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/store"
	"github.com/hotcell/hotcell/internal/wire"
)

// ForwardedHeader marks a call one daemon of a set passed to another: the
// receiver serves it itself, whatever the registry says, so a call is
// forwarded at most once. It stops a second hop and grants nothing: a
// client may send it too, and then its call is served where it landed.
const ForwardedHeader = "X-Hotcell-Forwarded"

// holderLiveBeats is how many heartbeats (registryHeartbeat) a session
// holder may miss before it counts as dead: its calls are then served
// where they land, and the local manager waits for the agent's redial.
const holderLiveBeats = 3

// forwardDialTimeout bounds the connect to a live holder: one that does
// not answer by then gets the client a 503 to retry, not a hang.
const forwardDialTimeout = 3 * time.Second

// Forwarding is what the forwarding handler needs: who this daemon is,
// which sandboxes it serves itself, and where the registry says the
// others' sessions are.
type Forwarding struct {
	// Self is this daemon's id in the registry.
	Self string
	// SandboxOf names the sandbox a request is for (api.Server.SandboxOf).
	SandboxOf func(r *http.Request) (id string, ok bool)
	// HasSession reports whether this daemon holds a live agent session
	// of a sandbox (sandbox.Manager.HasSession).
	HasSession func(id string) bool
	// Holders is the registry, the leases and the pools' configuration
	// (a *store.Store).
	Holders interface {
		SessionHolder(ctx context.Context, sandbox string) (store.Daemon, bool, error)
		LeaseHolder(ctx context.Context, name string) (string, time.Time, error)
		Daemons(ctx context.Context) ([]store.Daemon, error)
		Pools(ctx context.Context) (map[string]wire.PoolConfig, error)
	}
	// Heartbeat is the registry's heartbeat period; a holder is live while
	// its last heartbeat is younger than holderLiveBeats of them.
	Heartbeat time.Duration
	Log       *slog.Logger
	// Counted, if set, counts the calls passed on (NewForwardedCounter).
	Counted *prometheus.CounterVec
}

// NewForwardedCounter is hotcell_forwarded_requests_total: the calls a
// daemon passed to another daemon of its set, by kind (sandbox: to the
// holder of its agent's session; create: to the leader, for its pool;
// pool: a pool's status or configuration, and the templates' with their
// pools, to the leader, whose memory holds the pools) and result (passed;
// unavailable: the other daemon did not answer and the client got a 503;
// local: a create or a read whose leader could not be dialled, served here
// instead).
func NewForwardedCounter() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hotcell_forwarded_requests_total",
		Help: "Calls passed to another daemon of the set, by kind (sandbox, create, pool) and result (passed, unavailable, local).",
	}, []string{"kind", "result"})
}

// count adds one call of t's kind with result to Counted.
func (f Forwarding) count(t forwardTarget, result string) {
	if f.Counted == nil {
		return
	}
	kind := "sandbox"
	switch {
	case t.create != nil:
		kind = "create"
	case t.pool:
		kind = "pool"
	}
	f.Counted.WithLabelValues(kind, result).Inc()
}

// Handler serves a call for a sandbox whose agent session another live
// daemon of the set holds by passing it to that daemon, and every other
// call with next (docs/kubernetes.md, "Several daemons on one store"). It
// goes inside the in-flight tracking (inflight.Group.Handler), so the
// shutdown waits for forwarded calls too, and outside the API's own
// routing and authentication: the holder checks the client's credential,
// which passes through unchanged (the daemons of a set share the token
// file, and API keys are in the store), as does the Host, by which
// previews and E2B's envd are routed.
func (f Forwarding) Handler(next http.Handler) http.Handler {
	if f.Log == nil {
		f.Log = slog.Default()
	}
	if f.Heartbeat <= 0 {
		f.Heartbeat = registryHeartbeat
	}
	log := f.Log.With("component", "forward")
	tr := &http.Transport{
		// Straight to the holder: a proxy of the daemon's environment is
		// for its outside calls, not for the daemons of its set.
		Proxy:       nil,
		DialContext: (&net.Dialer{Timeout: forwardDialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		// HTTP/1.1 only, over TLS too: ReverseProxy passes a WebSocket
		// upgrade (exec, terminals, tunnels) only on HTTP/1.1.
		TLSNextProto:        map[string]func(string, *tls.Conn) http.RoundTripper{},
		TLSHandshakeTimeout: forwardDialTimeout,
		MaxIdleConnsPerHost: 32,
		IdleConnTimeout:     90 * time.Second,
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			t := pr.In.Context().Value(forwardTargetKey{}).(forwardTarget)
			pr.SetURL(t.url)
			pr.Out.Host = pr.In.Host // previews and envd are routed by host
			// Rewrite drops the client's X-Forwarded-*; keep what a
			// proxy in front of this daemon said, and add this hop.
			for _, h := range []string{"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"} {
				if v, ok := pr.In.Header[h]; ok {
					pr.Out.Header[h] = v
				}
			}
			pr.SetXForwarded()
			pr.Out.Header.Set(ForwardedHeader, f.Self)
		},
		ModifyResponse: func(res *http.Response) error {
			// The other daemon answered (an upgrade too): passed.
			f.count(res.Request.Context().Value(forwardTargetKey{}).(forwardTarget), "passed")
			return nil
		},
		Transport:     tr,
		FlushInterval: -1, // NDJSON streams and Connect's server streams line by line
		ErrorLog:      slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			t := r.Context().Value(forwardTargetKey{}).(forwardTarget)
			if r.Context().Err() != nil {
				return // the client went away; nobody is left to answer
			}
			if t.pool && r.Method == http.MethodGet {
				// A read the leader did not answer, whether it never got
				// it (a failed dial) or its connection broke (a kept-alive
				// one it closed as it died): this daemon's view (the
				// templates are the store's; the pools' status is what
				// this daemon knows) rather than a failure. A read may be
				// served twice; only a create must not be made twice.
				log.Warn("the leader did not answer a read of the pools; serving it here", "holder", t.holder, "err", err)
				f.count(t, "local")
				t.local.ServeHTTP(w, t.in)
				return
			}
			if t.create != nil {
				var op *net.OpError
				if errors.As(err, &op) && op.Op == "dial" {
					// The leader never got the create: make it here,
					// cold, rather than fail it. (r is the outgoing
					// request; the client's is t.in.)
					log.Warn("the leader did not answer a create from its pool; creating here", "holder", t.holder, "err", err)
					in := t.in
					in.Body = io.NopCloser(bytes.NewReader(t.create))
					in.ContentLength = int64(len(t.create))
					f.count(t, "local")
					t.local.ServeHTTP(w, in)
					return
				}
			}
			f.count(t, "unavailable")
			w.Header().Set("Retry-After", "1")
			// The request's body may be unread, and full duplex leaves it
			// so: the server drops the connection, which the client must
			// not take back for its next call.
			w.Header().Set("Connection", "close")
			if t.pool {
				log.Warn("the leader did not answer a call on the pools", "holder", t.holder, "url", t.url.String(), "err", err)
				errdefs.Write(w, fmt.Errorf("the daemon holding the warm pools did not answer: retry in a moment: %w", errdefs.ErrUnavailable), "")
				return
			}
			if t.create != nil {
				log.Warn("the leader did not answer a create from its pool", "holder", t.holder, "url", t.url.String(), "err", err)
				errdefs.Write(w, fmt.Errorf("the daemon holding the template's warm pool did not answer the create: %w", errdefs.ErrUnavailable), "")
				return
			}
			log.Warn("the daemon holding the sandbox's agent did not answer", "sandbox", t.sandbox, "holder", t.holder, "url", t.url.String(), "err", err)
			errdefs.Write(w, fmt.Errorf("the daemon holding sandbox %s's agent did not answer: retry in a moment: %w",
				t.sandbox, errdefs.ErrUnavailable), "")
		},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t, ok := f.target(r, log)
		if !ok {
			t, ok = f.createTarget(r, log)
		}
		if !ok {
			t, ok = f.poolTarget(r, log)
		}
		if !ok {
			next.ServeHTTP(w, r)
			return
		}
		t.local, t.in = next, r
		// An exec's stdin streams in while its output streams out: the
		// server must not cut the request body once the answer starts.
		// HTTP/2 is full duplex already (ErrNotSupported).
		_ = http.NewResponseController(w).EnableFullDuplex()
		log.Debug("forward", "method", r.Method, "path", r.URL.Path, "sandbox", t.sandbox, "to", t.holder)
		rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), forwardTargetKey{}, t)))
	})
}

type forwardTargetKey struct{}

// forwardTarget is where one call is forwarded.
type forwardTarget struct {
	sandbox, holder string
	url             *url.URL
	// create is the body of a create sent to the leader for its pool: the
	// call is served locally with it when the leader cannot be dialled.
	create []byte
	// pool is a call on the pools (poolTarget).
	pool  bool
	local http.Handler
	in    *http.Request
}

// maxPeekedCreate bounds the create body read to find its template; a
// larger one is served where it landed.
const maxPeekedCreate = 1 << 20

// createTarget reports where a create goes when it names a template with
// a warm pool and another live daemon leads the loops: a pool's ready
// boxes are in the leader's memory (refill runs there), so only the
// leader claims them, and a create served elsewhere would be cold. The
// body is read (up to maxPeekedCreate) for the template and put back.
func (f Forwarding) createTarget(r *http.Request, log *slog.Logger) (forwardTarget, bool) {
	if r.Method != http.MethodPost || r.Header.Get(ForwardedHeader) != "" || r.Body == nil {
		return forwardTarget{}, false
	}
	switch r.URL.Path {
	case "/v1/sandboxes", "/e2b/sandboxes", "/e2b/v2/sandboxes":
	default:
		return forwardTarget{}, false
	}
	if _, ok := f.SandboxOf(r); ok {
		return forwardTarget{}, false // a preview host's path, not a create
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxPeekedCreate+1))
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(body), r.Body), r.Body}
	if err != nil || len(body) > maxPeekedCreate {
		return forwardTarget{}, false
	}
	var req struct {
		Template   string `json:"template"`   // hotcell's create
		TemplateID string `json:"templateID"` // E2B's
	}
	if json.Unmarshal(body, &req) != nil {
		return forwardTarget{}, false // the API says what is wrong with it
	}
	name := req.Template
	if name == "" {
		name = req.TemplateID
	}
	if name == "" {
		return forwardTarget{}, false
	}
	ctx := r.Context()
	leader, until, err := f.Holders.LeaseHolder(ctx, loopsLease)
	if err != nil || leader == "" || leader == f.Self || time.Now().After(until) {
		return forwardTarget{}, false
	}
	pools, err := f.Holders.Pools(ctx)
	if _, ok := pools[name]; err != nil || !ok {
		return forwardTarget{}, false
	}
	t, ok := f.leaderTarget(ctx, leader, log)
	t.create = body
	return t, ok
}

// leaderTarget is where a call for the leader of the loops goes: its
// registered URL while its heartbeat is live; ok is false otherwise.
func (f Forwarding) leaderTarget(ctx context.Context, leader string, log *slog.Logger) (forwardTarget, bool) {
	ds, err := f.Holders.Daemons(ctx)
	if err != nil {
		log.Warn("list the daemons for a call to the leader", "err", err)
		return forwardTarget{}, false
	}
	for _, d := range ds {
		if d.ID != leader || time.Since(d.HeartbeatAt) > holderLiveBeats*f.Heartbeat {
			continue
		}
		u, err := url.Parse(d.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return forwardTarget{}, false
		}
		return forwardTarget{holder: d.ID, url: u}, true
	}
	return forwardTarget{}, false
}

// poolTarget reports where a call on the warm pools goes when another
// live daemon leads the loops: the pools live in the leader's memory
// (their ready boxes, their counts; a configuration changed elsewhere
// reaches only the store and that daemon), so their status and their
// configuration are the leader's business. The calls are every method of
// /v1/templates/{name}/pool, and the templates' reads that carry their
// pool's status (GET /v1/templates, GET /v1/templates/{name}) and the
// delete of one, which refuses a template with a pool unless forced.
func (f Forwarding) poolTarget(r *http.Request, log *slog.Logger) (forwardTarget, bool) {
	if r.Header.Get(ForwardedHeader) != "" || !poolCall(r) {
		return forwardTarget{}, false
	}
	if _, ok := f.SandboxOf(r); ok {
		return forwardTarget{}, false // a preview host's path
	}
	ctx := r.Context()
	leader, until, err := f.Holders.LeaseHolder(ctx, loopsLease)
	if err != nil || leader == "" || leader == f.Self || time.Now().After(until) {
		return forwardTarget{}, false
	}
	t, ok := f.leaderTarget(ctx, leader, log)
	t.pool = true
	return t, ok
}

// poolCall reports whether r is one of poolTarget's calls.
func poolCall(r *http.Request) bool {
	rest, ok := strings.CutPrefix(r.URL.Path, "/v1/templates")
	if !ok {
		return false
	}
	switch {
	case rest == "" || rest == "/":
		return r.Method == http.MethodGet
	case !strings.HasPrefix(rest, "/"):
		return false
	}
	parts := strings.Split(rest[1:], "/")
	switch {
	case len(parts) == 1 && parts[0] != "":
		return r.Method == http.MethodGet || r.Method == http.MethodDelete
	case len(parts) == 2 && parts[0] != "" && parts[1] == "pool":
		return true
	}
	return false
}

// target reports where r goes when another live daemon holds the session
// of its sandbox; ok is false when this daemon serves it.
func (f Forwarding) target(r *http.Request, log *slog.Logger) (forwardTarget, bool) {
	if r.Header.Get(ForwardedHeader) != "" {
		return forwardTarget{}, false // forwarded once already
	}
	id, ok := f.SandboxOf(r)
	if !ok || f.HasSession(id) {
		return forwardTarget{}, false
	}
	// One lookup per call: a cached holder could route calls to a daemon
	// that died since.
	d, ok, err := f.Holders.SessionHolder(r.Context(), id)
	switch {
	case err != nil:
		// The store is what every call needs: serving locally reports
		// its failure in the call's own words.
		log.Warn("look up the sandbox's session holder", "sandbox", id, "err", err)
		return forwardTarget{}, false
	case !ok || d.ID == f.Self:
		return forwardTarget{}, false
	case time.Since(d.HeartbeatAt) > holderLiveBeats*f.Heartbeat:
		// The holder is dead: its agent is redialling, and the local
		// manager waits for it.
		return forwardTarget{}, false
	}
	u, err := url.Parse(d.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		log.Warn("the registry's URL of the sandbox's session holder is unusable; serving locally", "sandbox", id, "holder", d.ID, "url", d.URL)
		return forwardTarget{}, false
	}
	return forwardTarget{sandbox: id, holder: d.ID, url: u}, true
}

// advertiseURL is the URL this daemon puts in the registry for the others
// of its set: advertise_url, else http:// and the address the API
// listens on, which names no reachable host when that is a wildcard.
func advertiseURL(cfg config.Config, addr net.Addr, log *slog.Logger) string {
	if cfg.AdvertiseURL != "" {
		return cfg.AdvertiseURL
	}
	if ta, ok := addr.(*net.TCPAddr); ok && ta.IP.IsUnspecified() {
		log.Warn("the API listens on a wildcard address, which the other daemons on this store cannot reach to forward calls to this one: set advertise_url (--advertise-url, HOTCELL_ADVERTISE_URL) to the URL they reach it at",
			"listen", addr.String())
	}
	return "http://" + addr.String()
}
