package config

import (
	"fmt"
	"regexp"
	"strings"
)

// templateIDPattern: what an E2B template id or alias may be (the SDK's
// Sandbox.create(template) argument).
var templateIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$`)

// E2BTemplateMap parses E2BTemplates, "id=image,id=image", into a map from
// E2B template id to image. Validate has checked it.
func (c Config) E2BTemplateMap() map[string]string {
	m, _ := parseE2BTemplates(c.E2BTemplates)
	return m
}

func parseE2BTemplates(s string) (map[string]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	m := map[string]string{}
	for _, pair := range strings.Split(s, ",") {
		id, image, ok := strings.Cut(strings.TrimSpace(pair), "=")
		id, image = strings.TrimSpace(id), strings.TrimSpace(image)
		if !ok || id == "" || image == "" {
			return nil, fmt.Errorf("%q is not template=image", pair)
		}
		if !templateIDPattern.MatchString(id) {
			return nil, fmt.Errorf("template id %q: 1-128 letters, digits, '.', '_', ':', '/', '-', starting with a letter or digit", id)
		}
		if strings.ContainsAny(image, " \t") {
			return nil, fmt.Errorf("image %q of template %q contains a space", image, id)
		}
		if _, dup := m[id]; dup {
			return nil, fmt.Errorf("template id %q is given twice", id)
		}
		m[id] = image
	}
	return m, nil
}
