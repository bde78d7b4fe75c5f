package kubernetes

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/distribution/reference"

	"github.com/hotcell/hotcell/internal/errdefs"
)

// A registry is where the driver keeps the images it makes (snapshots,
// templates saved from a sandbox): a pod's root filesystem is the node's,
// so the driver pushes it to a registry the nodes pull from, through the
// OCI distribution API (https://github.com/opencontainers/distribution-spec).
type registry struct {
	// name is the registry as image references name it, as the nodes
	// pull: host[:port] with an optional path prefix.
	name string
	// base is the endpoint the driver pushes to: scheme://host[:port].
	base   *url.URL
	prefix string // name's path, "" or "a/b/"
	client *http.Client
	// creds are the user and password the registry takes (nil: none,
	// or "" and "" from it).
	creds func(ctx context.Context) (user, password string, err error)
	// authz is the Authorization that a repository's last call took, by
	// the repository's path.
	authMu sync.Mutex
	authz  map[string]string
}

// Media types of what the driver pushes.
const (
	mediaManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaConfig   = "application/vnd.oci.image.config.v1+json"
	mediaLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
)

// newRegistry checks a registry's name (as nodes pull it) and push URL
// (empty: https://host of the name).
func newRegistry(name, pushURL string) (*registry, error) {
	name = strings.TrimSuffix(name, "/")
	host, prefix, _ := strings.Cut(name, "/")
	if host == "" || strings.Contains(name, "://") {
		return nil, errdefs.Invalid("kubernetes_registry", "%q is not a registry as image references name it (host[:port][/path])", name)
	}
	if _, err := reference.ParseNormalizedNamed(name + "/x"); err != nil {
		return nil, errdefs.Invalid("kubernetes_registry", "%q is not a registry as image references name it: %v", name, err)
	}
	if pushURL == "" {
		pushURL = "https://" + host
	}
	u, err := url.Parse(pushURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
		return nil, errdefs.Invalid("kubernetes_registry_url", "%q is not http(s)://host[:port]", pushURL)
	}
	u.Path = ""
	if prefix != "" {
		prefix += "/"
	}
	return &registry{name: name, base: u, prefix: prefix, client: &http.Client{}, authz: map[string]string{}}, nil
}

// ref is the reference the nodes pull repo:tag by.
func (r *registry) ref(repo, tag string) string { return r.name + "/" + repo + ":" + tag }

func (r *registry) url(repo, rest string) string {
	return r.base.String() + "/v2/" + r.prefix + repo + "/" + rest
}

// imageConfig is the part of an OCI image config the driver writes.
type imageConfig struct {
	Created      time.Time `json:"created"`
	Architecture string    `json:"architecture"`
	OS           string    `json:"os"`
	Config       struct {
		Env    []string          `json:"Env,omitempty"`
		Labels map[string]string `json:"Labels,omitempty"`
	} `json:"config"`
	RootFS struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
	History []history `json:"history"`
}

// history is an entry of an image config's history: what made a layer.
type history struct {
	Created   time.Time `json:"created"`
	CreatedBy string    `json:"created_by"`
}

type descriptor struct {
	MediaType string `json:"mediaType"`
	Digest    string `json:"digest"`
	Size      int64  `json:"size"`
}

type manifest struct {
	SchemaVersion int               `json:"schemaVersion"`
	MediaType     string            `json:"mediaType"`
	Config        descriptor        `json:"config"`
	Layers        []descriptor      `json:"layers"`
	Annotations   map[string]string `json:"annotations,omitempty"`
}

// pushImage pushes an image, repo:tag, whose last layer is the tar stream
// layer (compressed here, at most max bytes of tar), over base's layers
// when base is not nil, and whose config is cfg with the diff ids (and
// base's history) filled in.
func (r *registry) pushImage(ctx context.Context, repo, tag string, layer io.Reader, max int64, cfg imageConfig, base *baseImage) error {
	tarSum, end := sha256.New(), &tail{}
	lr := &limitedReader{r: io.TeeReader(layer, io.MultiWriter(tarSum, end)), left: max}
	blob, err := r.uploadStream(ctx, repo, func(w io.Writer) error {
		zw, err := gzip.NewWriterLevel(w, gzip.BestSpeed)
		if err != nil {
			return err
		}
		if err := copyTar(zw, lr, end); err != nil {
			return err
		}
		return zw.Close()
	})
	if err != nil {
		return err
	}
	blob.MediaType = mediaLayer
	layers := []descriptor{blob}
	cfg.RootFS.Type = "layers"
	cfg.RootFS.DiffIDs = []string{digestOf(tarSum)}
	if base != nil {
		for _, l := range base.layers {
			if base.repo != repo {
				if err := r.mountBlob(ctx, repo, base.repo, l.Digest); err != nil {
					return err
				}
			}
		}
		layers = append(slices.Clone(base.layers), blob)
		cfg.RootFS.DiffIDs = append(slices.Clone(base.config.RootFS.DiffIDs), cfg.RootFS.DiffIDs...)
		cfg.History = append(slices.Clone(base.config.History), cfg.History...)
	}
	data, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	conf, err := r.uploadStream(ctx, repo, func(w io.Writer) error { _, err := w.Write(data); return err })
	if err != nil {
		return err
	}
	conf.MediaType = mediaConfig
	m, err := json.Marshal(manifest{SchemaVersion: 2, MediaType: mediaManifest, Config: conf, Layers: layers, Annotations: cfg.Config.Labels})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, r.url(repo, "manifests/"+tag), bytes.NewReader(m))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", mediaManifest)
	return r.expect(req, "push the manifest of "+r.ref(repo, tag), http.StatusCreated)
}

// copyTar copies a tar stream, reading it as a tar on the way: a stream
// cut short (the box's agent may end it anywhere) must not become an
// image. end sees every byte of src.
func copyTar(dst io.Writer, src io.Reader, end *tail) error {
	tr := tar.NewReader(io.TeeReader(src, dst))
	for {
		_, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err == nil {
			_, err = io.Copy(io.Discard, tr)
		}
		if err != nil {
			return fmt.Errorf("read the root filesystem's tar: %w", err)
		}
	}
	return readEnd(dst, src, end)
}

// readEnd copies to dst what follows a tar's last entry in src (end sees
// every byte of src) and checks the tar ended as a whole one does: the
// box's agent may end its stream anywhere.
func readEnd(dst io.Writer, src io.Reader, end *tail) error {
	if _, err := io.Copy(dst, src); err != nil {
		return fmt.Errorf("copy the end of the root filesystem's tar: %w", err)
	}
	if !end.tarEnd() {
		return fmt.Errorf("the root filesystem's tar ended before its end-of-archive blocks: %w", errdefs.ErrUnavailable)
	}
	return nil
}

// tail keeps the last 1 KiB written to it.
type tail struct {
	buf [1024]byte
	n   int64
}

func (t *tail) Write(p []byte) (int, error) {
	if len(p) >= len(t.buf) {
		copy(t.buf[:], p[len(p)-len(t.buf):])
	} else {
		copy(t.buf[:], t.buf[len(p):])
		copy(t.buf[len(t.buf)-len(p):], p)
	}
	t.n += int64(len(p))
	return len(p), nil
}

// tarEnd says whether what was written ends as a whole tar does: two
// zero blocks, at a block's end.
func (t *tail) tarEnd() bool {
	if t.n < int64(len(t.buf)) || t.n%512 != 0 {
		return false
	}
	for _, b := range t.buf {
		if b != 0 {
			return false
		}
	}
	return true
}

// limitedReader fails, rather than ends, past its bound: an image cut
// short must not be pushed as if whole.
type limitedReader struct {
	r    io.Reader
	left int64
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.left <= 0 {
		// One byte more says whether the stream goes on.
		var one [1]byte
		n, err := l.r.Read(one[:])
		if n > 0 {
			return 0, fmt.Errorf("the root filesystem is larger than the driver's bound on an image: %w", errdefs.ErrInvalidArgument)
		}
		return 0, err
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	return n, err
}

func digestOf(h hash.Hash) string { return "sha256:" + hex.EncodeToString(h.Sum(nil)) }

// uploadChunk is the most of a blob one PATCH carries. The chunk is read
// whole before it is sent, so a stream that fails fails between PATCHes,
// where the upload's last Location still names it and it can be dropped.
const uploadChunk = 16 << 20

// uploadStream uploads one blob that write produces, in PATCHes of at most
// uploadChunk, and returns its digest and size. A failed upload is dropped.
func (r *registry) uploadStream(ctx context.Context, repo string, write func(io.Writer) error) (d descriptor, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.url(repo, "blobs/uploads/"), nil)
	if err != nil {
		return descriptor{}, err
	}
	what := "upload to " + r.name + "/" + repo
	loc, err := r.location(req, "start an "+what)
	if err != nil {
		return descriptor{}, err
	}
	defer func() {
		if err != nil {
			r.cancelUpload(ctx, loc)
		}
	}()
	pr, pw := io.Pipe()
	defer pr.CloseWithError(errUploadEnded) // the writer stops if we do
	sum := sha256.New()
	go func() { pw.CloseWithError(write(io.MultiWriter(pw, sum))) }()
	buf := make([]byte, uploadChunk)
	var size int64
	for {
		n, rerr := io.ReadFull(pr, buf)
		if n > 0 {
			req, err := http.NewRequestWithContext(ctx, http.MethodPatch, loc, bytes.NewReader(buf[:n]))
			if err != nil {
				return descriptor{}, err
			}
			req.Header.Set("Content-Type", "application/octet-stream")
			req.Header.Set("Content-Range", fmt.Sprintf("%d-%d", size, size+int64(n)-1))
			next, err := r.location(req, what)
			if err != nil {
				return descriptor{}, err
			}
			loc, size = next, size+int64(n)
		}
		if errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF) {
			break
		}
		if rerr != nil {
			return descriptor{}, rerr
		}
	}
	d = descriptor{Digest: digestOf(sum), Size: size}
	u, err := url.Parse(loc)
	if err != nil {
		return descriptor{}, fmt.Errorf("%s: the registry's location %q: %w", what, loc, err)
	}
	q := u.Query()
	q.Set("digest", d.Digest)
	u.RawQuery = q.Encode()
	req, err = http.NewRequestWithContext(ctx, http.MethodPut, u.String(), nil)
	if err != nil {
		return descriptor{}, err
	}
	return d, r.expect(req, "finish the "+what, http.StatusCreated)
}

// cancelUpload drops an upload that failed, so the registry does not keep
// its part until its purge; it is best effort.
func (r *registry) cancelUpload(ctx context.Context, loc string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, loc, nil)
	if err != nil {
		return
	}
	if resp, err := r.do(req); err == nil {
		resp.Body.Close()
	}
}

// errUploadEnded is what the stream's writer meets once the registry
// stopped reading it.
var errUploadEnded = errors.New("the upload ended")

// location sends req, expecting 202 Accepted and a Location, which it
// returns absolute.
func (r *registry) location(req *http.Request, what string) (string, error) {
	resp, err := r.do(req)
	if err != nil {
		return "", r.unreachable(what, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return "", r.answer(what, resp)
	}
	loc, err := resp.Request.URL.Parse(resp.Header.Get("Location"))
	if err != nil || resp.Header.Get("Location") == "" {
		return "", fmt.Errorf("%s: the registry answered no usable Location (%q): %w", what, resp.Header.Get("Location"), errdefs.ErrUnavailable)
	}
	return loc.String(), nil
}

// expect sends req and wants status.
func (r *registry) expect(req *http.Request, what string, status int) error {
	resp, err := r.do(req)
	if err != nil {
		return r.unreachable(what, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != status {
		return r.answer(what, resp)
	}
	return nil
}

func (r *registry) unreachable(what string, err error) error {
	if errors.Is(err, errdefs.ErrInvalidArgument) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w", what, err)
	}
	return fmt.Errorf("%s: the registry at %s did not answer (is it up, and is kubernetes_registry_url right?): %w", what, r.base, errors.Join(errdefs.ErrUnavailable, err))
}

// answer is the error of an unexpected registry answer, with the
// registry's own words (its errors document).
func (r *registry) answer(what string, resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	var doc struct {
		Errors []struct{ Code, Message string } `json:"errors"`
	}
	msg := strings.TrimSpace(string(body))
	if json.Unmarshal(body, &doc) == nil && len(doc.Errors) > 0 {
		var parts []string
		for _, e := range doc.Errors {
			parts = append(parts, e.Code+": "+e.Message)
		}
		msg = strings.Join(parts, "; ")
	}
	kind := errdefs.ErrUnavailable
	switch resp.StatusCode {
	case http.StatusNotFound:
		kind = errdefs.ErrNotFound
	case http.StatusUnauthorized, http.StatusForbidden:
		msg += " (the registry wants credentials: name a kubernetes.io/dockerconfigjson Secret holding them in kubernetes_registry_secret)"
	case http.StatusMethodNotAllowed:
		msg += " (a registry refuses deletes unless its storage allows them: storage.delete.enabled)"
	}
	return fmt.Errorf("%s: the registry answered %s: %s: %w", what, resp.Status, msg, kind)
}

// manifestDigest returns the digest of repo:tag's manifest; a missing one
// is ErrNotFound.
func (r *registry) manifestDigest(ctx context.Context, repo, tag string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, r.url(repo, "manifests/"+tag), nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Accept", mediaManifest)
	resp, err := r.do(req)
	what := "look up " + r.ref(repo, tag)
	if err != nil {
		return "", r.unreachable(what, err)
	}
	resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return "", fmt.Errorf("image %s is not in the registry: %w", r.ref(repo, tag), errdefs.ErrNotFound)
	case resp.StatusCode != http.StatusOK:
		return "", r.answer(what, resp)
	}
	d := resp.Header.Get("Docker-Content-Digest")
	if !strings.HasPrefix(d, "sha256:") {
		return "", fmt.Errorf("%s: the registry answered no digest: %w", what, errdefs.ErrUnavailable)
	}
	return d, nil
}

// deleteImage removes repo:tag's manifest; a missing one is not an error.
// The layers stay until the registry's garbage collection.
func (r *registry) deleteImage(ctx context.Context, repo, tag string) error {
	d, err := r.manifestDigest(ctx, repo, tag)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, r.url(repo, "manifests/"+d), nil)
	if err != nil {
		return err
	}
	err = r.expect(req, "delete "+r.ref(repo, tag), http.StatusAccepted)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil
	}
	return err
}

// do sends req with the Authorization its repository took last; a 401
// is answered once with the registry's credentials as its challenge asks
// (Basic, or a Bearer token from the challenge's realm).
func (r *registry) do(req *http.Request) (*http.Response, error) {
	key := repoOf(req.URL.Path)
	r.authMu.Lock()
	authz := r.authz[key]
	r.authMu.Unlock()
	if authz != "" {
		req.Header.Set("Authorization", authz)
	}
	resp, err := r.client.Do(req)
	if err != nil || resp.StatusCode != http.StatusUnauthorized || r.creds == nil {
		return resp, err
	}
	if req.Body != nil && req.GetBody == nil {
		return resp, nil // a stream cannot be sent again
	}
	challenge := resp.Header.Get("WWW-Authenticate")
	authz, aerr := r.authorize(req.Context(), challenge)
	if aerr != nil || authz == "" {
		resp.Body.Close()
		if aerr == nil {
			aerr = fmt.Errorf("the registry asks for %q, which the driver cannot answer", challenge)
		}
		return nil, fmt.Errorf("authenticate to %s: %w: %w", r.name, aerr, errdefs.ErrUnavailable)
	}
	resp.Body.Close()
	retry := req.Clone(req.Context())
	if req.GetBody != nil {
		if retry.Body, err = req.GetBody(); err != nil {
			return nil, err
		}
	}
	retry.Header.Set("Authorization", authz)
	r.authMu.Lock()
	r.authz[key] = authz
	r.authMu.Unlock()
	return r.client.Do(retry)
}

// repoOf is the repository a registry URL path is of.
func repoOf(p string) string {
	p = strings.TrimPrefix(p, "/v2/")
	for _, sep := range []string{"/blobs/", "/manifests/"} {
		if i := strings.Index(p, sep); i >= 0 {
			return p[:i]
		}
	}
	return p
}

// authorize answers a WWW-Authenticate challenge with the credentials.
func (r *registry) authorize(ctx context.Context, challenge string) (string, error) {
	scheme, params := parseChallenge(challenge)
	user, password, err := r.creds(ctx)
	if err != nil {
		return "", err
	}
	switch strings.ToLower(scheme) {
	case "basic":
		if user == "" && password == "" {
			return "", errors.New("the registry wants a user and a password, and kubernetes_registry_secret gives none")
		}
		req := &http.Request{Header: http.Header{}}
		req.SetBasicAuth(user, password)
		return req.Header.Get("Authorization"), nil
	case "bearer":
		realm, err := url.Parse(params["realm"])
		if err != nil || (realm.Scheme != "https" && realm.Scheme != "http") {
			return "", fmt.Errorf("the registry's token realm %q is not a URL", params["realm"])
		}
		q := realm.Query()
		for _, k := range []string{"service", "scope"} {
			if v := params[k]; v != "" {
				q.Set(k, v)
			}
		}
		realm.RawQuery = q.Encode()
		treq, err := http.NewRequestWithContext(ctx, http.MethodGet, realm.String(), nil)
		if err != nil {
			return "", err
		}
		if user != "" || password != "" {
			treq.SetBasicAuth(user, password)
		}
		resp, err := r.client.Do(treq)
		if err != nil {
			return "", fmt.Errorf("get a token from %s: %w", realm.Host, err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return "", fmt.Errorf("get a token from %s: %s", realm.Host, resp.Status)
		}
		var tok struct {
			Token       string `json:"token"`
			AccessToken string `json:"access_token"`
		}
		if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&tok); err != nil {
			return "", fmt.Errorf("read the token from %s: %w", realm.Host, err)
		}
		if tok.Token == "" {
			tok.Token = tok.AccessToken
		}
		if tok.Token == "" {
			return "", fmt.Errorf("%s answered no token", realm.Host)
		}
		return "Bearer " + tok.Token, nil
	}
	return "", nil
}

// parseChallenge reads `Scheme k="v", k2="v2"`.
func parseChallenge(h string) (string, map[string]string) {
	scheme, rest, _ := strings.Cut(strings.TrimSpace(h), " ")
	params := map[string]string{}
	for rest = strings.TrimSpace(rest); rest != ""; {
		k, after, ok := strings.Cut(rest, "=")
		if !ok {
			break
		}
		k = strings.ToLower(strings.TrimSpace(k))
		var v string
		if strings.HasPrefix(after, `"`) {
			end := strings.Index(after[1:], `"`)
			if end < 0 {
				break
			}
			v, after = after[1:1+end], after[2+end:]
		} else {
			v, after, _ = strings.Cut(after, ",")
			after = "," + after
		}
		params[k] = v
		after = strings.TrimSpace(after)
		rest = strings.TrimSpace(strings.TrimPrefix(after, ","))
	}
	return scheme, params
}
