package api

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// openAPIDoc decodes the embedded document.
func openAPIDoc(t *testing.T) map[string]any {
	t.Helper()
	var doc map[string]any
	if err := json.Unmarshal(openapiDoc, &doc); err != nil {
		t.Fatalf("openapi.json is not valid JSON: %v", err)
	}
	return doc
}

func TestOpenAPIDocument(t *testing.T) {
	doc := openAPIDoc(t)
	v, _ := doc["openapi"].(string)
	if !strings.HasPrefix(v, "3.1.") {
		t.Errorf("openapi = %q, want 3.1.x", v)
	}
	info, _ := doc["info"].(map[string]any)
	if info["version"] != "1" {
		t.Errorf("info.version = %v, want \"1\"", info["version"])
	}
	if _, ok := doc["paths"].(map[string]any); !ok {
		t.Fatal("paths is missing")
	}
}

// openAPIRegisteredRoutes parses the package's files and returns the
// "METHOD /path" patterns that routes() and the per-feature xxxRoutes()
// methods register, without the catch-all "/".
func openAPIRegisteredRoutes(t *testing.T) []string {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var fns []*ast.FuncDecl
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatalf("parse %s: %v", name, err)
		}
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv != nil && (fd.Name.Name == "routes" || strings.HasSuffix(fd.Name.Name, "Routes")) {
				fns = append(fns, fd)
			}
		}
	}
	if len(fns) == 0 {
		t.Fatal("the package has no routes method")
	}
	var routes []string
	for _, fn := range fns {
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			switch sel.Sel.Name {
			case "handle", "Handle", "HandleFunc":
			default:
				return true
			}
			lit, ok := call.Args[0].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				t.Errorf("%s: route pattern is not a string literal; this test cannot read it", fset.Position(call.Pos()))
				return true
			}
			pattern, err := strconv.Unquote(lit.Value)
			if err != nil {
				t.Fatalf("%s: %v", fset.Position(lit.Pos()), err)
			}
			if pattern == "/" {
				return true // the JSON 404 catch-all
			}
			method, path, ok := strings.Cut(pattern, " ")
			if !ok {
				t.Errorf("%s: pattern %q has no method; document it or give it one", fset.Position(lit.Pos()), pattern)
				return true
			}
			routes = append(routes, method+" "+path)
			return true
		})
	}
	if len(routes) == 0 {
		t.Fatal("found no routes in server.go")
	}
	sort.Strings(routes)
	return routes
}

var openAPIMethods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

// openAPIDocumentedRoutes returns "METHOD /path" for each operation in the document.
func openAPIDocumentedRoutes(doc map[string]any) []string {
	var routes []string
	for path, item := range doc["paths"].(map[string]any) {
		ops, _ := item.(map[string]any)
		for _, m := range openAPIMethods {
			if _, ok := ops[m]; ok {
				routes = append(routes, strings.ToUpper(m)+" "+path)
			}
		}
	}
	sort.Strings(routes)
	return routes
}

func TestOpenAPIRoutes(t *testing.T) {
	doc := openAPIDoc(t)
	registered := openAPIRegisteredRoutes(t)
	documented := openAPIDocumentedRoutes(doc)
	for _, r := range registered {
		if !slices.Contains(documented, r) {
			t.Errorf("route %s is registered in server.go but not documented in openapi.json", r)
		}
	}
	for _, r := range documented {
		if !slices.Contains(registered, r) {
			t.Errorf("openapi.json documents %s, which server.go does not register", r)
		}
	}

	// The routes parsed from the source are the ones the server serves: a
	// request to each (with no manager behind it) must not fall through to
	// the catch-all, whose message says "no route".
	h := New(Options{Token: "t", Log: slog.New(slog.DiscardHandler)}).Handler()
	for _, r := range registered {
		method, path, _ := strings.Cut(r, " ")
		path = strings.ReplaceAll(path, "{id}", "bad_ID")
		req := httptest.NewRequest(method, path, nil)
		req.Header.Set("Authorization", "Bearer t")
		rec := httptest.NewRecorder()
		func() {
			// Handlers that reach the nil Manager or Host panic; that still
			// proves the route matched.
			defer func() { _ = recover() }()
			h.ServeHTTP(rec, req)
		}()
		body, _ := io.ReadAll(rec.Result().Body)
		if rec.Code == http.StatusMethodNotAllowed || strings.Contains(string(body), "no route") {
			t.Errorf("%s is not served: %d %s", r, rec.Code, body)
		}

		// Security: every route but /healthz and the console's sign-in
		// (which checks the key in its body) wants the bearer token.
		req = httptest.NewRequest(method, path, nil)
		rec = httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		open := path == "/healthz" || r == "POST /v1/session"
		if want := http.StatusUnauthorized; open && rec.Code == want || !open && rec.Code != want {
			t.Errorf("%s without a token answered %d", r, rec.Code)
		}
	}
}

func TestOpenAPIOperations(t *testing.T) {
	doc := openAPIDoc(t)
	seen := map[string]string{}
	for path, item := range doc["paths"].(map[string]any) {
		ops := item.(map[string]any)
		for _, m := range openAPIMethods {
			op, ok := ops[m].(map[string]any)
			if !ok {
				continue
			}
			name := strings.ToUpper(m) + " " + path
			id, _ := op["operationId"].(string)
			if id == "" {
				t.Errorf("%s has no operationId", name)
			} else if prev, dup := seen[id]; dup {
				t.Errorf("operationId %q is used by %s and %s", id, prev, name)
			}
			seen[id] = name
			resp, _ := op["responses"].(map[string]any)
			if len(resp) == 0 {
				t.Errorf("%s has no responses", name)
			}
			_, has401 := resp["401"]
			if path == "/healthz" {
				if sec, ok := op["security"].([]any); !ok || len(sec) != 0 {
					t.Errorf("%s must declare security: [] (it needs no token)", name)
				}
			} else if !has401 {
				t.Errorf("%s does not document 401", name)
			}
		}
	}
}

func TestOpenAPIRefs(t *testing.T) {
	doc := openAPIDoc(t)
	var walk func(at string, v any)
	walk = func(at string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, child := range v {
				if k == "$ref" {
					ref, _ := child.(string)
					if !strings.HasPrefix(ref, "#/components/") {
						t.Errorf("%s: $ref %q does not point into #/components", at, ref)
						continue
					}
					if _, ok := openAPIResolve(doc, ref); !ok {
						t.Errorf("%s: $ref %q does not resolve", at, ref)
					}
					continue
				}
				walk(at+"/"+k, child)
			}
		case []any:
			for i, child := range v {
				walk(at+"/"+strconv.Itoa(i), child)
			}
		}
	}
	walk("#", doc)
}

// openAPIResolve follows a local JSON pointer such as #/components/schemas/X.
func openAPIResolve(doc map[string]any, ref string) (any, bool) {
	var cur any = doc
	for _, tok := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[tok]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// openAPIStructFields returns a struct type's JSON field names and, of those, the
// ones always present in its encoding (no omitempty).
func openAPIStructFields(t *testing.T, typ reflect.Type) (all, always []string) {
	t.Helper()
	for i := range typ.NumField() {
		f := typ.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			t.Fatalf("%s embeds %s; extend openAPIStructFields to flatten it", typ, f.Type)
		}
		if name == "" {
			name = f.Name
		}
		all = append(all, name)
		if !slices.Contains(strings.Split(opts, ","), "omitempty") {
			always = append(always, name)
		}
	}
	sort.Strings(all)
	sort.Strings(always)
	return all, always
}

func openAPIKeys(s map[string]any, key string) []string {
	var out []string
	switch v := s[key].(type) {
	case map[string]any:
		for k := range v {
			out = append(out, k)
		}
	case []any:
		for _, x := range v {
			out = append(out, x.(string))
		}
	}
	sort.Strings(out)
	return out
}

func TestOpenAPIWireSchemas(t *testing.T) {
	doc := openAPIDoc(t)
	schemas := doc["components"].(map[string]any)["schemas"].(map[string]any)
	// response marks the shapes the daemon sends: their required set is
	// exactly the fields it always encodes. Request shapes say what the
	// daemon demands instead, which the test cannot derive from tags.
	tests := []struct {
		schema   string
		v        any
		response bool
	}{
		{"Sandbox", wire.Sandbox{}, true},
		{"SandboxList", wire.SandboxList{}, true},
		{"CreateSandboxRequest", wire.CreateSandboxRequest{}, false},
		{"Limits", wire.Limits{}, true},
		{"Repo", wire.Repo{}, false},
		{"RepoResult", wire.RepoResult{}, true},
		{"SetupResult", wire.SetupResult{}, true}, {"CreateEvent", wire.CreateEvent{}, true},
		{"ExecRequest", wire.ExecRequest{}, false},
		{"ExecResult", wire.ExecResult{}, true},
		{"ExecEvent", wire.ExecEvent{}, true},
		{"FileInfo", wire.FileInfo{}, true},
		{"FileList", wire.FileList{}, true},
		{"MkdirRequest", wire.MkdirRequest{}, false},
		{"MoveRequest", wire.MoveRequest{}, false},
		{"WriteResult", wire.WriteResult{}, true},
		{"HostInfo", wire.HostInfo{}, true},
		{"StartProcessRequest", wire.StartProcessRequest{}, false}, {"Process", wire.Process{}, true}, {"ProcessList", wire.ProcessList{}, true}, {"SignalRequest", wire.SignalRequest{}, false}, {"LogEvent", wire.LogEvent{}, true},
		{"PortWaitResult", wire.PortWaitResult{}, true}, {"SetPortPublicRequest", wire.SetPortPublicRequest{}, false}, {"PortAccess", wire.PortAccess{}, true}, {"PreviewURL", wire.PreviewURL{}, true}, {"TunnelControl", wire.TunnelControl{}, true},
		{"TerminalRequest", wire.TerminalRequest{}, false}, {"TerminalInfo", wire.TerminalInfo{}, true}, {"TerminalList", wire.TerminalList{}, true}, {"TerminalMessage", wire.TerminalMessage{}, true},
		{"WatchEvent", wire.WatchEvent{}, true}, {"SandboxStats", wire.SandboxStats{}, true}, {"CPUStats", wire.CPUStats{}, true}, {"MemoryStats", wire.MemoryStats{}, true}, {"PidsStats", wire.PidsStats{}, true}, {"NetworkStats", wire.NetworkStats{}, true}, {"DiskUsage", wire.DiskUsage{}, true}, {"StatsEvent", wire.StatsEvent{}, true},
		{"Timeouts", wire.Timeouts{}, false}, {"SandboxTimeouts", wire.SandboxTimeouts{}, true}, {"SetTimeoutsRequest", wire.SetTimeoutsRequest{}, false}, {"SandboxEvent", wire.SandboxEvent{}, true}, {"SandboxEventList", wire.SandboxEventList{}, true},
		{"Backup", wire.Backup{}, true}, {"BackupList", wire.BackupList{}, true}, {"CreateBackupRequest", wire.CreateBackupRequest{}, false}, {"BackupEvent", wire.BackupEvent{}, true}, {"RestoreRequest", wire.RestoreRequest{}, false}, {"RestoreSource", wire.RestoreSource{}, false}, {"RestoreResult", wire.RestoreResult{}, true}, {"Snapshot", wire.Snapshot{}, true}, {"SnapshotList", wire.SnapshotList{}, true},
		{"EgressPolicy", wire.EgressPolicy{}, false}, {"EgressStatus", wire.EgressStatus{}, true}, {"EgressResolved", wire.EgressResolved{}, true}, {"EgressDenial", wire.EgressDenial{}, true},
		{"GatewayUsage", wire.GatewayUsage{}, true}, {"GatewayBudget", wire.GatewayBudget{}, false}, {"SandboxUsage", wire.SandboxUsage{}, true}, {"GatewayCredential", wire.GatewayCredential{}, true}, {"GatewayProvider", wire.GatewayProvider{}, true}, {"GatewayProviderList", wire.GatewayProviderList{}, true},
		{"CodeExecuteRequest", wire.CodeExecuteRequest{}, false}, {"CodeEvent", wire.CodeEvent{}, true}, {"CodeResult", wire.CodeResult{}, true}, {"CodeError", wire.CodeError{}, true}, {"CodeLogs", wire.CodeLogs{}, true}, {"CodeExecution", wire.CodeExecution{}, true}, {"CodeContextRequest", wire.CodeContextRequest{}, false}, {"CodeContext", wire.CodeContext{}, true}, {"CodeContextList", wire.CodeContextList{}, true},
		{"Template", wire.Template{}, true}, {"TemplateDefaults", wire.TemplateDefaults{}, true}, {"TemplateRef", wire.TemplateRef{}, true}, {"TemplateList", wire.TemplateList{}, true}, {"TemplateBuildEvent", wire.TemplateBuildEvent{}, true},
		{"StreamError", wire.StreamError{}, true},
		{"Error", errdefs.Body{}, true},
		{"ErrorDetail", errdefs.Detail{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.schema, func(t *testing.T) {
			s, ok := schemas[tt.schema].(map[string]any)
			if !ok {
				t.Fatalf("components/schemas/%s is missing", tt.schema)
			}
			typ := reflect.TypeOf(tt.v)
			all, always := openAPIStructFields(t, typ)
			props := openAPIKeys(s, "properties")
			if !slices.Equal(all, props) {
				t.Errorf("%s fields %v, schema properties %v", typ, all, props)
			}
			required := openAPIKeys(s, "required")
			for _, r := range required {
				if !slices.Contains(props, r) {
					t.Errorf("required %q is not a property", r)
				}
			}
			if tt.response && !slices.Equal(always, required) {
				t.Errorf("%s always encodes %v, schema requires %v", typ, always, required)
			}
		})
	}

	codes := openAPIKeys(schemas["ErrorDetail"].(map[string]any)["properties"].(map[string]any)["code"].(map[string]any), "enum")
	want := []string{"internal"}
	for _, c := range []error{
		errdefs.ErrInvalidArgument, errdefs.ErrNotFound, errdefs.ErrAlreadyExists, errdefs.ErrConflict,
		errdefs.ErrUnauthenticated, errdefs.ErrPermissionDenied, errdefs.ErrTooLarge, errdefs.ErrUnavailable,
		errdefs.ErrDeadlineExceeded, errdefs.ErrNotImplemented, errdefs.ErrInsufficientStorage,
	} {
		_, code := errdefs.HTTPStatus(c)
		want = append(want, code)
	}
	sort.Strings(want)
	if !slices.Equal(codes, want) {
		t.Errorf("error code enum %v, want %v", codes, want)
	}
}

func TestOpenAPIMergeRefusesDuplicates(t *testing.T) {
	t.Parallel()
	base := `{"openapi":"3.1.0","paths":{"/a":{}},"components":{"schemas":{"A":{}}},"tags":[{"name":"a"}]}`
	good := fstest.MapFS{
		"openapi/base.json": {Data: []byte(base)},
		"openapi/b.json":    {Data: []byte(`{"paths":{"/b":{}},"components":{"schemas":{"B":{}}},"tags":[{"name":"b"}]}`)},
	}
	doc, err := mergeOpenAPI(good)
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Paths      map[string]any
		Components struct{ Schemas map[string]any }
		Tags       []any
	}
	if err := json.Unmarshal(doc, &m); err != nil {
		t.Fatal(err)
	}
	if len(m.Paths) != 2 || len(m.Components.Schemas) != 2 || len(m.Tags) != 2 {
		t.Fatalf("merged: got %s", doc)
	}
	for _, frag := range []string{`{"paths":{"/a":{}}}`, `{"components":{"schemas":{"A":{}}}}`, `{"openapi":"3.0.0"}`} {
		bad := fstest.MapFS{"openapi/base.json": {Data: []byte(base)}, "openapi/x.json": {Data: []byte(frag)}}
		if _, err := mergeOpenAPI(bad); err == nil {
			t.Errorf("fragment %s redefining the base was accepted", frag)
		}
	}
}
