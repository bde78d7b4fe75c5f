package e2b

// The control plane (e2b-protocol.md §2): E2B sandboxes are ordinary
// hotcell sandboxes, so hotcell's own API sees and manages them too.
//
//   - templateID → image: an id in Options.Templates is that image; a
//     hotcell template's name is that template (its latest version: image,
//     defaults under the request's fields, workspace seed); "base" is the
//     daemon's default image; any other id is an image name.
//   - metadata → labels (the same rules; list filters are label filters).
//     Labels under labelPrefix are hotcell's own bookkeeping, hidden from
//     metadata and refused in it.
//   - envVars → env.
//   - timeout → the maximum lifetime, counted from when the sandbox is
//     ready: E2B kills a sandbox `timeout` seconds after create unless it is
//     extended (setTimeout, connect). autoPause makes the lifetime action a
//     pause instead of a destroy. A paused sandbox has no lifetime: it stays
//     until it is connected to (resumed) or killed, as on E2B.
//   - allow_internet_access / network.allowOut / network.denyOut → the
//     egress mode: open, none, or an allowlist.
//   - network.allowPublicTraffic (E2B's default: true) → whether the
//     sandbox's ports answer previews by host name without a credential
//     (docs/e2b.md, docs/security.md).
//
// What hotcell cannot do is refused with a 400 naming the field: mcp, iam,
// volumeMounts, autoResume, network rules, egress proxies, host masks,
// HTTPS ports and single denied destinations.

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hotcell/hotcell/internal/cmdspec"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/images"
	"github.com/hotcell/hotcell/internal/labels"
	"github.com/hotcell/hotcell/internal/sandbox"
	"github.com/hotcell/hotcell/internal/wire"
)

const (
	// EnvdPort is envd's port: the SDK's default envd URL is
	// https://49983-<id>.<domain>, which hotcell's preview proxy hands to
	// this package's handler.
	EnvdPort = 49983
	// SandboxIDHeader names the sandbox of an envd request.
	SandboxIDHeader = "E2b-Sandbox-Id"

	// labelPrefix starts the labels the E2B front keeps on a sandbox.
	labelPrefix = "e2b.hotcell/"
	// LabelTemplate records the template id a sandbox was made from, so
	// that an alias reads back as itself.
	LabelTemplate = labelPrefix + "template"
	// LabelPublicTraffic, "true", says every port of the sandbox answers
	// previews by host name without a credential (E2B's
	// network.allowPublicTraffic, on by default). The preview proxy reads
	// it.
	LabelPublicTraffic = labelPrefix + "public-traffic"

	// defaultTimeout is E2B's: a sandbox created or connected to without a
	// timeout lives 300 s.
	defaultTimeout = 300
	// maxTimeout bounds a timeout: 30 days.
	maxTimeout = 30 * 24 * 3600
	// maxControlBody bounds a control-plane request body.
	maxControlBody = 1 << 20
	// listLimit is the default and largest page of GET /v2/sandboxes.
	listLimit = 100
	// clientID is the legacy clientID field E2B still requires.
	clientID = "hotcell"
)

// noEnd is endAt of a sandbox that has no deadline (no lifetime, or paused):
// the SDK parses endAt as a date and has no way to say "never".
var noEnd = time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)

// controlRoutes registers the control plane: sandboxes, timeouts, pause, kill (e2b-protocol.md §2).
func (s *Server) controlRoutes() {
	s.control("POST /v2/sandboxes", s.createSandbox)
	s.control("POST /sandboxes", s.createSandbox)
	s.control("GET /v2/sandboxes", s.listSandboxes)
	s.control("POST /v2/sandboxes/{id}/connect", s.connectSandbox)
	s.control("GET /sandboxes/{id}", s.getSandbox)
	s.control("POST /sandboxes/{id}/timeout", s.setTimeout)
	s.control("POST /sandboxes/{id}/pause", s.pauseSandbox)
	s.control("DELETE /sandboxes/{id}", s.killSandbox)
	s.control("GET /sandboxes/{id}/metrics", s.getMetrics)
	s.control("GET /templates/aliases/{alias}", s.templateAlias)
}

// templateAlias answers Template.exists(name): 200 with the template id
// when a create from that id makes a sandbox from a known template (an
// e2b_templates id, a hotcell template, base), else 404. Image names,
// which a create also takes, are not templates here.
func (s *Server) templateAlias(w http.ResponseWriter, r *http.Request) error {
	alias := r.PathValue("alias")
	_, known := s.opts.Templates[alias]
	known = known || alias == "base"
	if !known && s.opts.HotcellTemplates != nil {
		_, ok, err := s.opts.HotcellTemplates(r.Context(), alias, &wire.CreateSandboxRequest{})
		if err != nil {
			return err
		}
		known = ok
	}
	if !known {
		return fmt.Errorf("template %q: %w", clip(alias), errdefs.ErrNotFound)
	}
	writeJSON(w, http.StatusOK, map[string]any{"templateID": alias, "public": false})
	return nil
}

// createRequest is NewSandbox / NewSandboxV2. Unknown fields are refused.
type createRequest struct {
	TemplateID          string            `json:"templateID"`
	Timeout             *int64            `json:"timeout"`
	Metadata            map[string]string `json:"metadata"`
	EnvVars             map[string]string `json:"envVars"`
	Secure              *bool             `json:"secure"`
	AllowInternetAccess *bool             `json:"allow_internet_access"`
	Network             *networkConfig    `json:"network"`
	AutoPause           *bool             `json:"autoPause"`
	AutoPauseMemory     *bool             `json:"autoPauseMemory"`
	AutoResume          *struct {
		Enabled bool `json:"enabled"`
	} `json:"autoResume"`
	MCP          json.RawMessage `json:"mcp"`
	IAM          json.RawMessage `json:"iam"`
	VolumeMounts json.RawMessage `json:"volumeMounts"`
}

// networkConfig is SandboxNetworkConfig.
type networkConfig struct {
	AllowOut           []string        `json:"allowOut,omitempty"`
	DenyOut            []string        `json:"denyOut,omitempty"`
	AllowPublicTraffic *bool           `json:"allowPublicTraffic,omitempty"`
	MaskRequestHost    *string         `json:"maskRequestHost,omitempty"`
	HTTPSPorts         []int           `json:"httpsPorts,omitempty"`
	EgressProxy        json.RawMessage `json:"egressProxy,omitempty"`
	Rules              json.RawMessage `json:"rules,omitempty"`
}

// sandboxJSON is E2B's Sandbox, the answer of create and connect.
type sandboxJSON struct {
	TemplateID      string  `json:"templateID"`
	SandboxID       string  `json:"sandboxID"`
	ClientID        string  `json:"clientID"`
	EnvdVersion     string  `json:"envdVersion"`
	EnvdAccessToken string  `json:"envdAccessToken,omitempty"`
	Domain          *string `json:"domain"`
}

// detailJSON is SandboxDetail (GET /sandboxes/{id}) and, without the
// access token, ListedSandbox (GET /v2/sandboxes).
type detailJSON struct {
	TemplateID          string            `json:"templateID"`
	SandboxID           string            `json:"sandboxID"`
	ClientID            string            `json:"clientID"`
	StartedAt           time.Time         `json:"startedAt"`
	EndAt               time.Time         `json:"endAt"`
	State               string            `json:"state"`
	CPUCount            int               `json:"cpuCount"`
	MemoryMB            int64             `json:"memoryMB"`
	DiskSizeMB          int64             `json:"diskSizeMB"`
	EnvdVersion         string            `json:"envdVersion"`
	EnvdAccessToken     string            `json:"envdAccessToken,omitempty"`
	Domain              *string           `json:"domain,omitempty"`
	Metadata            map[string]string `json:"metadata"`
	AllowInternetAccess *bool             `json:"allowInternetAccess,omitempty"`
	Network             *networkConfig    `json:"network,omitempty"`
	Lifecycle           *lifecycleJSON    `json:"lifecycle,omitempty"`
	VolumeMounts        []struct{}        `json:"volumeMounts"`
}

type lifecycleJSON struct {
	OnTimeout  string `json:"onTimeout"`
	AutoResume bool   `json:"autoResume"`
}

type timeoutRequest struct {
	Timeout *int64 `json:"timeout"`
	// Memory is connect's onResume:'reboot' (false) and pause's keepMemory;
	// hotcell's pause always keeps memory, which is what both read back.
	Memory *bool `json:"memory"`
}

func readBody(r *http.Request, v any, allowEmpty bool) error {
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, maxControlBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe):
			return fmt.Errorf("request body is larger than %d bytes: %w", maxControlBody, errdefs.ErrTooLarge)
		case errors.Is(err, io.EOF) && allowEmpty:
			return nil
		case errors.Is(err, io.EOF):
			return errdefs.Invalid("body", "a JSON object is required")
		}
		return errdefs.Invalid("body", "invalid JSON: %v", err)
	}
	if dec.More() {
		return errdefs.Invalid("body", "unexpected data after the JSON object")
	}
	return nil
}

// image is the image templateID means.
func (s *Server) image(templateID string) (string, error) {
	if img, ok := s.opts.Templates[templateID]; ok {
		return img, nil
	}
	if templateID == "base" {
		return s.opts.DefaultImage, nil
	}
	if templateID == CodeInterpreterTemplate {
		return images.CodeRef, nil
	}
	if !images.ValidRef(templateID) {
		return "", errdefs.Invalid("templateID", "%q is not a template this daemon knows (base, or one of its e2b_templates) nor an image reference like hotcell/base:latest", clip(templateID))
	}
	return templateID, nil
}

// templateOf is the template id sb reads back as.
func (s *Server) templateOf(sb wire.Sandbox) string {
	if t := sb.Labels[LabelTemplate]; t != "" {
		return t
	}
	for id, img := range s.opts.Templates {
		if img == sb.Image {
			return id
		}
	}
	if sb.Image == s.opts.DefaultImage {
		return "base"
	}
	return sb.Image
}

// timeoutSeconds checks a timeout field.
func timeoutSeconds(field string, t *int64) (int64, error) {
	if t == nil {
		return defaultTimeout, nil
	}
	if *t < 0 || *t > maxTimeout {
		return 0, errdefs.Invalid(field, "must be between 0 (no timeout) and %d seconds", maxTimeout)
	}
	return *t, nil
}

// toCreate maps an E2B create request onto hotcell's; it refuses what
// hotcell cannot do.
func (s *Server) toCreate(req createRequest) (wire.CreateSandboxRequest, int64, error) {
	var out wire.CreateSandboxRequest
	refuse := func(field, why string) (wire.CreateSandboxRequest, int64, error) {
		return out, 0, errdefs.Invalid(field, "%s", why)
	}
	if req.TemplateID == "" {
		return refuse("templateID", "is required (base is the daemon's default image)")
	}
	img, err := s.image(req.TemplateID)
	if err != nil {
		return out, 0, err
	}
	timeout, err := timeoutSeconds("timeout", req.Timeout)
	if err != nil {
		return out, 0, err
	}
	if isSet(req.MCP) {
		return refuse("mcp", "the MCP gateway is not supported by hotcell")
	}
	if isSet(req.IAM) {
		return refuse("iam", "IAM tokens are not supported by hotcell")
	}
	if isSet(req.VolumeMounts) && string(req.VolumeMounts) != "[]" {
		return refuse("volumeMounts", "volumes are not supported by hotcell's E2B API (a hotcell sandbox keeps /workspace on a disk of its own)")
	}
	if req.AutoResume != nil && req.AutoResume.Enabled {
		return refuse("autoResume", "hotcell does not resume a paused sandbox on traffic; Sandbox.connect resumes it")
	}
	if err := labels.Validate("metadata", req.Metadata); err != nil {
		return out, 0, err
	}
	for k := range req.Metadata {
		if strings.HasPrefix(k, labelPrefix) {
			return refuse("metadata."+k, "keys under "+labelPrefix+" are reserved")
		}
	}
	if err := cmdspec.Env("envVars", req.EnvVars); err != nil {
		return out, 0, err
	}
	egress, public, err := toEgress(req.AllowInternetAccess, req.Network)
	if err != nil {
		return out, 0, err
	}
	out.Image = img
	out.Env = req.EnvVars
	out.Egress = egress
	out.Labels = make(map[string]string, len(req.Metadata)+2)
	for k, v := range req.Metadata {
		out.Labels[k] = v
	}
	out.Labels[LabelTemplate] = req.TemplateID
	if public {
		out.Labels[LabelPublicTraffic] = "true"
	}
	if len(out.Labels) > labels.Max {
		return refuse("metadata", fmt.Sprintf("at most %d keys", labels.Max-2))
	}
	return out, timeout, labels.ValidateOne("templateID", LabelTemplate, req.TemplateID)
}

func isSet(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" }

// toEgress maps E2B's network settings onto an egress policy (nil: the
// daemon's default mode) and reports whether the sandbox's ports are
// public.
func toEgress(internet *bool, n *networkConfig) (*wire.EgressPolicy, bool, error) {
	public := true
	var allow, deny []string
	if n != nil {
		switch {
		case n.MaskRequestHost != nil:
			return nil, false, errdefs.Invalid("network.maskRequestHost", "is not supported by hotcell")
		case len(n.HTTPSPorts) > 0:
			return nil, false, errdefs.Invalid("network.httpsPorts", "is not supported by hotcell: its preview proxy speaks plain HTTP to the sandbox's ports")
		case isSet(n.EgressProxy):
			return nil, false, errdefs.Invalid("network.egressProxy", "egress proxies are not supported by hotcell")
		case isSet(n.Rules) && string(n.Rules) != "{}":
			return nil, false, errdefs.Invalid("network.rules", "request transform rules are not supported by hotcell (its LLM gateway injects provider keys: docs/gateway.md)")
		}
		if n.AllowPublicTraffic != nil {
			public = *n.AllowPublicTraffic
		}
		allow, deny = n.AllowOut, n.DenyOut
	}
	denyAll := internet != nil && !*internet
	for i, d := range deny {
		switch d {
		case "0.0.0.0/0", "::/0":
			denyAll = true
		default:
			return nil, false, errdefs.Invalid("network.denyOut["+strconv.Itoa(i)+"]", "%q: hotcell cannot deny single destinations; deny 0.0.0.0/0 and list what is allowed in allowOut", clip(d))
		}
	}
	switch {
	case denyAll && len(allow) > 0:
		return &wire.EgressPolicy{Mode: wire.EgressAllowlist, Allow: allow}, public, nil
	case denyAll:
		return &wire.EgressPolicy{Mode: wire.EgressNone}, public, nil
	case internet != nil && *internet:
		return &wire.EgressPolicy{Mode: wire.EgressOpen}, public, nil
	}
	// allowOut without a deny list allows what is allowed anyway (E2B:
	// allowed entries only take precedence over denied ones).
	return nil, public, nil
}

func (s *Server) createSandbox(w http.ResponseWriter, r *http.Request) error {
	var req createRequest
	if err := readBody(r, &req, false); err != nil {
		return err
	}
	creq, timeout, err := s.toCreate(req)
	if err != nil {
		return err
	}
	var co sandbox.CreateOptions
	if _, alias := s.opts.Templates[req.TemplateID]; !alias && s.opts.HotcellTemplates != nil {
		if co, _, err = s.opts.HotcellTemplates(r.Context(), req.TemplateID, &creq); err != nil {
			return err
		}
	}
	sb, err := s.opts.Sandboxes.Create(r.Context(), creq, co)
	if err != nil {
		return err
	}
	action := wire.ActionDestroy
	if req.AutoPause != nil && *req.AutoPause {
		action = wire.ActionPause
	}
	if _, err := s.setLifetime(r, sb, timeout, action); err != nil {
		if derr := s.opts.Sandboxes.Destroy(r.Context(), sb.ID); derr != nil {
			err = errors.Join(err, fmt.Errorf("and destroying the sandbox failed: %w", derr))
		}
		return err
	}
	writeJSON(w, http.StatusCreated, s.sandboxJSON(sb))
	return nil
}

// setLifetime makes sb end timeout seconds from now (0: no end) with
// action, whatever its lifetime was: E2B's setTimeout may shorten it too.
func (s *Server) setLifetime(r *http.Request, sb wire.Sandbox, timeout int64, action string) (wire.Sandbox, error) {
	life := int64(0)
	if timeout > 0 {
		life = int64(math.Ceil(time.Since(sb.CreatedAt).Seconds())) + timeout
	}
	req := wire.SetTimeoutsRequest{MaxLifetimeSeconds: &life}
	if action != "" {
		req.LifetimeAction = &action
	}
	return s.opts.Sandboxes.SetTimeouts(r.Context(), sb.ID, req)
}

func (s *Server) domain() *string {
	if s.opts.Domain == "" {
		return nil
	}
	d := s.opts.Domain
	return &d
}

func (s *Server) sandboxJSON(sb wire.Sandbox) sandboxJSON {
	return sandboxJSON{
		TemplateID:      s.templateOf(sb),
		SandboxID:       sb.ID,
		ClientID:        clientID,
		EnvdVersion:     EnvdVersion,
		EnvdAccessToken: s.EnvdToken(sb.ID),
		Domain:          s.domain(),
	}
}

func (s *Server) detail(sb wire.Sandbox, withToken bool) detailJSON {
	d := detailJSON{
		TemplateID:   s.templateOf(sb),
		SandboxID:    sb.ID,
		ClientID:     clientID,
		StartedAt:    sb.CreatedAt,
		EndAt:        noEnd,
		State:        string(sb.State), // running, paused, or hotcell's own (stopped, error)
		CPUCount:     int(math.Ceil(sb.Limits.CPUs)),
		MemoryMB:     sb.Limits.MemoryMB,
		DiskSizeMB:   sb.Limits.DiskMB,
		EnvdVersion:  EnvdVersion,
		Metadata:     metadata(sb),
		VolumeMounts: []struct{}{},
		Lifecycle:    &lifecycleJSON{OnTimeout: "kill"},
	}
	if d.CPUCount == 0 {
		d.CPUCount = runtime.NumCPU()
	}
	if t := sb.Timeouts; t != nil {
		if t.ExpiresAt != nil {
			d.EndAt = *t.ExpiresAt
		}
		if t.LifetimeAction == wire.ActionPause {
			d.Lifecycle.OnTimeout = "pause"
		}
	}
	if withToken {
		d.EnvdAccessToken = s.EnvdToken(sb.ID)
		d.Domain = s.domain()
	}
	public := sb.Labels[LabelPublicTraffic] == "true"
	d.Network = &networkConfig{AllowPublicTraffic: &public}
	if e := sb.Egress; e != nil {
		internet := e.Mode == wire.EgressOpen
		d.AllowInternetAccess = &internet
		if !internet {
			d.Network.DenyOut = []string{"0.0.0.0/0"}
			d.Network.AllowOut = e.Allow
		}
	}
	return d
}

// metadata is sb's labels without the E2B front's own.
func metadata(sb wire.Sandbox) map[string]string {
	m := make(map[string]string, len(sb.Labels))
	for k, v := range sb.Labels {
		if !strings.HasPrefix(k, labelPrefix) {
			m[k] = v
		}
	}
	return m
}

// lookup gets sandbox id; an id hotcell could not have made is not found,
// as on E2B (kill of it returns false, not an error).
func (s *Server) lookup(r *http.Request, id string) (wire.Sandbox, error) {
	if sandbox.ValidateID(id) != nil {
		return wire.Sandbox{}, fmt.Errorf("sandbox %q not found: %w", clip(id), errdefs.ErrNotFound)
	}
	sb, err := s.opts.Sandboxes.Get(r.Context(), id)
	if err == nil && sb.State == wire.StateDestroyed {
		err = fmt.Errorf("sandbox %s was killed: %w", id, errdefs.ErrNotFound)
	}
	return sb, err
}

func (s *Server) getSandbox(w http.ResponseWriter, r *http.Request) error {
	sb, err := s.lookup(r, r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s.detail(sb, true))
	return nil
}

func (s *Server) killSandbox(w http.ResponseWriter, r *http.Request) error {
	sb, err := s.lookup(r, r.PathValue("id"))
	if err != nil {
		return err
	}
	if err := s.opts.Sandboxes.Destroy(r.Context(), sb.ID); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) setTimeout(w http.ResponseWriter, r *http.Request) error {
	var req timeoutRequest
	if err := readBody(r, &req, false); err != nil {
		return err
	}
	if req.Timeout == nil {
		return errdefs.Invalid("timeout", "is required (seconds from now)")
	}
	timeout, err := timeoutSeconds("timeout", req.Timeout)
	if err != nil {
		return err
	}
	sb, err := s.lookup(r, r.PathValue("id"))
	if err != nil {
		return err
	}
	if sb.State == wire.StatePaused {
		// A paused sandbox has no lifetime (see pause); its timeout
		// starts again when it is resumed.
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	if _, err := s.setLifetime(r, sb, timeout, ""); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) pauseSandbox(w http.ResponseWriter, r *http.Request) error {
	var req timeoutRequest
	if err := readBody(r, &req, true); err != nil {
		return err
	}
	sb, err := s.lookup(r, r.PathValue("id"))
	if err != nil {
		return err
	}
	if sb.State == wire.StatePaused {
		return fmt.Errorf("sandbox %s is already paused: %w", sb.ID, errdefs.ErrConflict)
	}
	if sb, err = s.opts.Sandboxes.Pause(r.Context(), sb.ID); err != nil {
		return err
	}
	// Paused sandboxes stay until they are resumed or killed, as on E2B.
	if _, err := s.setLifetime(r, sb, 0, ""); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) connectSandbox(w http.ResponseWriter, r *http.Request) error {
	var req timeoutRequest
	if err := readBody(r, &req, true); err != nil {
		return err
	}
	timeout, err := timeoutSeconds("timeout", req.Timeout)
	if err != nil {
		return err
	}
	sb, err := s.lookup(r, r.PathValue("id"))
	if err != nil {
		return err
	}
	status := http.StatusOK
	switch sb.State {
	case wire.StateRunning:
	case wire.StatePaused:
		if sb, err = s.opts.Sandboxes.Resume(r.Context(), sb.ID); err != nil {
			return err
		}
		status = http.StatusCreated
	default:
		return fmt.Errorf("sandbox %s is %s; only a running or paused sandbox can be connected to (start it with hotcell's API: POST /v1/sandboxes/%s/start): %w", sb.ID, sb.State, sb.ID, errdefs.ErrConflict)
	}
	// A resumed sandbox gets its timeout afresh (paused, it had none); a
	// running one only gets more time, never less, as on E2B.
	t := sb.Timeouts
	if status == http.StatusCreated || (t != nil && t.ExpiresAt != nil && timeout > 0 &&
		t.ExpiresAt.Before(time.Now().Add(time.Duration(timeout)*time.Second))) {
		if _, err := s.setLifetime(r, sb, timeout, ""); err != nil {
			return err
		}
	}
	writeJSON(w, status, s.sandboxJSON(sb))
	return nil
}

// listSandboxes serves GET /v2/sandboxes: running and paused sandboxes
// (or the states asked for), filtered by metadata, template and start
// time, ordered by start time then id, a page at a time.
func (s *Server) listSandboxes(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	meta, err := parseMetadataQuery(q.Get("metadata"))
	if err != nil {
		return err
	}
	states := map[wire.State]bool{}
	for _, v := range q["state"] {
		for st := range strings.SplitSeq(v, ",") {
			switch wire.State(st) {
			case wire.StateRunning, wire.StatePaused:
				states[wire.State(st)] = true
			default:
				return errdefs.Invalid("state", "%q is not running or paused", clip(st))
			}
		}
	}
	if len(states) == 0 {
		states[wire.StateRunning], states[wire.StatePaused] = true, true
	}
	limit := listLimit
	if v := q.Get("limit"); v != "" {
		if limit, err = strconv.Atoi(v); err != nil || limit < 1 || limit > listLimit {
			return errdefs.Invalid("limit", "must be between 1 and %d", listLimit)
		}
	}
	desc := false
	switch q.Get("order") {
	case "", "asc":
	case "desc":
		desc = true
	default:
		return errdefs.Invalid("order", "must be asc or desc")
	}
	var after time.Time
	if v := q.Get("startedAfter"); v != "" {
		if after, err = time.Parse(time.RFC3339Nano, v); err != nil {
			return errdefs.Invalid("startedAfter", "%q is not an RFC 3339 time", clip(v))
		}
	}
	var cursor *pageKey
	if v := q.Get("nextToken"); v != "" {
		k, err := parsePageKey(v)
		if err != nil {
			return err
		}
		cursor = &k
	}
	all, err := s.opts.Sandboxes.List(r.Context(), sandbox.ListFilter{Labels: meta})
	if err != nil {
		return err
	}
	template := q.Get("template")
	list := all[:0]
	for _, sb := range all {
		if !states[sb.State] || (!after.IsZero() && !sb.CreatedAt.After(after)) ||
			(template != "" && s.templateOf(sb) != template) {
			continue
		}
		list = append(list, sb)
	}
	slices.SortFunc(list, func(a, b wire.Sandbox) int {
		c := keyOf(a).compare(keyOf(b))
		if desc {
			c = -c
		}
		return c
	})
	if cursor != nil {
		i := 0
		for i < len(list) {
			c := keyOf(list[i]).compare(*cursor)
			if desc {
				c = -c
			}
			if c > 0 {
				break
			}
			i++
		}
		list = list[i:]
	}
	page := make([]detailJSON, 0, min(limit, len(list)))
	for _, sb := range list[:min(limit, len(list))] {
		page = append(page, s.detail(sb, false))
	}
	if len(list) > limit {
		w.Header().Set("X-Next-Token", keyOf(list[limit-1]).String())
	}
	writeJSON(w, http.StatusOK, page)
	return nil
}

// pageKey is where a page of the list ends: the order is by creation time
// then id, which no later create or kill can reshuffle.
type pageKey struct {
	created int64
	id      string
}

func keyOf(sb wire.Sandbox) pageKey { return pageKey{sb.CreatedAt.UnixNano(), sb.ID} }

func (k pageKey) compare(o pageKey) int {
	switch {
	case k.created < o.created:
		return -1
	case k.created > o.created:
		return 1
	}
	return strings.Compare(k.id, o.id)
}

func (k pageKey) String() string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(k.created, 10) + "." + k.id))
}

func parsePageKey(s string) (pageKey, error) {
	bad := errdefs.Invalid("nextToken", "%q is not a token this daemon gave (x-next-token)", clip(s))
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return pageKey{}, bad
	}
	ns, id, ok := strings.Cut(string(b), ".")
	n, err := strconv.ParseInt(ns, 10, 64)
	if !ok || err != nil || sandbox.ValidateID(id) != nil {
		return pageKey{}, bad
	}
	return pageKey{n, id}, nil
}

// parseMetadataQuery reads the metadata filter. The SDK encodes it twice
// (e2b-protocol.md §2): each key and value with encodeURIComponent, the
// pairs as a query string, and that string as the parameter's value, which
// the server's own query parsing undoes.
func parseMetadataQuery(s string) (map[string]string, error) {
	if s == "" {
		return nil, nil
	}
	pairs, err := url.ParseQuery(s)
	if err != nil {
		return nil, errdefs.Invalid("metadata", "%q is not key=value pairs joined by &: %v", clip(s), err)
	}
	out := make(map[string]string, len(pairs))
	for k, vs := range pairs {
		key, err := url.PathUnescape(k)
		if err != nil {
			return nil, errdefs.Invalid("metadata", "key %q is not URL-encoded: %v", clip(k), err)
		}
		for _, v := range vs {
			val, err := url.PathUnescape(v)
			if err != nil {
				return nil, errdefs.Invalid("metadata", "value %q is not URL-encoded: %v", clip(v), err)
			}
			if err := labels.ValidateOne("metadata", key, val); err != nil {
				return nil, err
			}
			if old, dup := out[key]; dup && old != val {
				return nil, errdefs.Invalid("metadata."+key, "is given twice with different values")
			}
			out[key] = val
		}
	}
	return out, nil
}

// clip keeps echoed input short in error messages.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
