// Package client is the Go SDK for the hotcell HTTP API: sandbox lifecycle,
// exec (buffered and streamed), files and archives.
//
// A Client is safe for concurrent use. Every method takes a context first;
// cancelling it aborts the request, including a stream that is being read.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/hotcell/hotcell/internal/clientconfig"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/redact"
)

// DefaultURL is the daemon's URL when neither --url nor HOTCELL_URL is set.
const DefaultURL = clientconfig.DefaultURL

// maxJSONResponse bounds how much of a JSON answer is decoded, so that a
// misbehaving server cannot make the client allocate without limit.
const maxJSONResponse = 64 << 20

// defaultTransport is shared by every Client that does not bring its own
// http.Client: keep-alive connections matter because an exec round trip is
// about a millisecond and a new TCP connection per call would dominate it.
var defaultTransport = func() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	// Agents run many execs in parallel against one daemon; the default of 2
	// idle connections per host would make most of them dial anew.
	t.MaxIdleConnsPerHost = 64
	t.IdleConnTimeout = 90 * time.Second
	return t
}()

// Client talks to one hotcell daemon.
type Client struct {
	base          *url.URL
	token         string
	hc            *http.Client
	userAgent     string
	streamIdle    time.Duration
	maxJSONAnswer int64
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient makes the Client send its requests with hc. hc should not
// set a Timeout: creates and streams legitimately take long; use contexts.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) { c.hc = hc }
}

// WithUserAgent sets the User-Agent header of every request.
func WithUserAgent(ua string) Option {
	return func(c *Client) { c.userAgent = ua }
}

// WithStreamIdleTimeout sets how long an exec stream may go without any
// line, keepalives included, before the Client gives up on it. The daemon
// sends keepalives, so silence this long means the connection is dead.
// Zero or less disables the check.
func WithStreamIdleTimeout(d time.Duration) Option {
	return func(c *Client) { c.streamIdle = d }
}

// New returns a Client for the daemon at baseURL (for example
// "http://127.0.0.1:8080") that authenticates with token.
func New(baseURL, token string, opts ...Option) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(baseURL, "/"))
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // its text repeats the URL, credentials and all
		}
		return nil, fmt.Errorf("parse hotcell url %q: %w", redact.URL(baseURL), err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("hotcell url %q: scheme must be http or https", redact.URL(baseURL))
	}
	if u.Host == "" {
		return nil, fmt.Errorf("hotcell url %q: no host", redact.URL(baseURL))
	}
	c := &Client{
		base:          u,
		token:         token,
		hc:            &http.Client{Transport: defaultTransport},
		userAgent:     "hotcell-go-client",
		streamIdle:    2 * time.Minute,
		maxJSONAnswer: maxJSONResponse,
	}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// FromEnv returns a Client configured the way the hotcell CLI is: the URL
// from HOTCELL_URL (default DefaultURL), the token from HOTCELL_TOKEN or
// else from the token file the daemon writes (see TokenPath).
func FromEnv(opts ...Option) (*Client, error) {
	return fromEnv(os.Getenv, opts...)
}

func fromEnv(getenv func(string) string, opts ...Option) (*Client, error) {
	s, err := clientconfig.Resolve(clientconfig.Flags{}, getenv)
	if err != nil {
		return nil, fmt.Errorf("hotcell token: %w", err)
	}
	return New(s.URL, s.Token, opts...)
}

// TokenPath is the token file FromEnv reads when HOTCELL_TOKEN is unset:
// $HOTCELL_DATA_DIR/token, or /var/lib/hotcell/token.
func TokenPath() string { return clientconfig.TokenPath(os.Getenv) }

// ReadTokenFile reads a token file as the daemon writes it: the token,
// perhaps followed by a newline.
func ReadTokenFile(path string) (string, error) { return clientconfig.ReadTokenFile(path, nil) }

// URL returns the daemon's base URL.
func (c *Client) URL() string { return c.base.String() }

// request describes one call.
type request struct {
	op          string // names the operation in errors
	method      string
	path        string // already escaped
	query       url.Values
	body        io.Reader
	contentType string
	noAuth      bool
}

func (c *Client) newRequest(ctx context.Context, r request) (*http.Request, error) {
	u := c.base.String() + r.path
	if len(r.query) > 0 {
		u += "?" + r.query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, r.method, u, r.body)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.op, err)
	}
	if r.contentType != "" {
		req.Header.Set("Content-Type", r.contentType)
	}
	if c.token != "" && !r.noAuth {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	req.Header.Set("User-Agent", c.userAgent)
	return req, nil
}

// do sends r and returns the response if its status is 2xx. Otherwise it
// decodes the error document into an *APIError and closes the body.
func (c *Client) do(ctx context.Context, r request) (*http.Response, error) {
	req, err := c.newRequest(ctx, r)
	if err != nil {
		return nil, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.op, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		apiErr := errdefs.Read(resp)
		drainClose(resp.Body)
		return nil, fmt.Errorf("%s: %w", r.op, apiErr)
	}
	return resp, nil
}

// doJSON sends in (if not nil) as JSON and decodes the answer into out (if
// not nil).
func (c *Client) doJSON(ctx context.Context, r request, in, out any) error {
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("%s: encode request: %w", r.op, err)
		}
		// A bytes.Reader lets net/http set Content-Length and replay the
		// body if it has to retry on a stale keep-alive connection.
		r.body = bytes.NewReader(data)
		r.contentType = "application/json"
	}
	resp, err := c.do(ctx, r)
	if err != nil {
		return err
	}
	defer drainClose(resp.Body)
	if out == nil {
		return nil
	}
	return c.decode(r.op, resp.Body, out)
}

func (c *Client) decode(op string, body io.Reader, out any) error {
	lr := &capReader{r: body, n: c.maxJSONAnswer}
	if err := json.NewDecoder(lr).Decode(out); err != nil {
		if lr.over {
			return fmt.Errorf("%s: response is larger than %d bytes: %w", op, c.maxJSONAnswer, ErrTooLarge)
		}
		return fmt.Errorf("%s: decode response: %w", op, err)
	}
	return nil
}

// capReader fails, rather than ending quietly, when a response goes past
// its bound, so a truncated document is not mistaken for a short one.
type capReader struct {
	r    io.Reader
	n    int64
	over bool
}

var errResponseTooLarge = errors.New("response too large")

func (c *capReader) Read(p []byte) (int, error) {
	if c.n <= 0 {
		c.over = true
		return 0, errResponseTooLarge
	}
	if int64(len(p)) > c.n {
		p = p[:c.n]
	}
	n, err := c.r.Read(p)
	c.n -= int64(n)
	return n, err
}

// drainClose reads a little of what is left so the connection can go back
// to the keep-alive pool, then closes.
func drainClose(rc io.ReadCloser) {
	_, _ = io.CopyN(io.Discard, rc, 64<<10)
	_ = rc.Close()
}

func sandboxPath(id string, rest string) string {
	return "/v1/sandboxes/" + url.PathEscape(id) + rest
}

func checkID(op, id string) error {
	if id == "" {
		return fmt.Errorf("%s: sandbox id is empty: %w", op, ErrInvalidArgument)
	}
	return nil
}

// IsUnreachable reports whether err means the daemon could not be
// connected to at all (nothing listening, unknown host, no route), as
// opposed to an error the daemon answered with.
func IsUnreachable(err error) bool {
	var apiErr *APIError
	if errors.As(err, &apiErr) {
		return false
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "dial" {
		return true
	}
	var dnsErr *net.DNSError
	return errors.As(err, &dnsErr)
}
