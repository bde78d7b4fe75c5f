package mcpserver

import (
	"encoding/json"
	"fmt"

	"github.com/google/jsonschema-go/jsonschema"
)

// prop adjusts one property of an inferred schema: the struct tags give
// types and descriptions, these add what tags cannot (enums, bounds,
// defaults), so an agent can build a valid call from the schema alone.
type prop func(*jsonschema.Schema)

func enum(vals ...string) prop {
	return func(s *jsonschema.Schema) {
		for _, v := range vals {
			s.Enum = append(s.Enum, v)
		}
	}
}

func between(lo, hi float64) prop {
	return func(s *jsonschema.Schema) { s.Minimum, s.Maximum = &lo, &hi }
}

func atLeast(lo float64) prop {
	return func(s *jsonschema.Schema) { s.Minimum = &lo }
}

func maxItems(n int) prop {
	return func(s *jsonschema.Schema) { s.MaxItems = &n }
}

func nonEmpty(s *jsonschema.Schema) { s.MinLength = ptr(1) }

func byDefault(v any) prop {
	return func(s *jsonschema.Schema) {
		b, err := json.Marshal(v)
		if err != nil {
			panic(err)
		}
		s.Default = b
	}
}

func all(ps ...prop) prop {
	return func(s *jsonschema.Schema) {
		for _, p := range ps {
			p(s)
		}
	}
}

// inputSchema infers T's schema and applies props by property name. A
// name that T does not have is a programming error, caught by the tests.
func inputSchema[T any](props map[string]prop) *jsonschema.Schema {
	s, err := jsonschema.For[T](nil)
	if err != nil {
		panic(fmt.Sprintf("mcpserver: schema of %T: %v", *new(T), err))
	}
	for name, p := range props {
		ps, ok := s.Properties[name]
		if !ok {
			panic(fmt.Sprintf("mcpserver: schema of %T has no property %q", *new(T), name))
		}
		p(ps)
	}
	return s
}
