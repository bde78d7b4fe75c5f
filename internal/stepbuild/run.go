package stepbuild

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"strings"

	"github.com/hotcell/hotcell/internal/errdefs"
)

// Box is where a build runs: a box of the plan's base image.
type Box interface {
	// Run runs argv as user (empty: the box's own) in cwd, with env laid
	// over the box's, passing its output as it comes, and returns its
	// exit code.
	Run(ctx context.Context, argv []string, env map[string]string, cwd, user string, output func([]byte)) (int, error)
	// Extract unpacks a tar (or tar.gz) into dir, made if missing.
	Extract(ctx context.Context, dir string, tar io.Reader) error
	// Mkdir makes dir and its parents; an existing one is no error.
	Mkdir(ctx context.Context, dir string) error
}

// Context is a build context: a tar a build may read more than once.
type Context interface {
	// Open returns the tar from its start.
	Open() (io.ReadCloser, error)
}

// Result is what the steps leave besides the box's files: the image's
// env (the ENVs, laid over the base image's) and labels.
type Result struct {
	Env    map[string]string
	Labels map[string]string
}

// From is the plan's base image, with the ARGs before FROM substituted.
func From(p Plan) (string, error) {
	vars := map[string]string{}
	for _, kv := range p.PreArgs {
		if kv.HasValue {
			v, err := expand(kv.Value, vars)
			if err != nil {
				return "", err
			}
			vars[kv.Key] = v
		}
	}
	from, err := expand(p.From, vars)
	if err != nil {
		return "", err
	}
	if from == "" {
		return "", errdefs.Invalid("dockerfile", "FROM %s is empty once its ARGs are substituted", clip(p.From))
	}
	return from, nil
}

// FromStep is the build log's first line, for the box of the base image
// from (From's).
func FromStep(p Plan, from string) string {
	return fmt.Sprintf("Step 1/%d : FROM %s", len(p.Steps)+1, from)
}

// builder is one Run's state.
type builder struct {
	box      Box
	bctx     Context
	ignore   *ignorer
	progress func(string)
	env      map[string]string // ENV
	args     map[string]string // ARG, for RUN's env and substitution
	labels   map[string]string
	workdir  string
	user     string
	shell    []string
}

// Run runs the plan's steps in box, reading COPY's and ADD's files from
// bctx (less what its .dockerignore excludes), and reports each step and
// the output of each RUN to progress. A step that fails (a RUN that exits
// non-zero, a COPY of nothing) is errdefs.ErrInvalidArgument naming its
// line; the box is then as the failed step left it.
func Run(ctx context.Context, p Plan, bctx Context, box Box, progress func(string)) (Result, error) {
	if progress == nil {
		progress = func(string) {}
	}
	ig, err := readIgnore(bctx)
	if err != nil {
		return Result{}, err
	}
	b := &builder{
		box: box, bctx: bctx, ignore: ig, progress: progress,
		env: map[string]string{}, args: map[string]string{}, labels: map[string]string{},
		workdir: "/", shell: []string{"/bin/sh", "-c"},
	}
	// Numbered as Docker's builder does, FROM being step 1 (the caller's:
	// FromStep), so the CLI's status line reads them alike.
	for i, st := range p.Steps {
		progress(fmt.Sprintf("Step %d/%d : %s", i+2, len(p.Steps)+1, st.Text))
		if err := b.step(ctx, st); err != nil {
			var se stepError
			if errors.As(err, &se) {
				return Result{}, err
			}
			return Result{}, fmt.Errorf("dockerfile line %d: %s: %w", st.Line, st.Op, err)
		}
	}
	return Result{Env: b.env, Labels: b.labels}, nil
}

func (b *builder) vars() map[string]string {
	v := maps.Clone(b.args)
	maps.Copy(v, b.env)
	return v
}

// stepError is a step's failure, which names its line already.
type stepError struct{ error }

func (e stepError) Unwrap() error { return e.error }

func (b *builder) invalid(st Step, format string, args ...any) error {
	return stepError{errdefs.Invalid("dockerfile", "line %d: %s: %s", st.Line, st.Op, fmt.Sprintf(format, args...))}
}

func (b *builder) step(ctx context.Context, st Step) error {
	switch st.Op {
	case OpNote:
		b.progress(fmt.Sprintf(" ---> not used here: the agent is the box's first process (line %d)", st.Line))
		return nil
	case OpEnv, OpArg, OpLabel:
		for _, kv := range st.KVs {
			v := kv.Value
			if st.Op == OpArg && !kv.HasValue {
				if _, ok := b.args[kv.Key]; !ok {
					b.args[kv.Key] = ""
				}
				continue
			}
			v, err := expand(v, b.vars())
			if err != nil {
				return b.invalid(st, "%v", err)
			}
			switch st.Op {
			case OpEnv:
				b.env[kv.Key] = v
			case OpArg:
				b.args[kv.Key] = v
			case OpLabel:
				b.labels[kv.Key] = v
			}
		}
		return nil
	case OpWorkdir:
		dir, err := expand(st.Arg, b.vars())
		if err != nil {
			return b.invalid(st, "%v", err)
		}
		b.workdir = b.abs(dir)
		return b.box.Mkdir(ctx, b.workdir)
	case OpUser:
		u, err := expand(st.Arg, b.vars())
		if err != nil {
			return b.invalid(st, "%v", err)
		}
		if strings.Contains(u, ":") {
			return b.invalid(st, "%s: a group is not taken here; name a user of the image, whose groups it gets", clip(u))
		}
		b.user = u
		return nil
	case OpShell:
		b.shell = slices.Clone(st.Exec)
		return nil
	case OpRun:
		argv := st.Exec
		if argv == nil {
			argv = append(slices.Clone(b.shell), st.Shell)
		}
		return b.run(ctx, st, argv, b.workdir)
	case OpCopy, OpAdd:
		return b.copy(ctx, st)
	}
	return b.invalid(st, "is not taken here")
}

// run runs a step's command; a non-zero exit fails the build.
func (b *builder) run(ctx context.Context, st Step, argv []string, cwd string) error {
	env := b.vars()
	var line bytes.Buffer
	out := func(p []byte) {
		line.Write(p)
		for {
			i := bytes.IndexByte(line.Bytes(), '\n')
			if i < 0 {
				if line.Len() > 4096 {
					b.progress(line.String())
					line.Reset()
				}
				return
			}
			b.progress(string(line.Next(i + 1)[:i]))
		}
	}
	code, err := b.box.Run(ctx, argv, env, cwd, b.user, out)
	if line.Len() > 0 {
		b.progress(line.String())
	}
	if err != nil {
		return err
	}
	if code != 0 {
		return b.invalid(st, "the command %s returned a non-zero code: %d", clip(strings.Join(argv, " ")), code)
	}
	return nil
}

// abs is p against the working directory.
func (b *builder) abs(p string) string {
	if path.IsAbs(p) {
		return path.Clean(p)
	}
	return path.Join(b.workdir, p)
}

// copy sends the context's files a COPY or ADD names into the box.
func (b *builder) copy(ctx context.Context, st Step) error {
	vars := b.vars()
	dest, err := expand(st.Dest, vars)
	if err != nil {
		return b.invalid(st, "%v", err)
	}
	destDir := strings.HasSuffix(dest, "/") || dest == "." || dest == ".."
	dest = b.abs(dest)
	var pats []string
	for _, s := range st.Sources {
		s, err := expand(s, vars)
		if err != nil {
			return b.invalid(st, "%v", err)
		}
		c := path.Clean("/" + s)[1:]
		if c == "" {
			c = "."
		}
		if _, err := path.Match(c, ""); err != nil {
			return b.invalid(st, "%s: %v", clip(s), err)
		}
		pats = append(pats, c)
	}
	entries, err := b.list()
	if err != nil {
		return err
	}
	// The items the sources name: a file or a directory (its contents go).
	var items []item
	for _, pat := range pats {
		n := 0
		for _, e := range entries {
			if pat == "." && e.name == "." || e.name == pat || (isGlob(pat) && globMatch(pat, e.name)) {
				items = append(items, e)
				n++
			}
		}
		if n == 0 {
			return b.invalid(st, "%s: no such file or directory in the build context (or .dockerignore leaves it out)", clip(pat))
		}
	}
	if len(items) > 1 || slices.ContainsFunc(items, func(e item) bool { return e.dir }) {
		if len(items) > 1 && !destDir {
			return b.invalid(st, "when copying more than one source the destination must be a directory and end with a /")
		}
		destDir = true
	}
	// ADD unpacks a local tar archive into the destination.
	for _, it := range items {
		if st.Op == OpAdd && !it.dir && isArchive(it.name) {
			if len(items) > 1 {
				return b.invalid(st, "%s: an archive is unpacked alone here: give it an ADD of its own", clip(it.name))
			}
			return b.addArchive(ctx, st, it.name, dest)
		}
		if st.Op == OpAdd && !it.dir && isOtherArchive(it.name) {
			return b.invalid(st, "%s: only .tar, .tar.gz and .tgz archives are unpacked here: COPY it and unpack it in a RUN", clip(it.name))
		}
	}
	into := dest
	if !destDir {
		into = path.Dir(dest)
	}
	pr, pw := io.Pipe()
	tops := map[string]bool{}
	var werr error
	written := make(chan struct{})
	go func() {
		defer close(written)
		werr = b.writeItems(pw, items, destDir, path.Base(dest), tops)
		pw.CloseWithError(werr)
	}()
	err = b.box.Extract(ctx, into, pr)
	pr.CloseWithError(errCopyEnded)
	<-written
	// What the context's side failed with says more than the box's view
	// of a stream cut short.
	if werr != nil && !errors.Is(werr, errCopyEnded) {
		return werr
	}
	if err != nil {
		return err
	}
	if st.Chown != "" {
		chown, err := expand(st.Chown, vars)
		if err != nil {
			return b.invalid(st, "%v", err)
		}
		argv := []string{"chown", "-R", "--", chown}
		for _, t := range slices.Sorted(maps.Keys(tops)) {
			argv = append(argv, path.Join(into, t))
		}
		if destDir {
			argv = append(argv, into)
		}
		return b.run(ctx, st, argv, "/")
	}
	return nil
}

// errCopyEnded is what a copy's writer meets once the box stopped reading.
var errCopyEnded = errors.New("the copy ended")

// item is an entry of the build context.
type item struct {
	name string // cleaned, relative; "." is the context's root
	dir  bool
}

// list returns the context's entries, less the ignored ones, with the
// directories their paths imply.
func (b *builder) list() ([]item, error) {
	seen := map[string]bool{".": true}
	out := []item{{name: ".", dir: true}}
	err := walk(b.bctx, func(name string, h *tar.Header, _ io.Reader) error {
		if b.ignore.ignored(name) {
			return nil
		}
		for d := path.Dir(name); d != "." && !seen[d]; d = path.Dir(d) {
			seen[d] = true
			out = append(out, item{name: d, dir: true})
		}
		if !seen[name] {
			seen[name] = true
			out = append(out, item{name: name, dir: h.Typeflag == tar.TypeDir})
		}
		return nil
	})
	return out, err
}

// writeItems writes the tar of the items as they land: a directory's
// contents under it, a file under its own name (base, when the
// destination is a file). tops gets the top-level names written.
func (b *builder) writeItems(w io.Writer, items []item, destDir bool, base string, tops map[string]bool) error {
	tw := tar.NewWriter(w)
	err := walk(b.bctx, func(name string, h *tar.Header, r io.Reader) error {
		if b.ignore.ignored(name) {
			return nil
		}
		for _, it := range items {
			var rel string
			switch {
			case it.dir && it.name == ".":
				rel = name
			case it.dir && strings.HasPrefix(name, it.name+"/"):
				rel = strings.TrimPrefix(name, it.name+"/")
			case !it.dir && name == it.name:
				rel = path.Base(name)
				if !destDir {
					rel = base
				}
			default:
				continue
			}
			if h.Typeflag == tar.TypeLink {
				return fmt.Errorf("%s is a hard link: the build context's hard links are not taken here: %w", clip(name), errdefs.ErrInvalidArgument)
			}
			nh := &tar.Header{Name: rel, Typeflag: h.Typeflag, Mode: h.Mode & 0o7777, Size: h.Size, Linkname: h.Linkname, ModTime: h.ModTime}
			if h.Typeflag == tar.TypeDir {
				nh.Name += "/"
			}
			if err := tw.WriteHeader(nh); err != nil {
				return err
			}
			top, _, _ := strings.Cut(rel, "/")
			tops[top] = true
			if h.Typeflag == tar.TypeReg {
				if _, err := io.Copy(tw, r); err != nil {
					return err
				}
			}
			return nil // each entry once, for its first item
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// addArchive sends a tar archive of the context, as it is, to be unpacked.
func (b *builder) addArchive(ctx context.Context, st Step, name, dest string) error {
	pr, pw := io.Pipe()
	go func() {
		found := false
		err := walk(b.bctx, func(n string, h *tar.Header, r io.Reader) error {
			if n != name || found {
				return nil
			}
			found = true
			_, err := io.Copy(pw, r)
			return err
		})
		pw.CloseWithError(err)
	}()
	err := b.box.Extract(ctx, dest, pr)
	pr.CloseWithError(errCopyEnded)
	return err
}

// isOtherArchive is a compressed tar Docker's ADD unpacks and this one
// cannot (the agent reads tar and gzip).
func isOtherArchive(name string) bool {
	for _, ext := range []string{".tar.xz", ".txz", ".tar.bz2", ".tbz2", ".tbz", ".tar.zst"} {
		if strings.HasSuffix(name, ext) {
			return true
		}
	}
	return false
}

func isArchive(name string) bool {
	for _, ext := range []string{".tar", ".tar.gz", ".tgz"} {
		if strings.HasSuffix(name, ext) {
			return true
		}
	}
	return false
}

// walk calls fn for each file, directory and link of the context, with
// its cleaned name; the context's own root is not an entry.
func walk(bctx Context, fn func(name string, h *tar.Header, r io.Reader) error) error {
	rc, err := bctx.Open()
	if err != nil {
		return err
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return errdefs.Invalid("context", "read the build context: %v", err)
		}
		switch h.Typeflag {
		case tar.TypeReg, tar.TypeDir, tar.TypeSymlink, tar.TypeLink:
		default:
			continue
		}
		name := path.Clean("/" + h.Name)[1:]
		if name == "" {
			continue
		}
		if err := fn(name, h, tr); err != nil {
			return err
		}
	}
}
