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
	"time"

	"github.com/hotcell/hotcell/internal/errdefs"
)

// Box is where a stage runs: a box of its base.
type Box interface {
	// Run runs argv as user (empty: the box's own) in cwd, with env laid
	// over the box's, passing its output as it comes, and returns its
	// exit code.
	Run(ctx context.Context, argv []string, env map[string]string, cwd, user string, output func([]byte)) (int, error)
	// Extract unpacks a tar (or tar.gz) into dir, made if missing.
	Extract(ctx context.Context, dir string, tar io.Reader) error
	// Mkdir makes dir and its parents; an existing one is no error.
	Mkdir(ctx context.Context, dir string) error
	// Move renames from to to (an error wrapping errdefs.ErrNotFound when
	// from is missing).
	Move(ctx context.Context, from, to string) error
	// Remove removes p and what is under it.
	Remove(ctx context.Context, p string) error
	// Archive streams a tar of the box's path, a symlink there followed:
	// a directory's contents (dir true), or a regular file as one entry
	// named as it.
	Archive(ctx context.Context, path string) (tar io.ReadCloser, dir bool, err error)
	// List lists directory dir of the box (a symlink there followed), each
	// entry with whether it is a directory (not a link to one).
	List(ctx context.Context, dir string) (map[string]bool, error)
}

// Boxes starts and ends the boxes a build runs in.
type Boxes interface {
	// Start starts a box of image (an error wrapping
	// errdefs.ErrNotFound when there is no such image).
	Start(ctx context.Context, image string) (Box, error)
	// Save commits a box's root filesystem, with env laid over its own,
	// as an image Start takes, and returns its name. The caller of Build
	// removes the images Save made once the build is over.
	Save(ctx context.Context, box Box, env map[string]string) (string, error)
	// Drop destroys a box Start made.
	Drop(ctx context.Context, box Box) error
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

// state is what a stage leaves a stage built on it, besides its files.
type state struct {
	env     map[string]string // ENV
	labels  map[string]string
	workdir string
	user    string
	shell   []string
}

func (s state) clone() state {
	return state{env: maps.Clone(s.env), labels: maps.Clone(s.labels), workdir: s.workdir, user: s.user, shell: slices.Clone(s.shell)}
}

// graph is what a plan's stages need of each other.
type graph struct {
	image   []string // a stage's base image, "" when it builds on a stage
	base    []int    // the stage a stage builds on, or -1
	need    []bool   // the last stage needs it, itself or through others
	pass    []bool   // its box passes on to the one stage built on it
	save    []bool   // it is saved for the stages built on it to start from
	copyEnd []int    // the last stage whose COPY --from reads it, or -1
	imgEnd  map[string]int
	steps   int // the numbered steps of the stages needed, FROMs included
}

// plan resolves the stages' bases (their ARGs substituted, a name of an
// earlier stage being that stage) and what each needs of the others. As
// BuildKit does, only the stages the last one needs run.
func (p Plan) graph() (graph, error) {
	n := len(p.Stages)
	g := graph{image: make([]string, n), base: make([]int, n), need: make([]bool, n), pass: make([]bool, n), save: make([]bool, n), copyEnd: make([]int, n), imgEnd: map[string]int{}}
	globals, err := p.globals()
	if err != nil {
		return g, err
	}
	for i, st := range p.Stages {
		from, err := expand(st.From, globals)
		if err != nil {
			return g, errdefs.Invalid("dockerfile", "line %d: FROM: %v", st.Line, err)
		}
		if from == "" {
			return g, errdefs.Invalid("dockerfile", "line %d: FROM %s is empty once its ARGs are substituted", st.Line, clip(st.From))
		}
		g.base[i] = slices.IndexFunc(p.Stages[:i], func(b Stage) bool { return b.Name != "" && b.Name == strings.ToLower(from) })
		if g.base[i] < 0 {
			g.image[i] = from
		}
		g.copyEnd[i] = -1
	}
	g.need[n-1] = true
	for i := n - 1; i >= 0; i-- {
		if !g.need[i] {
			continue
		}
		g.steps += 1 + len(p.Stages[i].Steps)
		if j := g.base[i]; j >= 0 {
			g.need[j] = true
		}
		for _, st := range p.Stages[i].Steps {
			reads := func(from string, stage int) {
				switch {
				case from == "":
				case stage >= 0:
					g.need[stage] = true
					g.copyEnd[stage] = max(g.copyEnd[stage], i)
				default:
					g.imgEnd[from] = max(g.imgEnd[from], i)
				}
			}
			reads(st.CopyFrom, st.FromStage)
			for _, m := range st.Mounts {
				reads(m.From, m.FromStage)
			}
		}
	}
	children := make([]int, n)
	for i := range n {
		if g.need[i] && g.base[i] >= 0 {
			children[g.base[i]]++
		}
	}
	for j := range n {
		g.pass[j] = children[j] == 1 && g.copyEnd[j] < 0
		g.save[j] = children[j] > 0 && !g.pass[j]
	}
	return g, nil
}

// globals are the ARGs before the first FROM, substituted.
func (p Plan) globals() (map[string]string, error) {
	vars := map[string]string{}
	for _, kv := range p.PreArgs {
		if kv.HasValue {
			v, err := expand(kv.Value, vars)
			if err != nil {
				return nil, errdefs.Invalid("dockerfile", "ARG %s: %v", kv.Key, err)
			}
			vars[kv.Key] = v
		}
	}
	return vars, nil
}

// build is one Build's state.
type build struct {
	p        Plan
	g        graph
	boxes    Boxes
	bctx     Context
	ignore   *ignorer
	progress func(string)
	globals  map[string]string
	numbered int            // the last numbered step
	stage    []Box          // the boxes of stages still of use
	states   []state        // what each stage run left
	images   []string       // what each saved stage was saved as
	imgBox   map[string]Box // boxes of images COPY --from reads
}

// Build runs the plan's stages the last one needs, in order, each in a
// box of its base: an image, or a stage before it (the same box when it
// is the only stage built on it and nothing copies from it, else a box of
// the image Save made of it). It reads COPY's and ADD's files from bctx
// (less what its .dockerignore excludes), and reports each step and the
// output of each RUN to progress. It returns the last stage's box, for
// the caller to commit and drop, and the image's env and labels; every
// other box it started is dropped. A step that fails (a RUN that exits
// non-zero, a COPY of nothing) is errdefs.ErrInvalidArgument naming its
// line, and drops every box.
func Build(ctx context.Context, p Plan, bctx Context, boxes Boxes, progress func(string)) (last Box, res Result, err error) {
	if progress == nil {
		progress = func(string) {}
	}
	ig, err := readIgnore(bctx)
	if err != nil {
		return nil, Result{}, err
	}
	g, err := p.graph()
	if err != nil {
		return nil, Result{}, err
	}
	globals, _ := p.globals()
	n := len(p.Stages)
	b := &build{
		p: p, g: g, boxes: boxes, bctx: bctx, ignore: ig, progress: progress, globals: globals,
		stage: make([]Box, n), states: make([]state, n), images: make([]string, n), imgBox: map[string]Box{},
	}
	defer func() {
		keep := Box(nil)
		if err == nil {
			keep = last
		}
		b.drop(ctx, func(bx Box) bool { return bx != keep })
	}()
	for i := range n {
		if !g.need[i] {
			continue
		}
		if err := b.runStage(ctx, i); err != nil {
			return nil, Result{}, err
		}
		// Boxes no stage after this one reads go.
		b.drop(ctx, func(bx Box) bool {
			for j, sb := range b.stage {
				if sb == bx {
					return j != n-1 && !g.pass[j] && g.copyEnd[j] <= i
				}
			}
			for img, ib := range b.imgBox {
				if ib == bx {
					return g.imgEnd[img] <= i
				}
			}
			return false
		})
	}
	st := b.states[n-1]
	return b.stage[n-1], Result{Env: st.env, Labels: st.labels}, nil
}

// drop drops the boxes the build holds that which picks.
func (b *build) drop(ctx context.Context, which func(Box) bool) {
	ctx = context.WithoutCancel(ctx)
	for i, bx := range b.stage {
		if bx != nil && which(bx) {
			b.stage[i] = nil
			if err := b.boxes.Drop(ctx, bx); err != nil {
				b.progress(fmt.Sprintf(" ---> could not drop the box of stage %d: %v", i, err))
			}
		}
	}
	for img, bx := range b.imgBox {
		if which(bx) {
			delete(b.imgBox, img)
			if err := b.boxes.Drop(ctx, bx); err != nil {
				b.progress(fmt.Sprintf(" ---> could not drop the box of %s: %v", img, err))
			}
		}
	}
}

// number reports the next numbered step, as Docker's builder numbers
// them (FROMs included), so the CLI's status line reads them alike.
func (b *build) number(text string) {
	b.numbered++
	b.progress(fmt.Sprintf("Step %d/%d : %s", b.numbered, b.g.steps, text))
}

// start starts a box of image for what line asks.
func (b *build) start(ctx context.Context, line int, op, image string) (Box, error) {
	bx, err := b.boxes.Start(ctx, image)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, stepError{errdefs.Invalid("dockerfile", "line %d: %s %s: %v", line, op, image, err)}
	}
	if err != nil {
		return nil, fmt.Errorf("start a box of %s: %w", image, err)
	}
	return bx, nil
}

// runStage runs stage i in its box.
func (b *build) runStage(ctx context.Context, i int) error {
	s := b.p.Stages[i]
	from := b.g.image[i]
	st := state{env: map[string]string{}, labels: map[string]string{}, workdir: "/", shell: []string{"/bin/sh", "-c"}}
	if j := b.g.base[i]; j >= 0 {
		from = b.p.Stages[j].Name
		st = b.states[j].clone()
	}
	text := "FROM " + from
	if s.Name != "" {
		text += " AS " + s.Name
	}
	b.number(text)
	var box Box
	switch j := b.g.base[i]; {
	case j < 0:
		bx, err := b.start(ctx, s.Line, "FROM", from)
		if err != nil {
			return err
		}
		box = bx
	case b.g.pass[j]:
		box, b.stage[j] = b.stage[j], nil
		b.progress(fmt.Sprintf(" ---> going on in the box of stage %s", from))
	default:
		bx, err := b.start(ctx, s.Line, "FROM", b.images[j])
		if err != nil {
			return err
		}
		box = bx
	}
	b.stage[i] = box
	sb := &builder{build: b, state: st, box: box, args: map[string]string{}}
	for _, step := range s.Steps {
		b.number(step.Text)
		if err := sb.step(ctx, step); err != nil {
			var se stepError
			if errors.As(err, &se) {
				return err
			}
			return fmt.Errorf("dockerfile line %d: %s: %w", step.Line, step.Op, err)
		}
	}
	b.states[i] = sb.state
	if b.g.save[i] {
		b.progress(fmt.Sprintf(" ---> saving stage %d for the stages built on it", i))
		img, err := b.boxes.Save(ctx, box, sb.state.env)
		if err != nil {
			return fmt.Errorf("save stage %d: %w", i, err)
		}
		b.images[i] = img
	}
	return nil
}

// source is the box a --from of op reads (line's): an earlier stage's, or
// a box of the image, started on its first use.
func (b *build) source(ctx context.Context, line int, op, from string, stage int) (Box, error) {
	if stage >= 0 {
		if bx := b.stage[stage]; bx != nil {
			return bx, nil
		}
		return nil, fmt.Errorf("the box of stage %d is gone", stage)
	}
	if bx, ok := b.imgBox[from]; ok {
		return bx, nil
	}
	b.progress(fmt.Sprintf(" ---> starting a box of %s to copy from", from))
	bx, err := b.start(ctx, line, op, from)
	if err != nil {
		return nil, err
	}
	b.imgBox[from] = bx
	return bx, nil
}

// builder runs one stage's steps in its box.
type builder struct {
	*build
	state
	box  Box
	args map[string]string // ARG, for RUN's env and substitution
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
				if v, ok := b.globals[kv.Key]; ok {
					b.args[kv.Key] = v // a global ARG's value, as Docker's builder gives
				} else if _, ok := b.args[kv.Key]; !ok {
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
		switch {
		case st.Script:
			argv = append(slices.Clone(b.shell), script(st.Heredocs[0]))
		case argv == nil:
			argv = append(slices.Clone(b.shell), st.Shell)
		}
		if st.NoNetwork {
			b.progress(" ---> --network=none: the step runs on the build's network (template_build_network)")
		}
		if len(st.Mounts) == 0 {
			return b.run(ctx, st, argv, b.workdir)
		}
		return b.runMounted(ctx, st, argv)
	case OpCopy, OpAdd:
		return b.copy(ctx, st)
	}
	return b.invalid(st, "is not taken here")
}

// script is the shell command that runs a RUN's here-document: the
// document itself, or, when it starts with #!, its interpreter reading it.
func script(d Heredoc) string {
	body := d.text()
	first, _, _ := strings.Cut(body, "\n")
	interp, ok := strings.CutPrefix(first, "#!")
	if !ok || strings.TrimSpace(interp) == "" {
		return body
	}
	const end = "HOTCELL_HEREDOC_END"
	return strings.TrimSpace(interp) + " <<'" + end + "'\n" + body + end
}

// text is the document's body, its leading tabs gone for <<-.
func (d Heredoc) text() string {
	if !d.Strip {
		return d.Body
	}
	lines := strings.SplitAfter(d.Body, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimLeft(l, "\t")
	}
	return strings.Join(lines, "")
}

// runMounted runs a RUN with its mounts in place, and takes them away
// after, whatever the command did: what was at a mount's target before
// is back, and what the command wrote there is not in the image.
func (b *builder) runMounted(ctx context.Context, st Step, argv []string) error {
	var undo []func(context.Context) error
	err := b.mount(ctx, st, &undo)
	if err == nil {
		err = b.run(ctx, st, argv, b.workdir)
	}
	for i := len(undo) - 1; i >= 0; i-- {
		if uerr := undo[i](context.WithoutCancel(ctx)); uerr != nil && err == nil {
			err = fmt.Errorf("dockerfile line %d: take the mounts of RUN away: %w", st.Line, uerr)
		}
	}
	return err
}

// mount puts a RUN's mounts in place, each with how to take it away in
// undo: the target's old contents are moved aside, and an empty
// directory (cache, tmpfs) or a copy of the source (bind) is put there.
func (b *builder) mount(ctx context.Context, st Step, undo *[]func(context.Context) error) error {
	for i, m := range st.Mounts {
		if m.Type == MountSecret {
			id := m.ID
			if id == "" {
				id = path.Base(m.Target)
			}
			if m.Required {
				return b.invalid(st, "the secret %s: template builds are given no secrets", clip(id))
			}
			b.progress(fmt.Sprintf(" ---> the secret %s is not given: template builds take none", clip(id)))
			continue
		}
		t, err := expand(m.Target, b.vars())
		if err != nil {
			return b.invalid(st, "%v", err)
		}
		target := b.abs(t)
		if target == "/" {
			return b.invalid(st, "a mount's target is /")
		}
		aside := fmt.Sprintf("%s.hotcell-mount-%d", target, i)
		existed := true
		if err := b.box.Move(ctx, target, aside); errors.Is(err, errdefs.ErrNotFound) {
			existed = false
		} else if err != nil {
			return fmt.Errorf("move %s aside for the mount: %w", target, err)
		}
		*undo = append(*undo, func(ctx context.Context) error {
			if err := b.box.Remove(ctx, target); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
				return err
			}
			switch {
			case existed:
				return b.box.Move(ctx, aside, target)
			case m.Type != MountBind:
				return b.box.Mkdir(ctx, target) // the mount point stays, as BuildKit's does
			}
			return nil
		})
		if m.Type != MountBind {
			if err := b.box.Mkdir(ctx, target); err != nil {
				return err
			}
			continue
		}
		// A bind mount is a copy, gone after the step.
		cp := Step{Line: st.Line, Text: st.Text, Op: OpCopy, Sources: []string{m.Source}, Dest: target, CopyFrom: m.From, FromStage: m.FromStage, Chmod: -1}
		if err := b.copy(ctx, cp); err != nil {
			return err
		}
	}
	return nil
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

// dest is a COPY's or ADD's destination, absolute, and whether it names
// a directory (a trailing /).
func (b *builder) dest(st Step) (dest string, dir bool, err error) {
	dest, err = expand(st.Dest, b.vars())
	if err != nil {
		return "", false, b.invalid(st, "%v", err)
	}
	dir = strings.HasSuffix(dest, "/") || dest == "." || dest == ".."
	return b.abs(dest), dir, nil
}

// copy sends the context's files a COPY or ADD names into the box.
func (b *builder) copy(ctx context.Context, st Step) error {
	if st.CopyFrom != "" {
		return b.copyFrom(ctx, st)
	}
	if len(st.Heredocs) > 0 {
		return b.copyHeredocs(ctx, st)
	}
	vars := b.vars()
	dest, destDir, err := b.dest(st)
	if err != nil {
		return err
	}
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
			if st.Chmod >= 0 {
				return b.invalid(st, "%s: an archive unpacked keeps its own modes: --chmod is not taken with it", clip(it.name))
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
	return b.land(ctx, st, into, destDir, func(w io.Writer, tops map[string]bool) error {
		return b.writeItems(w, items, destDir, path.Base(dest), st.Chmod, tops)
	})
}

// land extracts into into the tar write writes (noting the top-level
// names it writes in tops), then gives them to the COPY's --chown.
func (b *builder) land(ctx context.Context, st Step, into string, destDir bool, write func(w io.Writer, tops map[string]bool) error) error {
	chownInto, err := b.isNew(ctx, st, into, destDir)
	if err != nil {
		return err
	}
	pr, pw := io.Pipe()
	tops := map[string]bool{}
	var werr error
	written := make(chan struct{})
	go func() {
		defer close(written)
		werr = write(pw, tops)
		pw.CloseWithError(werr)
	}()
	err = b.box.Extract(ctx, into, pr)
	pr.CloseWithError(errCopyEnded)
	<-written
	// What the writing side failed with says more than the box's view of
	// a stream cut short.
	if werr != nil && !errors.Is(werr, errCopyEnded) {
		return werr
	}
	if err != nil {
		return err
	}
	return b.chown(ctx, st, into, tops, chownInto)
}

// copyHeredocs writes a COPY's here-documents as files (0644, or its
// --chmod): the one document as the destination unless it ends with /,
// else each named by its delimiter in the destination directory. A
// document's variables are substituted unless its delimiter is quoted.
func (b *builder) copyHeredocs(ctx context.Context, st Step) error {
	dest, destDir, err := b.dest(st)
	if err != nil {
		return err
	}
	if len(st.Heredocs) > 1 && !destDir {
		return b.invalid(st, "when copying more than one source the destination must be a directory and end with a /")
	}
	into, name := dest, ""
	if !destDir {
		into, name = path.Dir(dest), path.Base(dest)
	}
	mode := int64(0o644)
	if st.Chmod >= 0 {
		mode = st.Chmod
	}
	var files []struct{ name, body string }
	for _, d := range st.Heredocs {
		body := d.text()
		if !d.Quoted {
			if body, err = expand(body, b.vars()); err != nil {
				return b.invalid(st, "<<%s: %v", d.Name, err)
			}
		}
		n := d.Name
		if name != "" {
			n = name
		}
		files = append(files, struct{ name, body string }{n, body})
	}
	return b.land(ctx, st, into, destDir, func(w io.Writer, tops map[string]bool) error {
		tw := tar.NewWriter(w)
		for _, f := range files {
			if err := tw.WriteHeader(&tar.Header{Name: f.name, Typeflag: tar.TypeReg, Mode: mode, Size: int64(len(f.body)), ModTime: time.Now()}); err != nil {
				return err
			}
			if _, err := io.WriteString(tw, f.body); err != nil {
				return err
			}
			tops[f.name] = true
		}
		return tw.Close()
	})
}

// isNew says whether a COPY with --chown makes its destination directory
// into, which the --chown then gets too (an existing one keeps its
// owner, as with Docker's builder).
func (b *builder) isNew(ctx context.Context, st Step, into string, destDir bool) (bool, error) {
	if st.Chown == "" || !destDir {
		return false, nil
	}
	code, err := b.box.Run(ctx, []string{"test", "-e", into}, nil, "/", "", func([]byte) {})
	return code != 0, err
}

// chown gives what a COPY wrote into into (its top-level names, and into
// itself when the COPY made it) to its --chown.
func (b *builder) chown(ctx context.Context, st Step, into string, tops map[string]bool, chownInto bool) error {
	if st.Chown == "" {
		return nil
	}
	chown, err := expand(st.Chown, b.vars())
	if err != nil {
		return b.invalid(st, "%v", err)
	}
	argv := []string{"chown", "-R", "--", chown}
	for _, t := range slices.Sorted(maps.Keys(tops)) {
		argv = append(argv, path.Join(into, t))
	}
	if chownInto {
		argv = append(argv, into)
	}
	return b.run(ctx, st, argv, "/")
}

// copyFrom copies files of another box (COPY --from): each source, a path
// of that box, is a directory whose contents go, or a file.
func (b *builder) copyFrom(ctx context.Context, st Step) error {
	src, err := b.source(ctx, st.Line, "COPY --from", st.CopyFrom, st.FromStage)
	if err != nil {
		return err
	}
	dest, destDir, err := b.dest(st)
	if err != nil {
		return err
	}
	// Each source is a path of the other box, or a wildcard in its last
	// name: what it matches in that directory.
	type source struct {
		path  string
		match map[string]bool // a wildcard's matches: name -> a directory
	}
	var srcs []source
	items := 0
	for _, s := range st.Sources {
		s, err := expand(s, b.vars())
		if err != nil {
			return b.invalid(st, "%v", err)
		}
		p := path.Clean("/" + s)
		if !isGlob(path.Base(p)) {
			srcs = append(srcs, source{path: p})
			items++
			continue
		}
		m, err := b.matches(ctx, st, src, path.Dir(p), path.Base(p))
		if err != nil {
			return err
		}
		srcs = append(srcs, source{path: path.Dir(p), match: m})
		items += len(m)
	}
	if items > 1 && !destDir {
		return b.invalid(st, "when copying more than one source the destination must be a directory and end with a /")
	}
	// A lone file lands as the destination, unless it ends with /; a
	// directory's contents go into it. The first source opened says which.
	first, dir, err := src.Archive(ctx, srcs[0].path)
	if err != nil {
		return b.fromErr(st, srcs[0].path, err)
	}
	defer first.Close() // closed once read too; this, when land fails first
	loneDir := dir
	if srcs[0].match != nil {
		for _, d := range srcs[0].match {
			loneDir = d
		}
	}
	into, name := dest, ""
	if items == 1 && !loneDir && !destDir {
		into, name = path.Dir(dest), path.Base(dest)
	}
	destDir = destDir || items > 1 || loneDir
	return b.land(ctx, st, into, destDir, func(w io.Writer, tops map[string]bool) error {
		tw := tar.NewWriter(w)
		rc, dir := first, dir
		for i, sc := range srcs {
			if i > 0 {
				var err error
				if rc, dir, err = src.Archive(ctx, sc.path); err != nil {
					return b.fromErr(st, sc.path, err)
				}
			}
			err := retar(tw, rc, func(n string) string {
				if sc.match != nil {
					top, rest, _ := strings.Cut(n, "/")
					isDir, ok := sc.match[top]
					switch {
					case !ok:
						return "" // not matched
					case isDir:
						return rest // its contents; "" is itself
					case name != "":
						return name
					}
					return top
				}
				switch {
				case dir:
					return n
				case name != "":
					return name
				}
				return path.Base(sc.path)
			}, st.Chmod, tops)
			rc.Close()
			if err != nil {
				return fmt.Errorf("copy %s of %s: %w", sc.path, st.CopyFrom, err)
			}
		}
		return tw.Close()
	})
}

// matches lists what a wildcard of COPY --from matches in dir of box:
// the names of dir's entries, each with whether it is a directory. None is
// an error naming the source.
func (b *builder) matches(ctx context.Context, st Step, box Box, dir, pat string) (map[string]bool, error) {
	entries, err := box.List(ctx, dir)
	if errors.Is(err, errdefs.ErrInvalidArgument) { // the agent's answer for a file
		return nil, b.invalid(st, "%s of %s is not a directory", clip(dir), st.CopyFrom)
	}
	if err != nil {
		return nil, b.fromErr(st, dir, err)
	}
	m := map[string]bool{}
	for name, isDir := range entries {
		if globMatch(pat, name) {
			m[name] = isDir
		}
	}
	if len(m) == 0 {
		return nil, b.invalid(st, "%s: nothing of %s of %s matches it", clip(pat), clip(dir), st.CopyFrom)
	}
	return m, nil
}

// fromErr is a COPY --from source the other box could not give.
func (b *builder) fromErr(st Step, p string, err error) error {
	if errors.Is(err, errdefs.ErrNotFound) || errors.Is(err, errdefs.ErrInvalidArgument) {
		return b.invalid(st, "%s of %s: %v", clip(p), st.CopyFrom, err)
	}
	return fmt.Errorf("read %s of %s: %w", p, st.CopyFrom, err)
}

// retar writes the entries of the tar r to tw, each named by rename (of
// its cleaned name; "" leaves it out), owned by root as a COPY's files are,
// their mode chmod when it is not negative. tops gets the
// top-level names written.
func retar(tw *tar.Writer, r io.Reader, rename func(string) string, chmod int64, tops map[string]bool) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		switch h.Typeflag {
		case tar.TypeReg, tar.TypeDir, tar.TypeSymlink, tar.TypeLink:
		default:
			continue // a device or a fifo, as a context's are skipped
		}
		name := path.Clean("/" + h.Name)[1:]
		if name == "" {
			continue
		}
		to := rename(name)
		if to == "" {
			continue // not copied
		}
		nh := landed(h, to, chmod)
		if h.Typeflag == tar.TypeLink {
			if nh.Linkname = rename(path.Clean("/" + h.Linkname)[1:]); nh.Linkname == "" {
				continue // a link to what is not copied
			}
		}
		if err := tw.WriteHeader(nh); err != nil {
			return err
		}
		top, _, _ := strings.Cut(nh.Name, "/")
		tops[top] = true
		if h.Typeflag == tar.TypeReg {
			if _, err := io.Copy(tw, tr); err != nil {
				return err
			}
		}
	}
}

// landed is the header of an entry a COPY writes as name: its type, mode
// bits (chmod's when not negative), size, link and time, owned by root.
func landed(h *tar.Header, name string, chmod int64) *tar.Header {
	nh := &tar.Header{Name: name, Typeflag: h.Typeflag, Mode: h.Mode & 0o7777, Size: h.Size, Linkname: h.Linkname, ModTime: h.ModTime}
	if chmod >= 0 && h.Typeflag != tar.TypeSymlink {
		nh.Mode = chmod
	}
	if h.Typeflag == tar.TypeDir {
		nh.Name += "/"
	}
	if h.Typeflag != tar.TypeReg {
		nh.Size = 0
	}
	return nh
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
func (b *builder) writeItems(w io.Writer, items []item, destDir bool, base string, chmod int64, tops map[string]bool) error {
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
			nh := landed(h, rel, chmod)
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
