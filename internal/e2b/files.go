package e2b

// envd's plain HTTP /files (e2b-protocol.md §6): downloads (GET, gzip when
// the client asks), uploads (POST: multipart with full-path filenames, or
// a raw octet-stream body, gzip-encoded or not) and the signed URLs of
// sbx.uploadUrl / sbx.downloadUrl. Bodies stream client → daemon → agent
// → file and back; nothing holds a whole file. The agent writes each file
// atomically (temp file + rename) and gives it to the caller's user.
//
// Credentials: the sandbox's envd access token in X-Access-Token, or, when
// the header is absent, a signature over the path, the operation (read
// for GET, write for POST), the username and that token, unexpired. A
// header that is present must be right, whatever the signature says.
// Errors are E2B's JSON {"code":<status>,"message":...}; the SDK maps
// them by status (404 FileNotFoundError, 400 InvalidArgumentError, 401
// AuthenticationError, 507 NotEnoughSpaceError).

import (
	"compress/gzip"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/hotcell/hotcell/internal/errdefs"
)

const (
	opRead  = "read"
	opWrite = "write"
	// maxUploadParts bounds the files of one multipart upload.
	maxUploadParts = 10_000
)

// filesRoutes registers envd's plain HTTP /files: uploads, downloads, signed URLs (e2b-protocol.md §6).
func (s *Server) filesRoutes() {
	s.envd("GET /files", s.filesHandler(opRead, s.download))
	s.envd("POST /files", s.filesHandler(opWrite, s.upload))
}

// filesHandler checks a /files call's credentials and writes its errors
// in E2B's shape.
func (s *Server) filesHandler(op string, h func(w http.ResponseWriter, r *http.Request) error) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		err := s.filesAuth(r, op, time.Now())
		if err == nil {
			err = h(w, r)
		}
		if err != nil {
			if errors.Is(err, errAnswered) {
				return nil
			}
			s.logFailure(r, err)
			writeAPIError(w, filesError(err))
		}
		return nil
	}
}

// errAnswered is returned by a handler that already wrote its answer.
var errAnswered = errors.New("answered")

// filesError maps a failed file operation to E2B's statuses: a full disk
// (the agent's too_large from ENOSPC) is 507.
func filesError(err error) error {
	if errors.Is(err, errdefs.ErrTooLarge) && !errors.Is(err, errdefs.ErrInsufficientStorage) {
		// Only the one class, so that the status is 507, not 413.
		return fmt.Errorf("%s: %w", err.Error(), errdefs.ErrInsufficientStorage)
	}
	return err
}

// filesAuth accepts the sandbox's access token, or a valid signature for
// this path, operation and user when there is no token header.
func (s *Server) filesAuth(r *http.Request, op string, now time.Time) error {
	id := SandboxID(r)
	if tok := r.Header.Get("X-Access-Token"); tok != "" {
		if !s.EnvdTokenOK(id, tok) {
			return fmt.Errorf("wrong X-Access-Token for sandbox %s: %w", id, errdefs.ErrUnauthenticated)
		}
		return nil
	}
	q := r.URL.Query()
	sig := q.Get("signature")
	if sig == "" {
		return fmt.Errorf("missing X-Access-Token header or signature parameter: %w", errdefs.ErrUnauthenticated)
	}
	if id == "" || len(s.opts.Secret) == 0 {
		return fmt.Errorf("invalid signature: %w", errdefs.ErrUnauthenticated)
	}
	return verifySignature(s.EnvdToken(id), q.Get("path"), op, q.Get("username"), sig, q.Get("signature_expiration"), q.Has("signature_expiration"), now)
}

// signature is the SDK's: "v1_" and the unpadded standard base64 of
// sha256("<path>:<operation>:<user>:<token>[:<expiration>]").
func signature(token, p, op, user string, exp *int64) string {
	raw := p + ":" + op + ":" + user + ":" + token
	if exp != nil {
		raw += ":" + strconv.FormatInt(*exp, 10)
	}
	sum := sha256.Sum256([]byte(raw))
	return "v1_" + strings.TrimRight(base64.StdEncoding.EncodeToString(sum[:]), "=")
}

// verifySignature checks a signed URL's signature (constant time) and its
// expiration (unix seconds), as envd does.
func verifySignature(token, p, op, user, sig, expRaw string, hasExp bool, now time.Time) error {
	var exp *int64
	if hasExp {
		v, err := strconv.ParseInt(expRaw, 10, 64)
		if err != nil {
			return fmt.Errorf("signature_expiration %.32q is not a unix time: %w", expRaw, errdefs.ErrUnauthenticated)
		}
		exp = &v
	}
	want := signature(token, p, op, user, exp)
	if subtle.ConstantTimeCompare([]byte(want), []byte(sig)) != 1 {
		return fmt.Errorf("invalid signature for %s of this path: %w", op, errdefs.ErrUnauthenticated)
	}
	if exp != nil && *exp < now.Unix() {
		return fmt.Errorf("the signature expired at %s: %w", time.Unix(*exp, 0).UTC().Format(time.RFC3339), errdefs.ErrUnauthenticated)
	}
	return nil
}

// filesUser is the user of a /files call: the username parameter, or the
// default.
func (s *Server) filesUser(r *http.Request) (*fsCall, error) {
	name := r.URL.Query().Get("username")
	return s.fsBeginAs(r, name, name != "")
}

func (s *Server) download(w http.ResponseWriter, r *http.Request) error {
	c, err := s.filesUser(r)
	if err != nil {
		return err
	}
	p, err := c.resolve("path", r.URL.Query().Get("path"))
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, "http://agent/v1/files?"+url.Values{"path": {p}}.Encode(), nil)
	if err != nil {
		return err
	}
	resp, err := c.conn.Send(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	h := w.Header()
	h.Set("Vary", "Accept-Encoding")
	// The sandbox's bytes are served on the daemon's origin: never as
	// something a browser would render or run there (envd, on a host of
	// its own, types them by extension).
	h.Set("Content-Type", "application/octet-stream")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "sandbox")
	h.Set("Content-Disposition", "attachment")
	if acceptsGzip(r.Header.Get("Accept-Encoding")) {
		h.Set("Content-Encoding", "gzip")
		w.WriteHeader(http.StatusOK)
		gz, _ := gzip.NewWriterLevel(w, gzip.BestSpeed)
		if _, err := copyOut(w, gz, resp.Body); err != nil {
			s.logFailure(r, err)
			panic(http.ErrAbortHandler) // a short gzip stream must not pass for whole
		}
		if err := gz.Close(); err != nil {
			panic(http.ErrAbortHandler)
		}
		return errAnswered
	}
	if cl := resp.Header.Get("Content-Length"); cl != "" {
		h.Set("Content-Length", cl)
	}
	w.WriteHeader(http.StatusOK)
	if _, err := copyOut(w, w, resp.Body); err != nil {
		s.logFailure(r, err)
		panic(http.ErrAbortHandler)
	}
	return errAnswered
}

// copyOut copies src to dst (w itself, or a writer on it) under a write
// deadline per chunk, so a client that stops reading frees the call.
func copyOut(w http.ResponseWriter, dst io.Writer, src io.Reader) (int64, error) {
	rc := http.NewResponseController(w)
	buf := make([]byte, 64<<10)
	var n int64
	for {
		k, rerr := src.Read(buf)
		if k > 0 {
			_ = rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
			if _, err := dst.Write(buf[:k]); err != nil {
				return n, err
			}
			n += int64(k)
		}
		if rerr == io.EOF {
			_ = rc.SetWriteDeadline(time.Time{})
			return n, nil
		}
		if rerr != nil {
			return n, rerr
		}
	}
}

// acceptsGzip reports whether an Accept-Encoding value allows gzip.
func acceptsGzip(v string) bool {
	for part := range strings.SplitSeq(v, ",") {
		name, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if !strings.EqualFold(strings.TrimSpace(name), "gzip") {
			continue
		}
		if qv, ok := strings.CutPrefix(strings.ReplaceAll(params, " ", ""), "q="); ok {
			if f, err := strconv.ParseFloat(qv, 64); err == nil && f == 0 {
				return false
			}
		}
		return true
	}
	return false
}

// writtenFile is an element of the upload's answer.
type writtenFile struct {
	Path     string            `json:"path"`
	Name     string            `json:"name"`
	Type     string            `json:"type"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// metadataHeaders reads an upload's X-Metadata-<key>: <value> headers, as
// envd does: keys lower-cased (HTTP header names have no case), the first
// value of each. The agent keeps them with the file (extended attributes
// user.e2b.<key>) and checks their form.
func metadataHeaders(h http.Header) map[string]string {
	var m map[string]string
	for name, vs := range h {
		key, ok := strings.CutPrefix(http.CanonicalHeaderKey(name), "X-Metadata-")
		if !ok || key == "" || len(vs) == 0 {
			continue
		}
		if m == nil {
			m = map[string]string{}
		}
		m[strings.ToLower(key)] = vs[0]
	}
	return m
}

func (s *Server) upload(w http.ResponseWriter, r *http.Request) error {
	c, err := s.filesUser(r)
	if err != nil {
		return err
	}
	c.metadata = metadataHeaders(r.Header)
	body := io.Reader(r.Body)
	switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
	case "gzip":
		gz, err := gzip.NewReader(r.Body)
		if err != nil {
			return errdefs.Invalid("body", "Content-Encoding gzip: %v", err)
		}
		defer gz.Close()
		body = gz
	default:
		return errdefs.Invalid("Content-Encoding", "%.32q is not supported (gzip or none)", enc)
	}
	q := r.URL.Query()
	mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	var out []writtenFile
	switch {
	case mt == "application/octet-stream":
		if q.Get("path") == "" {
			return errdefs.Invalid("path", "query parameter is required for an application/octet-stream upload")
		}
		f, err := s.writeOne(r, c, q.Get("path"), body, nil)
		if err != nil {
			return err
		}
		out = append(out, f)
	case strings.HasPrefix(mt, "multipart/"):
		if params["boundary"] == "" {
			return errdefs.Invalid("Content-Type", "multipart without a boundary")
		}
		mr := multipart.NewReader(body, params["boundary"])
		seen := map[string]bool{}
		for {
			part, err := mr.NextPart()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return errdefs.Invalid("body", "read multipart: %v", err)
			}
			target, ok, err := uploadTarget(part, q.Get("path"))
			if err != nil {
				part.Close()
				return err
			}
			if !ok {
				part.Close()
				continue
			}
			if len(out) >= maxUploadParts {
				part.Close()
				return errdefs.Invalid("body", "more than %d files in one upload", maxUploadParts)
			}
			f, err := s.writeOne(r, c, target, part, seen)
			part.Close()
			if err != nil {
				return err
			}
			out = append(out, f)
		}
		if len(out) == 0 {
			return errdefs.Invalid("body", "no part named file in the multipart upload")
		}
	default:
		return errdefs.Invalid("Content-Type", "%.64q: want multipart/form-data or application/octet-stream", r.Header.Get("Content-Type"))
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_ = json.NewEncoder(w).Encode(out)
	return errAnswered
}

// uploadTarget is where a multipart part goes: the path parameter when the
// upload has one, else the part's filename taken whole (the SDK puts the
// full target path there, slashes and all; it is not reduced to a base
// name). Parts not named "file" are skipped.
func uploadTarget(part *multipart.Part, pathParam string) (string, bool, error) {
	if part.FormName() != "file" {
		return "", false, nil
	}
	if pathParam != "" {
		return pathParam, true, nil
	}
	name, err := partFilename(part.Header.Get("Content-Disposition"))
	if err != nil {
		return "", false, err
	}
	return name, true, nil
}

// partFilename reads the filename of a part's Content-Disposition as it
// was sent: multipart.Part.FileName would keep only its last element.
func partFilename(cd string) (string, error) {
	_, params, err := mime.ParseMediaType(cd)
	if err != nil {
		return "", errdefs.Invalid("body", "a part's Content-Disposition does not parse: %v", err)
	}
	name := params["filename"]
	if name == "" {
		return "", errdefs.Invalid("body", "a file part has no filename and the upload no path parameter")
	}
	return name, nil
}

// writeOne streams one file to the agent, owned by the call's user.
func (s *Server) writeOne(r *http.Request, c *fsCall, target string, body io.Reader, seen map[string]bool) (writtenFile, error) {
	p, err := c.resolve("path", target)
	if err != nil {
		return writtenFile{}, err
	}
	if seen != nil {
		if seen[p] {
			return writtenFile{}, errdefs.Invalid("body", "%s is written twice in one upload", p)
		}
		seen[p] = true
	}
	q := c.owner(url.Values{"path": {p}})
	if c.metadata != nil {
		b, err := json.Marshal(c.metadata)
		if err != nil {
			return writtenFile{}, err
		}
		q.Set("metadata", string(b))
	}
	req, err := http.NewRequestWithContext(r.Context(), http.MethodPut, "http://agent/v1/files?"+q.Encode(), body)
	if err != nil {
		return writtenFile{}, err
	}
	req.ContentLength = -1
	if body == r.Body && r.ContentLength >= 0 {
		req.ContentLength = r.ContentLength
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := c.conn.Send(req)
	if err != nil {
		return writtenFile{}, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	return writtenFile{Path: p, Name: path.Base(p), Type: "file", Metadata: c.metadata}, nil
}
