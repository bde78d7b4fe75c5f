package images

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
)

// HotcellRef is the image of the hotcell binary that
// deploy/kubernetes/egress-node.yaml runs (hotcell egress-node): no
// registry publishes it, so it is built on a host's engine and given to
// the cluster (docs/kubernetes.md, "Egress").
const HotcellRef = "hotcell/hotcell:latest"

// EgressBaseRef is hotcell/base with what egress-node runs besides the
// binary: iptables (iptables-restore, ip6tables) and ipset. BuildHotcell
// makes it once, from Debian's mirror, and layers each binary on it.
const EgressBaseRef = "hotcell/egress-base:latest"

// HotcellBinary is where the binary goes in HotcellRef, on the PATH.
const HotcellBinary = "/usr/local/bin/hotcell"

// egressPackages are the Debian packages of EgressBaseRef. Debian's
// iptables is the nf_tables one (iptables-nft), as on Debian 12 hosts.
var egressPackages = []string{"iptables", "ipset"}

// Labels of the images BuildHotcell makes: the version of the packages
// step on EgressBaseRef, and the binary's sha256 on HotcellRef (an image of
// the same binary is not rebuilt).
const (
	LabelEgressBaseVersion = "hotcell.egress-base.version"
	LabelHotcellBinary     = "hotcell.binary.sha256"
)

// EgressBaseVersion identifies what the packages step makes.
func EgressBaseVersion() string {
	h := sha256.Sum256([]byte(strings.Join(egressPackages, " ") + "\x00" + BaseVersion))
	return hex.EncodeToString(h[:])[:16]
}

// labelIs reports whether image ref exists with label key = want.
func labelIs(ctx context.Context, c *client.Client, ref, key, want string) (bool, error) {
	img, err := c.ImageInspect(ctx, ref)
	if cerrdefs.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return img.Config != nil && img.Config.Labels[key] == want, nil
}

// EgressBaseCurrent reports whether EgressBaseRef exists and was built
// from this EgressBaseVersion.
func EgressBaseCurrent(ctx context.Context, c *client.Client) (bool, error) {
	return labelIs(ctx, c, EgressBaseRef, LabelEgressBaseVersion, EgressBaseVersion())
}

// BuildEgressBase builds EgressBaseRef on top of hotcell/base (which must
// exist: BuildBase): apt-get installs egressPackages from the Debian
// mirror in a throwaway container. About 30 s.
func BuildEgressBase(ctx context.Context, c *client.Client, progress func(string)) error {
	if progress == nil {
		progress = func(string) {}
	}
	if _, err := c.ImageInspect(ctx, BaseRef); err != nil {
		return fmt.Errorf("build image %s: needs %s first (hotcell image build): %w", EgressBaseRef, BaseRef, err)
	}
	script := "set -e; export DEBIAN_FRONTEND=noninteractive; apt-get update; " +
		"apt-get install -y --no-install-recommends " + strings.Join(egressPackages, " ") + "; " +
		"apt-get clean; rm -rf /var/lib/apt/lists/*; iptables --version; command -v ipset iptables-restore ip6tables"
	progress(fmt.Sprintf("building %s from %s: apt-get install %s", EgressBaseRef, BaseRef, strings.Join(egressPackages, " ")))
	changes := append(append([]string(nil), baseChanges...), "LABEL "+LabelEgressBaseVersion+"="+EgressBaseVersion())
	return buildInContainer(ctx, c, BaseRef, EgressBaseRef, script, nil, changes, progress)
}

// BuildHotcell builds ref as the hotcell image of DaemonSets such as
// egress-node: EgressBaseRef (built first when missing or stale, which
// needs the Debian mirror) with the static hotcell binary at
// HotcellBinary. The binary's layer is made without running anything and
// without a network, in seconds; an image of the same binary is kept.
func BuildHotcell(ctx context.Context, c *client.Client, ref, binary string, progress func(string)) error {
	if progress == nil {
		progress = func(string) {}
	}
	if err := checkStatic(binary); err != nil {
		return fmt.Errorf("build image %s: %w (build it with CGO_ENABLED=0)", ref, err)
	}
	sum, err := fileSHA256(binary)
	if err != nil {
		return fmt.Errorf("build image %s: %w", ref, err)
	}
	ok, err := EgressBaseCurrent(ctx, c)
	if err != nil {
		return fmt.Errorf("build image %s: %w", ref, err)
	}
	if !ok {
		if err := BuildEgressBase(ctx, c, progress); err != nil {
			return err
		}
	} else if same, err := labelIs(ctx, c, ref, LabelHotcellBinary, sum); err == nil && same {
		if fromBase, err := builtOn(ctx, c, ref, EgressBaseRef); err == nil && fromBase {
			progress(ref + " has this binary already; not rebuilding")
			return nil
		}
	}
	progress(fmt.Sprintf("building %s from %s with %s", ref, EgressBaseRef, binary))
	// A container that never starts: the copy is its whole change.
	cr, err := c.ContainerCreate(ctx, client.ContainerCreateOptions{
		Image:  EgressBaseRef,
		Config: &container.Config{Cmd: []string{"/bin/true"}, Labels: map[string]string{LabelImage: "build"}},
	})
	if err != nil {
		return fmt.Errorf("build image %s: create build container: %w", ref, err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_, _ = c.ContainerRemove(rctx, cr.ID, client.ContainerRemoveOptions{Force: true})
	}()
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(binaryTar(pw, binary)) }()
	_, err = c.CopyToContainer(ctx, cr.ID, client.CopyToContainerOptions{DestinationPath: "/", Content: pr})
	pr.CloseWithError(io.ErrClosedPipe) // ends the writer if the copy stopped early
	if err != nil {
		return fmt.Errorf("build image %s: copy the binary: %w", ref, err)
	}
	changes := append(append([]string(nil), commonChanges...),
		"LABEL "+LabelHotcellBinary+"="+sum,
		`ENTRYPOINT ["`+HotcellBinary+`"]`, `CMD ["--help"]`, "WORKDIR /")
	old := imageID(ctx, c, ref)
	if _, err := c.ContainerCommit(ctx, cr.ID, client.ContainerCommitOptions{Reference: ref, Changes: changes}); err != nil {
		return fmt.Errorf("build image %s: commit: %w", ref, err)
	}
	dropReplaced(ctx, c, ref, old)
	return nil
}

// builtOn reports whether image ref has every layer of base (so a rebuilt
// base rebuilds ref).
func builtOn(ctx context.Context, c *client.Client, ref, base string) (bool, error) {
	img, err := c.ImageInspect(ctx, ref)
	if err != nil {
		return false, err
	}
	b, err := c.ImageInspect(ctx, base)
	if err != nil {
		return false, err
	}
	if len(b.RootFS.Layers) >= len(img.RootFS.Layers) {
		return false, nil
	}
	for i, l := range b.RootFS.Layers {
		if img.RootFS.Layers[i] != l {
			return false, nil
		}
	}
	return true, nil
}

func fileSHA256(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// binaryTar writes a tar of the binary at HotcellBinary to w (its
// directories are in hotcell/base).
func binaryTar(w io.Writer, binary string) error {
	r := &rootfs{tw: tar.NewWriter(w)}
	if err := r.hostFile(strings.TrimPrefix(HotcellBinary, "/"), 0o755, binary); err != nil {
		return err
	}
	return r.tw.Close()
}
