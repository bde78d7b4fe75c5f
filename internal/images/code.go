package images

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
)

// CodeRef is the code-interpreter image: hotcell/base plus Jupyter's Python
// kernel, the scientific stack and Node.js, with hotcell's code server
// (docs/code.md).
const CodeRef = "hotcell/code:latest"

// CodeDir is where the code server lives in hotcell/code; CodeServer is its
// program and CodePort the port it serves E2B's code-interpreter protocol
// on, on the sandbox's loopback.
const (
	CodeDir    = "/usr/lib/hotcell/code"
	CodeServer = CodeDir + "/codeserver.py"
	CodePort   = 49999
)

// LabelCodeVersion carries CodeVersion() on a built hotcell/code, so that an
// image made from other packages or another server is rebuilt.
const LabelCodeVersion = "hotcell.code.version"

// codePackages are the Debian packages hotcell/code adds to hotcell/base;
// all of them come from Debian (no PyPI, no npm).
var codePackages = []string{
	"python3-ipykernel", "python3-jupyter-client", "python3-matplotlib-inline",
	"python3-matplotlib", "python3-pandas", "python3-numpy", "nodejs",
}

//go:embed code/codeserver.py code/jsrunner.js
var codeFiles embed.FS

// CodeVersion identifies what BuildCode makes: a hash of the package list
// and the code server's files.
func CodeVersion() string {
	h := sha256.New()
	h.Write([]byte(strings.Join(codePackages, " ") + "\x00" + BaseVersion + "\x00"))
	names, _ := fs.Glob(codeFiles, "code/*")
	sort.Strings(names)
	for _, n := range names {
		data, _ := codeFiles.ReadFile(n)
		fmt.Fprintf(h, "%s\x00%d\x00", n, len(data))
		h.Write(data)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// CodeImageCurrent reports whether ref exists and was built from this
// CodeVersion.
func CodeImageCurrent(ctx context.Context, c *client.Client, ref string) (bool, error) {
	img, err := c.ImageInspect(ctx, ref)
	if cerrdefs.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return img.Config != nil && img.Config.Labels[LabelCodeVersion] == CodeVersion(), nil
}

// BuildCode builds ref as hotcell/code on top of hotcell/base (which must
// exist: BuildBase): apt-get installs codePackages from the Debian mirror
// in a throwaway container, the code server goes to CodeDir, and
// matplotlib's font cache is built so the first plot is not slow.
func BuildCode(ctx context.Context, c *client.Client, ref string, progress func(string)) error {
	if progress == nil {
		progress = func(string) {}
	}
	if _, err := c.ImageInspect(ctx, BaseRef); err != nil {
		return fmt.Errorf("build image %s: needs %s first (hotcell image build): %w", ref, BaseRef, err)
	}
	files, err := codeTar()
	if err != nil {
		return fmt.Errorf("build image %s: %w", ref, err)
	}
	script := "set -e; export DEBIAN_FRONTEND=noninteractive; apt-get update; " +
		"apt-get install -y --no-install-recommends " + strings.Join(codePackages, " ") + "; " +
		"apt-get clean; rm -rf /var/lib/apt/lists/*; " +
		"python3 -c 'import matplotlib.pyplot, pandas, ipykernel, jupyter_client'; " +
		"su " + UserName + " -c \"python3 -c 'import matplotlib.pyplot'\"; " +
		"node --version; python3 -m py_compile " + CodeServer
	progress(fmt.Sprintf("building %s from %s: apt-get install %s", ref, BaseRef, strings.Join(codePackages, " ")))
	changes := append(append([]string(nil), baseChanges...), "LABEL "+LabelCodeVersion+"="+CodeVersion())
	return buildInContainer(ctx, c, BaseRef, ref, script, bytes.NewReader(files), changes, progress)
}

// codeTar is the code server's files as a tar rooted at /.
func codeTar() ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := []string{"usr/", "usr/lib/", "usr/lib/hotcell/", strings.TrimPrefix(CodeDir, "/") + "/"}
	for _, d := range dirs {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755}); err != nil {
			return nil, err
		}
	}
	names, err := fs.Glob(codeFiles, "code/*")
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		data, err := codeFiles.ReadFile(n)
		if err != nil {
			return nil, err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(CodeDir, "/") + "/" + path.Base(n), Mode: 0o644, Size: int64(len(data))}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
