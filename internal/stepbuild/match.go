package stepbuild

import (
	"archive/tar"
	"bufio"
	"fmt"
	"io"
	"path"
	"regexp"
	"strings"

	"github.com/hotcell/hotcell/internal/errdefs"
)

func isGlob(p string) bool { return strings.ContainsAny(p, `*?[\`) }

func globMatch(pat, name string) bool {
	ok, err := path.Match(pat, name)
	return err == nil && ok
}

// ignorer is a context's .dockerignore: patterns of paths (with ** for any
// number of directories) that leave files out, a ! pattern taking back
// what an earlier one left out; the last pattern that matches decides. A
// pattern that matches a directory leaves out what is under it.
type ignorer struct {
	rules []ignoreRule
}

type ignoreRule struct {
	re     *regexp.Regexp
	negate bool
}

// maxIgnore bounds the .dockerignore read.
const maxIgnore = 1 << 20

// readIgnore reads the context's .dockerignore, if it has one.
func readIgnore(bctx Context) (*ignorer, error) {
	ig := &ignorer{}
	var text string
	err := walkFile(bctx, ".dockerignore", func(r io.Reader) error {
		b, err := io.ReadAll(io.LimitReader(r, maxIgnore+1))
		if err != nil {
			return err
		}
		if len(b) > maxIgnore {
			return errdefs.Invalid("context", ".dockerignore is more than %d bytes", maxIgnore)
		}
		text = string(b)
		return nil
	})
	if err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		r := ignoreRule{}
		if rest, ok := strings.CutPrefix(l, "!"); ok {
			r.negate, l = true, strings.TrimSpace(rest)
		}
		l = path.Clean("/" + l)[1:]
		if l == "" {
			continue
		}
		re, err := ignoreRegexp(l)
		if err != nil {
			return nil, errdefs.Invalid("context", ".dockerignore: %q: %v", l, err)
		}
		r.re = re
		ig.rules = append(ig.rules, r)
	}
	return ig, nil
}

// ignoreRegexp turns a .dockerignore pattern into a regexp of a whole
// path: * and ? within a path element, ** across elements, [...] a class.
func ignoreRegexp(p string) (*regexp.Regexp, error) {
	var b strings.Builder
	b.WriteString("^")
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '*' && i+1 < len(p) && p[i+1] == '*':
			i++
			if i+1 < len(p) && p[i+1] == '/' {
				i++
				b.WriteString("(.*/)?")
			} else {
				b.WriteString(".*")
			}
		case c == '*':
			b.WriteString("[^/]*")
		case c == '?':
			b.WriteString("[^/]")
		case c == '[':
			j := strings.IndexByte(p[i:], ']')
			if j < 0 {
				return nil, fmt.Errorf("a [ with no ]")
			}
			class := p[i+1 : i+j]
			if strings.HasPrefix(class, "!") {
				class = "^" + class[1:]
			}
			b.WriteString("[" + class + "]")
			i += j
		case c == '\\' && i+1 < len(p):
			i++
			b.WriteString(regexp.QuoteMeta(string(p[i])))
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	b.WriteString("$")
	return regexp.Compile(b.String())
}

// ignored says whether name (cleaned, relative) is left out: the last
// rule matching it or a directory above it decides.
func (ig *ignorer) ignored(name string) bool {
	if ig == nil || len(ig.rules) == 0 {
		return false
	}
	out := false
	for _, r := range ig.rules {
		if r.matches(name) {
			out = !r.negate
		}
	}
	return out
}

func (r ignoreRule) matches(name string) bool {
	for p := name; p != "." && p != "/"; p = path.Dir(p) {
		if r.re.MatchString(p) {
			return true
		}
	}
	return false
}

// walkFile calls fn with the content of the context's regular file name,
// if it has one.
func walkFile(bctx Context, name string, fn func(io.Reader) error) error {
	done := false
	return walk(bctx, func(n string, h *tar.Header, r io.Reader) error {
		if done || n != name || h.Typeflag != tar.TypeReg {
			return nil
		}
		done = true
		return fn(r)
	})
}

// maxDockerfileRead bounds the Dockerfile ReadFile reads.
const maxDockerfileRead = maxDockerfile + 1

// ReadFile returns the content of the context's regular file name (the
// Dockerfile); a missing one is errdefs.ErrInvalidArgument.
func ReadFile(bctx Context, name string) ([]byte, error) {
	var out []byte
	found := false
	err := walkFile(bctx, path.Clean("/" + name)[1:], func(r io.Reader) error {
		found = true
		var err error
		out, err = io.ReadAll(io.LimitReader(r, maxDockerfileRead))
		return err
	})
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, errdefs.Invalid("dockerfile", "%q is not a file of the build context", name)
	}
	return out, nil
}
