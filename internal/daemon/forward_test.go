package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hotcell/hotcell/internal/api"
	"github.com/hotcell/hotcell/internal/config"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/store"
	"github.com/hotcell/hotcell/internal/testenv"
	"github.com/hotcell/hotcell/internal/wire"
)

// TestForwarding runs daemon B's forwarding handler, on a real PostgreSQL
// registry and a real HTTP server, in front of a real HTTP server standing
// for daemon A's API, which the registry names as the holder of sandbox
// sb-a's agent session.
func TestForwarding(t *testing.T) {
	t.Parallel()
	st, err := store.Open(t.Context(), testenv.RequirePostgres(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })

	// A: what it received, as JSON, on /v1/sandboxes/{id} and envd; a
	// stream that waits for the client between its lines; a full-duplex
	// echo of the body; a WebSocket echo.
	release := make(chan struct{})
	a := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasSuffix(r.URL.Path, "/stream"):
			w.Header().Set("Content-Type", "application/x-ndjson")
			io.WriteString(w, `{"line":1}`+"\n")
			http.NewResponseController(w).Flush()
			select {
			case <-release: // the client read line 1 while this call runs
			case <-r.Context().Done():
				return
			}
			io.WriteString(w, `{"line":2}`+"\n")
		case strings.HasSuffix(r.URL.Path, "/duplex"):
			if err := http.NewResponseController(w).EnableFullDuplex(); err != nil {
				t.Errorf("A: enable full duplex: %v", err)
			}
			w.WriteHeader(http.StatusOK)
			http.NewResponseController(w).Flush()
			sc := bufio.NewScanner(r.Body)
			for sc.Scan() {
				io.WriteString(w, "echo "+sc.Text()+"\n")
				http.NewResponseController(w).Flush()
			}
		case strings.HasSuffix(r.URL.Path, "/ws"):
			c, err := websocket.Accept(w, r, nil)
			if err != nil {
				return
			}
			defer c.CloseNow()
			typ, msg, err := c.Read(r.Context())
			if err != nil {
				return
			}
			c.Write(r.Context(), typ, append([]byte("echo "), msg...))
			c.Close(websocket.StatusNormalClosure, "")
		default:
			body, _ := io.ReadAll(r.Body)
			json.NewEncoder(w).Encode(map[string]string{
				"served": "A", "path": r.URL.Path, "host": r.Host, "body": string(body),
				"authorization": r.Header.Get("Authorization"), "cookie": r.Header.Get("Cookie"),
				"forwarded": r.Header.Get(ForwardedHeader),
			})
		}
	}))
	t.Cleanup(a.Close)
	t.Cleanup(func() { close(release) })
	// An address nothing listens on: a live holder that does not answer.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadURL := "http://" + ln.Addr().String()
	ln.Close()

	now := time.Now()
	ctx := t.Context()
	for _, d := range []struct {
		id, url string
		beat    time.Time
		holds   []string
	}{
		{"A", a.URL, now, []string{"sb-a", "sb-b"}},
		{"B", "http://127.0.0.1:1", now, []string{"sb-self"}},
		// C died an hour ago, though its address still answers: its
		// agents are redialling.
		{"C", a.URL, now.Add(-time.Hour), []string{"sb-c"}},
		{"D", deadURL, now, []string{"sb-d"}},
	} {
		if err := st.Heartbeat(ctx, d.id, d.url, d.beat); err != nil {
			t.Fatal(err)
		}
		for _, sb := range d.holds {
			if err := st.HoldSession(ctx, sb, d.id, now); err != nil {
				t.Fatal(err)
			}
		}
	}

	// A leads the loops, so its memory holds the ready boxes of py's pool.
	if ok, err := st.AcquireLease(ctx, loopsLease, "A", now, time.Hour); err != nil || !ok {
		t.Fatalf("A takes the loops' lease: %v, %v", ok, err)
	}
	if err := st.PutPool(ctx, "py", wire.PoolConfig{Min: 1}); err != nil {
		t.Fatal(err)
	}

	// B: its forwarding in front of a local API that says it served.
	local := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		json.NewEncoder(w).Encode(map[string]string{"served": "B", "path": r.URL.Path})
	})
	routes := api.New(api.Options{PreviewDomain: "preview.example.com", E2B: http.NotFoundHandler()})
	fwd := Forwarding{
		Self:       "B",
		SandboxOf:  routes.SandboxOf,
		HasSession: func(id string) bool { return id == "sb-b" }, // B's own agent session
		Holders:    st,
		Heartbeat:  time.Minute, // C's hour-old beat is dead, A's fresh one live, however slow the test
		Log:        slog.New(slog.DiscardHandler),
		Counted:    NewForwardedCounter(),
	}
	b := httptest.NewServer(fwd.Handler(local))
	t.Cleanup(b.Close)
	// After every subtest: each call passed on is counted once, by kind
	// and result; those served here are not.
	t.Cleanup(func() {
		for _, c := range []struct {
			kind, result string
			want         float64
		}{
			{"sandbox", "passed", 8}, // exec, GET, DELETE, envd, preview, stream, duplex, websocket
			{"sandbox", "unavailable", 1},
			{"create", "passed", 3},
			{"create", "unavailable", 0},
		} {
			if got := counted(t, fwd.Counted, c.kind, c.result); got != c.want {
				t.Errorf("hotcell_forwarded_requests_total{kind=%q,result=%q}: got %v, want %v", c.kind, c.result, got, c.want)
			}
		}
	})

	call := func(t *testing.T, method, path string, hdr map[string]string, body io.Reader) *http.Response {
		t.Helper()
		// A forwarding that holds a stream back fails the call, not hangs
		// the test.
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		t.Cleanup(cancel)
		req, err := http.NewRequestWithContext(ctx, method, b.URL+path, body)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range hdr {
			if k == "Host" {
				req.Host = v
				continue
			}
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	served := func(t *testing.T, resp *http.Response) map[string]string {
		t.Helper()
		var got map[string]string
		if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
			t.Fatalf("decode answer (status %d): %v", resp.StatusCode, err)
		}
		return got
	}

	t.Run("held by A reaches A with credential, host, body and mark", func(t *testing.T) {
		t.Parallel()
		resp := call(t, "POST", "/v1/sandboxes/sb-a/exec",
			map[string]string{"Authorization": "Bearer tok-123", "Cookie": "hotcell_session=s1", "Host": "api.example.com"},
			strings.NewReader(`{"command":"echo hi"}`))
		got := served(t, resp)
		want := map[string]string{
			"served": "A", "path": "/v1/sandboxes/sb-a/exec", "host": "api.example.com", "body": `{"command":"echo hi"}`,
			"authorization": "Bearer tok-123", "cookie": "hotcell_session=s1", "forwarded": "B",
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s at A: got %q, want %q", k, got[k], v)
			}
		}
	})
	t.Run("every method of the sandbox's record", func(t *testing.T) {
		t.Parallel()
		for _, m := range []string{"GET", "DELETE"} {
			if got := served(t, call(t, m, "/v1/sandboxes/sb-a", nil, nil)); got["served"] != "A" || got["forwarded"] != "B" {
				t.Errorf("%s /v1/sandboxes/sb-a: got %v, want served by A, forwarded by B", m, got)
			}
		}
	})
	t.Run("e2b envd by header", func(t *testing.T) {
		t.Parallel()
		got := served(t, call(t, "POST", "/e2b/filesystem.Filesystem/Stat", map[string]string{"E2b-Sandbox-Id": "sb-a"}, strings.NewReader("{}")))
		if got["served"] != "A" || got["path"] != "/e2b/filesystem.Filesystem/Stat" {
			t.Errorf("got %v, want served by A at /e2b/filesystem.Filesystem/Stat", got)
		}
	})
	t.Run("preview host", func(t *testing.T) {
		t.Parallel()
		got := served(t, call(t, "GET", "/app.js", map[string]string{"Host": "3000-sb-a.preview.example.com"}, nil))
		if got["served"] != "A" || got["host"] != "3000-sb-a.preview.example.com" {
			t.Errorf("got %v, want served by A for host 3000-sb-a.preview.example.com", got)
		}
	})
	t.Run("stream flushed line by line", func(t *testing.T) {
		t.Parallel()
		resp := call(t, "POST", "/v1/sandboxes/sb-a/stream", nil, nil)
		lines := bufio.NewReader(resp.Body)
		// A writes line 2 only once line 1 came through, while its
		// call runs: a forwarding that buffered would never deliver it.
		line, err := readLineWithin(lines, 30*time.Second)
		if err != nil || line != `{"line":1}`+"\n" {
			t.Fatalf("first line: got %q, %v, want {\"line\":1} before A ends", line, err)
		}
		release <- struct{}{}
		if line, err := readLineWithin(lines, 30*time.Second); err != nil || line != `{"line":2}`+"\n" {
			t.Fatalf("second line: got %q, %v", line, err)
		}
	})
	t.Run("body streamed full duplex", func(t *testing.T) {
		t.Parallel()
		pr, pw := io.Pipe()
		defer pw.Close()
		// The client's transport waits for its body's Read even past the
		// call's deadline: end the body then, so a held-back answer fails
		// the test rather than hang it.
		stop := time.AfterFunc(time.Minute, func() { pw.CloseWithError(context.DeadlineExceeded) })
		defer stop.Stop()
		resp := call(t, "POST", "/v1/sandboxes/sb-a/duplex", nil, pr)
		lines := bufio.NewReader(resp.Body)
		// Each echo comes back while the request body is still open.
		for _, s := range []string{"one", "two", "three"} {
			if _, err := io.WriteString(pw, s+"\n"); err != nil {
				t.Fatalf("write %q: %v", s, err)
			}
			if line, err := readLineWithin(lines, 30*time.Second); err != nil || line != "echo "+s+"\n" {
				t.Fatalf("echo of %q: got %q, %v", s, line, err)
			}
		}
		pw.Close()
		if rest, err := io.ReadAll(resp.Body); err != nil || len(rest) != 0 {
			t.Errorf("after the body ends: got %q, %v, want the answer's end", rest, err)
		}
	})
	t.Run("websocket upgrade", func(t *testing.T) {
		t.Parallel()
		c, resp, err := websocket.Dial(t.Context(), strings.Replace(b.URL, "http", "ws", 1)+"/v1/sandboxes/sb-a/ws", nil)
		if err != nil {
			t.Fatalf("dial through B: %v (%v)", err, resp)
		}
		defer c.CloseNow()
		if err := c.Write(t.Context(), websocket.MessageBinary, []byte("ping")); err != nil {
			t.Fatal(err)
		}
		_, msg, err := c.Read(t.Context())
		if err != nil || string(msg) != "echo ping" {
			t.Errorf("echo: got %q, %v, want echo ping", msg, err)
		}
	})
	t.Run("served locally", func(t *testing.T) {
		t.Parallel()
		for _, tt := range []struct {
			name, path string
			hdr        map[string]string
		}{
			{"already forwarded", "/v1/sandboxes/sb-a/exec", map[string]string{ForwardedHeader: "X"}},
			{"holder dead", "/v1/sandboxes/sb-c/exec", nil},
			{"B holds the session", "/v1/sandboxes/sb-b/exec", nil},
			{"registry names B", "/v1/sandboxes/sb-self/exec", nil},
			{"no holder", "/v1/sandboxes/sb-none/exec", nil},
			{"no sandbox", "/v1/host", nil},
			{"create", "/v1/sandboxes", map[string]string{"E2b-Sandbox-Id": "sb-a"}},
		} {
			if got := served(t, call(t, "POST", tt.path, tt.hdr, strings.NewReader("{}"))); got["served"] != "B" {
				t.Errorf("%s: got %v, want served by B", tt.name, got)
			}
		}
	})
	t.Run("create from a pool goes to the leader", func(t *testing.T) {
		t.Parallel()
		for _, tt := range []struct{ path, body, want string }{
			{"/v1/sandboxes", `{"template":"py","env":{"A":"1"}}`, "A"},
			{"/e2b/v2/sandboxes", `{"templateID":"py","timeout":60}`, "A"},
			{"/e2b/sandboxes", `{"templateID":"py"}`, "A"},
			{"/v1/sandboxes", `{"template":"no-pool"}`, "B"},
			{"/v1/sandboxes", `{"image":"busybox"}`, "B"},
			{"/v1/sandboxes", `{"template":`, "B"}, // bad JSON: the API answers it here
		} {
			got := served(t, call(t, "POST", tt.path, map[string]string{"Authorization": "Bearer k"}, strings.NewReader(tt.body)))
			if got["served"] != tt.want {
				t.Errorf("POST %s %s: got %v, want served by %s", tt.path, tt.body, got, tt.want)
				continue
			}
			if tt.want == "A" && (got["body"] != tt.body || got["authorization"] != "Bearer k" || got["forwarded"] != "B") {
				t.Errorf("POST %s at A: got body %q, authorization %q, forwarded %q, want %q, Bearer k, B",
					tt.path, got["body"], got["authorization"], got["forwarded"], tt.body)
			}
		}
	})
	t.Run("live holder that does not answer", func(t *testing.T) {
		t.Parallel()
		resp := call(t, "POST", "/v1/sandboxes/sb-d/exec", nil, strings.NewReader("{}"))
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" {
			t.Errorf("got %d, Retry-After %q, want 503, 1", resp.StatusCode, resp.Header.Get("Retry-After"))
		}
		var doc errdefs.Body
		if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
			t.Fatalf("decode error document: %v", err)
		}
		if doc.Error.Code != "unavailable" || !strings.Contains(doc.Error.Message, "sb-d") || !strings.Contains(doc.Error.Message, "retry") {
			t.Errorf("error: got %+v, want unavailable naming sb-d and saying to retry", doc.Error)
		}
	})
}

// readLineWithin reads a line, or fails after d rather than hang the test
// on a forwarding that holds a stream back.
func readLineWithin(r *bufio.Reader, d time.Duration) (string, error) {
	type res struct {
		s   string
		err error
	}
	ch := make(chan res, 1)
	go func() {
		s, err := r.ReadString('\n')
		ch <- res{s, err}
	}()
	select {
	case x := <-ch:
		return x.s, x.err
	case <-time.After(d):
		return "", context.DeadlineExceeded
	}
}

// TestForwardingCreateLeaderDown: a create from a pool whose leader cannot
// be dialled is made where it landed (cold) rather than failed, and one
// on the leader itself, or under a lapsed lease, is never forwarded.
func TestForwardingCreateLeaderDown(t *testing.T) {
	t.Parallel()
	st, err := store.Open(t.Context(), testenv.RequirePostgres(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadURL := "http://" + ln.Addr().String()
	ln.Close()
	ctx, now := t.Context(), time.Now()
	if err := st.Heartbeat(ctx, "D", deadURL, now); err != nil {
		t.Fatal(err)
	}
	if err := st.PutPool(ctx, "py", wire.PoolConfig{Min: 1}); err != nil {
		t.Fatal(err)
	}
	if ok, err := st.AcquireLease(ctx, loopsLease, "D", now, time.Hour); err != nil || !ok {
		t.Fatalf("D takes the loops' lease: %v, %v", ok, err)
	}
	var gotBody string
	local := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		gotBody = string(b)
		w.Header().Set("X-Served", "local")
		w.WriteHeader(http.StatusCreated)
	})
	fwd := Forwarding{Self: "B", SandboxOf: api.New(api.Options{}).SandboxOf, HasSession: func(string) bool { return false },
		Holders: st, Heartbeat: time.Minute, Log: slog.New(slog.DiscardHandler), Counted: NewForwardedCounter()}
	h := fwd.Handler(local)
	for _, name := range []string{"leader down", "leader is B", "lease lapsed"} {
		switch name {
		case "leader is B":
			if err := st.ReleaseLease(ctx, loopsLease, "D"); err != nil {
				t.Fatal(err)
			}
			if ok, err := st.AcquireLease(ctx, loopsLease, "B", now, time.Hour); err != nil || !ok {
				t.Fatalf("B takes the loops' lease: %v, %v", ok, err)
			}
		case "lease lapsed":
			if err := st.ReleaseLease(ctx, loopsLease, "B"); err != nil {
				t.Fatal(err)
			}
			if ok, err := st.AcquireLease(ctx, loopsLease, "D", now.Add(-time.Hour), time.Minute); err != nil || !ok {
				t.Fatalf("D takes the loops' lease: %v, %v", ok, err)
			}
		}
		body := `{"template":"py"}`
		gotBody = ""
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, "POST", "/v1/sandboxes", strings.NewReader(body)))
		if rec.Code != http.StatusCreated || rec.Header().Get("X-Served") != "local" || gotBody != body {
			t.Errorf("%s: got %d, served %q, body %q, want 201 served locally with %q", name, rec.Code, rec.Header().Get("X-Served"), gotBody, body)
		}
	}
	if got := counted(t, fwd.Counted, "create", "local"); got != 1 {
		t.Errorf("creates made here as the leader could not be dialled: counted %v, want 1", got)
	}
}

// TestAdvertiseURL: the registry gets advertise_url when set, else the
// listen address, with a warning when that is a wildcard the other
// daemons cannot reach.
func TestAdvertiseURL(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, advertise string
		addr            *net.TCPAddr
		want            string
		warn            bool
	}{
		{"set", "https://hotcell-0.hotcell.ns.svc:8443", &net.TCPAddr{IP: net.IPv4zero, Port: 8080}, "https://hotcell-0.hotcell.ns.svc:8443", false},
		{"loopback", "", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}, "http://127.0.0.1:8080", false},
		{"an address", "", &net.TCPAddr{IP: net.IPv4(10, 0, 0, 5), Port: 8080}, "http://10.0.0.5:8080", false},
		{"wildcard v4", "", &net.TCPAddr{IP: net.IPv4zero, Port: 8080}, "http://0.0.0.0:8080", true},
		{"wildcard v6", "", &net.TCPAddr{IP: net.IPv6unspecified, Port: 8080}, "http://[::]:8080", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var logs strings.Builder
			log := slog.New(slog.NewTextHandler(&logs, nil))
			got := advertiseURL(config.Config{AdvertiseURL: tt.advertise}, tt.addr, log)
			if got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
			if warned := strings.Contains(logs.String(), "set advertise_url"); warned != tt.warn {
				t.Errorf("warned %v, want %v (log %q)", warned, tt.warn, logs.String())
			}
		})
	}
}

// counted reads hotcell_forwarded_requests_total{kind,result} as a scrape
// would.
func counted(t *testing.T, cv *prometheus.CounterVec, kind, result string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(cv)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["kind"] == kind && labels["result"] == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestForwardingPoolsToTheLeader: the pools live in the leader's memory,
// so daemon B passes every call on them (a pool's status and
// configuration, the templates' reads that carry their pools, a
// template's delete) to the leader of the loops, on a real PostgreSQL
// registry and lease, to a real HTTP server standing for the leader D.
// Other calls on templates stay; a leader that is B, or whose lease
// lapsed, gets nothing; a leader that cannot be dialled has its reads
// served here (this daemon's view) and its changes refused with a 503.
func TestForwardingPoolsToTheLeader(t *testing.T) {
	t.Parallel()
	st, err := store.Open(t.Context(), testenv.RequirePostgres(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	leader := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Served", "leader")
		w.Header().Set("X-Got-Forwarded", r.Header.Get(ForwardedHeader))
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(leader.Close)
	ctx, now := t.Context(), time.Now()
	if err := st.Heartbeat(ctx, "D", leader.URL, now); err != nil {
		t.Fatal(err)
	}
	if ok, err := st.AcquireLease(ctx, loopsLease, "D", now, time.Hour); err != nil || !ok {
		t.Fatalf("D takes the loops' lease: %v, %v", ok, err)
	}
	local := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Served", "local")
		w.WriteHeader(http.StatusOK)
	})
	fwd := Forwarding{Self: "B", SandboxOf: api.New(api.Options{}).SandboxOf, HasSession: func(string) bool { return false },
		Holders: st, Heartbeat: time.Minute, Log: slog.New(slog.DiscardHandler), Counted: NewForwardedCounter()}
	h := fwd.Handler(local)
	serve := func(method, path string, hdr map[string]string) *httptest.ResponseRecorder {
		req := httptest.NewRequestWithContext(ctx, method, path, strings.NewReader(`{"min":1}`))
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	toLeader := []struct{ method, path string }{
		{"GET", "/v1/templates/py/pool"},
		{"PUT", "/v1/templates/py/pool"},
		{"DELETE", "/v1/templates/py/pool"},
		{"GET", "/v1/templates"},
		{"GET", "/v1/templates/py"},
		{"DELETE", "/v1/templates/py"},
	}
	for _, c := range toLeader {
		rec := serve(c.method, c.path, nil)
		if rec.Header().Get("X-Served") != "leader" || rec.Header().Get("X-Got-Forwarded") != "B" {
			t.Errorf("%s %s: served by %q (mark %q), want the leader with the mark B", c.method, c.path, rec.Header().Get("X-Served"), rec.Header().Get("X-Got-Forwarded"))
		}
	}
	if got := counted(t, fwd.Counted, "pool", "passed"); got != float64(len(toLeader)) {
		t.Errorf("pool calls passed: counted %v, want %d", got, len(toLeader))
	}
	for _, c := range []struct {
		method, path string
		hdr          map[string]string
	}{
		{"POST", "/v1/templates", nil},                                            // a build: any daemon
		{"GET", "/v1/templates/py/builds/b1", nil},                                // not a pool's
		{"GET", "/v1/templatesx", nil},                                            // not a template
		{"GET", "/v1/sandboxes", nil},                                             // not a template
		{"GET", "/v1/templates/py/pool", map[string]string{ForwardedHeader: "D"}}, // forwarded once already
	} {
		if rec := serve(c.method, c.path, c.hdr); rec.Header().Get("X-Served") != "local" {
			t.Errorf("%s %s %v: served by %q, want here", c.method, c.path, c.hdr, rec.Header().Get("X-Served"))
		}
	}

	// The leader's connection breaks before it answers (it took the
	// call and died): a read is served here all the same, a change is
	// refused for the client to retry.
	hangup, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hangup.Close()
	go func() {
		for {
			c, err := hangup.Accept()
			if err != nil {
				return
			}
			_, _ = c.Read(make([]byte, 4096))
			c.Close()
		}
	}()
	if err := st.Heartbeat(ctx, "D", "http://"+hangup.Addr().String(), now); err != nil {
		t.Fatal(err)
	}
	if rec := serve("GET", "/v1/templates/py/pool", nil); rec.Code != http.StatusOK || rec.Header().Get("X-Served") != "local" {
		t.Errorf("read with the leader's connection broken: %d served by %q, want 200 here", rec.Code, rec.Header().Get("X-Served"))
	}
	if rec := serve("PUT", "/v1/templates/py/pool", nil); rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" {
		t.Errorf("change with the leader's connection broken: %d (Retry-After %q), want 503 with Retry-After", rec.Code, rec.Header().Get("Retry-After"))
	}
	if err := st.Heartbeat(ctx, "D", leader.URL, now); err != nil {
		t.Fatal(err)
	}

	// The leader cannot be dialled: a read is served here, a change is
	// refused for the client to retry.
	leader.Close()
	if rec := serve("GET", "/v1/templates/py/pool", nil); rec.Code != http.StatusOK || rec.Header().Get("X-Served") != "local" {
		t.Errorf("read with the leader down: %d served by %q, want 200 here", rec.Code, rec.Header().Get("X-Served"))
	}
	if got := counted(t, fwd.Counted, "pool", "local"); got != 2 {
		t.Errorf("pool reads served here as the leader did not answer: counted %v, want 2", got)
	}
	if rec := serve("PUT", "/v1/templates/py/pool", nil); rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" {
		t.Errorf("change with the leader down: %d (Retry-After %q), want 503 with Retry-After", rec.Code, rec.Header().Get("Retry-After"))
	}

	// B leads, then a lapsed lease names D: served here.
	if err := st.ReleaseLease(ctx, loopsLease, "D"); err != nil {
		t.Fatal(err)
	}
	if ok, err := st.AcquireLease(ctx, loopsLease, "B", now, time.Hour); err != nil || !ok {
		t.Fatalf("B takes the loops' lease: %v, %v", ok, err)
	}
	if rec := serve("GET", "/v1/templates/py/pool", nil); rec.Header().Get("X-Served") != "local" {
		t.Errorf("B leads: served by %q, want here", rec.Header().Get("X-Served"))
	}
	if err := st.ReleaseLease(ctx, loopsLease, "B"); err != nil {
		t.Fatal(err)
	}
	if ok, err := st.AcquireLease(ctx, loopsLease, "D", now.Add(-time.Hour), time.Minute); err != nil || !ok {
		t.Fatalf("D takes the loops' lease: %v, %v", ok, err)
	}
	if rec := serve("PUT", "/v1/templates/py/pool", nil); rec.Header().Get("X-Served") != "local" {
		t.Errorf("lease lapsed: served by %q, want here", rec.Header().Get("X-Served"))
	}
}
