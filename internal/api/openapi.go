package api

import (
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"sort"
)

// The API contract is openapi/base.json plus one fragment per feature
// (openapi/<feature>.json holding "paths", "tags" and "components"), merged
// once at start. A fragment may not redefine what another defines.
//
//go:embed openapi/*.json
var openapiFS embed.FS

var openapiDoc = mustMergeOpenAPI(openapiFS)

func mustMergeOpenAPI(fsys fs.FS) []byte {
	doc, err := mergeOpenAPI(fsys)
	if err != nil {
		panic(err)
	}
	return doc
}

func mergeOpenAPI(fsys fs.FS) ([]byte, error) {
	read := func(name string) (map[string]any, error) {
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, fmt.Errorf("openapi %s: %w", name, err)
		}
		return m, nil
	}
	base, err := read("openapi/base.json")
	if err != nil {
		return nil, err
	}
	names, err := fs.Glob(fsys, "openapi/*.json")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	for _, name := range names {
		if name == "openapi/base.json" {
			continue
		}
		frag, err := read(name)
		if err != nil {
			return nil, err
		}
		if err := mergeMaps(base, frag, name, 0); err != nil {
			return nil, err
		}
	}
	return json.MarshalIndent(base, "", "  ")
}

// mergeMaps adds src's keys into dst two levels deep (paths/<path>,
// components/<kind>/<name>) and appends tags; a key defined twice is an error.
func mergeMaps(dst, src map[string]any, name string, depth int) error {
	for k, v := range src {
		if k == "tags" && depth == 0 {
			tags, _ := dst["tags"].([]any)
			more, _ := v.([]any)
			dst["tags"] = append(tags, more...)
			continue
		}
		existing, ok := dst[k]
		if !ok {
			dst[k] = v
			continue
		}
		dm, ok1 := existing.(map[string]any)
		sm, ok2 := v.(map[string]any)
		if !ok1 || !ok2 || depth >= 2 || (depth == 1 && k != "schemas" && k != "parameters" && k != "responses") {
			return fmt.Errorf("openapi %s: %q is already defined", name, k)
		}
		if err := mergeMaps(dm, sm, name, depth+1); err != nil {
			return err
		}
	}
	return nil
}

func (s *Server) openapi(w http.ResponseWriter, r *http.Request) error {
	w.Header().Set("Content-Type", "application/json")
	_, err := w.Write(openapiDoc)
	return err
}
