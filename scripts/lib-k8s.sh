# The test cluster: a real single-node Kubernetes for hotcell's Kubernetes
# tests, built from the Go module proxy and Debian packages only (no
# container registry). Sourced by lib.sh; scripts/k8s is its command line;
# docs/kubernetes.md explains the layout and the pitfalls.

K8S_VERSION=${HOTCELL_K8S_VERSION:-v1.36.3}
ETCD_VERSION=${HOTCELL_ETCD_VERSION:-v3.6.16}
# Binaries are built once per version under K8S_BIN_DIR (the path is the
# version stamp); the Go build cache is kept, so a rebuild is ~80 s.
K8S_LIB=${HOTCELL_K8S_LIB:-/usr/local/lib/hotcell/k8s}
K8S_BIN_DIR=$K8S_LIB/$K8S_VERSION
ETCD_BIN_DIR=$K8S_LIB/etcd-$ETCD_VERSION
# Everything the running cluster writes lives under K8S_STATE.
K8S_STATE=${HOTCELL_K8S_STATE:-/var/lib/hotcell-k8s}
K8S_BRIDGE=${HOTCELL_K8S_BRIDGE:-hck8s0}
K8S_POD_CIDR=${HOTCELL_K8S_POD_CIDR:-10.244.0.0/24}
# The bridge's own address: the host address pods reach (a daemon a pod
# must dial listens here, not on loopback, which pods cannot reach).
K8S_HOST_IP=${HOTCELL_K8S_HOST_IP:-10.244.0.1}
K8S_SERVICE_CIDR=${HOTCELL_K8S_SERVICE_CIDR:-10.96.0.0/24}
K8S_APISERVER_PORT=${HOTCELL_K8S_APISERVER_PORT:-6443}
# The cluster's own registry (Debian's docker-registry, on loopback), where
# the hotcell driver pushes the images it makes (snapshots, templates saved
# from a sandbox) and the node's containerd pulls them from.
K8S_REGISTRY=${HOTCELL_K8S_REGISTRY:-127.0.0.1:5055}
K8S_REGISTRY_USER=hotcell
# The StorageClass of the controller's hostPath provisioner, and where it
# makes its volumes (fixed in Kubernetes: /tmp/hostpath_pv).
K8S_STORAGE_CLASS=hotcell-hostpath
K8S_HOSTPATH_DIR=/tmp/hostpath_pv
# containerd's sandbox_image; the pause image is built here and imported
# under this name, so nothing is ever pulled.
K8S_PAUSE_IMAGE=registry.k8s.io/pause:3.10.1
K8S_NODE=${HOTCELL_K8S_NODE:-hotcell-k8s}
K8S_COMPONENTS="kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl"

# k8s_build makes sure the Kubernetes and etcd binaries are under
# K8S_BIN_DIR and ETCD_BIN_DIR, building them from the Go module proxy when
# they are not (cold: ~10 minutes of both cores and ~2 GB of memory).
k8s_build() {
	k8s_build_etcd && k8s_build_kubernetes || return 1
	k8s_build_gvisor || log "warning: the test cluster gets no gVisor RuntimeClass (building its shim or runsc failed)"
}

# gVisor on the cluster (docs/kubernetes.md, pitfall 10): containerd 1.6
# starts the runtime handler runsc with gVisor's containerd shim
# (containerd-shim-runsc-v1) running hotcell's runsc build (runsc_build),
# and `up` makes the RuntimeClass gvisor for it. The shim is of an older
# gVisor than GVISOR_VERSION: the last one on containerd 1.6's shim API
# (its start answers a plain socket address; later ones answer containerd
# 1.7+'s bootstrap JSON, which 1.6 takes for a path). It sets its own
# oom_score_adj to -999, which these hosts refuse (no CAP_SYS_RESOURCE in
# the bounding set) and which fails its start, and it leaves its socket
# behind: the build changes two lines (k8s_build_gvisor). Built once at
# K8S_GVISOR_SHIM (the path is the version stamp; -2 the patches').
K8S_GVISOR_SHIM_VERSION=v0.0.0-20260224225140-573d5e7127a8
K8S_GVISOR_SHIM=$GVISOR_DIR/shim-$K8S_GVISOR_SHIM_VERSION-2/containerd-shim-runsc-v1
K8S_GVISOR_RUNSC=$GVISOR_DIR/$GVISOR_VERSION/runsc

# k8s_patch_line FILE OLD NEW replaces the one line of FILE that is OLD
# (leading tabs aside) with NEW, and fails unless there is exactly one.
k8s_patch_line() {
	local f=$1 old=$2 new=$3
	[ "$(grep -cxF -- "$old" <(sed 's/^\t*//' "$f"))" = 1 ] || { printf 'error: %s: no single line %s\n' "$f" "$old" >&2; return 1; }
	OLD=$old NEW=$new awk '{ l = $0; sub(/^\t*/, "", l); if (l == ENVIRON["OLD"]) { match($0, /^\t*/); $0 = substr($0, 1, RLENGTH) ENVIRON["NEW"] } print }' "$f" >"$f.new" && mv -f "$f.new" "$f"
}

# k8s_build_gvisor makes sure the shim (K8S_GVISOR_SHIM) and hotcell's
# runsc (runsc_build) are built: ~1 minute and ~5 minutes, once.
k8s_build_gvisor() {
	runsc_build || return 1
	[ -x "$K8S_GVISOR_SHIM" ] && return 0
	command -v go >/dev/null || { printf 'error: building the gVisor shim needs Go\n' >&2; return 1; }
	log "building gVisor's containerd shim $K8S_GVISOR_SHIM_VERSION from the Go module proxy (once; about a minute)"
	local tmp start=$SECONDS
	tmp=$(mktemp -d) || return 1
	(
		set -e
		cd "$tmp"
		go mod init hotcell-gvisor-shim-build >/dev/null 2>&1
		src=$(go mod download -json "gvisor.dev/gvisor@$K8S_GVISOR_SHIM_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
		[ -d "$src" ]
		cp -r "$src" src
		chmod -R u+w src
		cd src
		# Two changes, each to one line that must be there as it was:
		# a refused oom_score_adj no longer fails the start; and the shim
		# reads its socket's address when it shuts down, to remove the
		# socket (it read it at its start, racing the start command that
		# writes it, and so left its socket in /run/containerd/s).
		f=pkg/shim/v1/service.go
		k8s_patch_line "$f" 'return "", fmt.Errorf("failed to set OOM Score on shim: %w", err)' \
			"_ = err // refused without CAP_SYS_RESOURCE: the shim runs at containerd's score"
		k8s_patch_line "$f" 'if len(s.shimAddress) != 0 {' \
			'if address, err := shim.ReadAddress(shimAddressPath); err == nil {'
		k8s_patch_line "$f" '_ = shim.RemoveSocket(s.shimAddress)' '_ = shim.RemoveSocket(address)'
		CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w" -o "$tmp/containerd-shim-runsc-v1" ./shim
		mkdir -p "$(dirname "$K8S_GVISOR_SHIM")"
		install -m 0755 "$tmp/containerd-shim-runsc-v1" "$K8S_GVISOR_SHIM.tmp"
		mv -f "$K8S_GVISOR_SHIM.tmp" "$K8S_GVISOR_SHIM"
	) || { rm -rf "$tmp" "$K8S_GVISOR_SHIM.tmp"; printf 'error: building the gVisor shim %s failed (see above)\n' "$K8S_GVISOR_SHIM_VERSION" >&2; return 1; }
	rm -rf "$tmp"
	log "built gVisor's containerd shim in $((SECONDS - start)) s: $K8S_GVISOR_SHIM"
}

k8s_build_kubernetes() {
	local c ok=1
	for c in $K8S_COMPONENTS; do [ -x "$K8S_BIN_DIR/$c" ] || ok=0; done
	[ $ok = 1 ] && return 0
	command -v go >/dev/null || { printf 'error: building Kubernetes needs Go\n' >&2; return 1; }
	log "building Kubernetes $K8S_VERSION ($K8S_COMPONENTS) from the Go module proxy (once; ~10 minutes cold on 2 cores, ~80 s with a warm Go build cache)"
	local tmp mod minor start=$SECONDS
	tmp=$(mktemp -d) || return 1
	# k8s.io/kubernetes replaces its k8s.io/* staging modules with
	# ./staging/...; a module of our own requires it and points each of
	# those at its published v0.x.y instead.
	(
		set -e
		cd "$tmp"
		go mod init hotcell-k8s-build >/dev/null 2>&1
		mod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p')
		[ -n "$mod" ]
		go mod edit -require "k8s.io/kubernetes@$K8S_VERSION"
		sed -n 's#^\t\(k8s\.io/[^ ]*\) => \./staging/.*#\1#p' "$mod" | while read -r m; do
			go mod edit -replace "$m=$m@v0.${K8S_VERSION#v1.}"
		done
		for c in $K8S_COMPONENTS; do printf 'package main\n\nimport _ "k8s.io/kubernetes/cmd/%s"\n' "$c" >"tools_$c.go"; done
		log "  downloading the modules"
		GOFLAGS=-mod=mod go mod tidy >/dev/null 2>&1 || GOFLAGS=-mod=mod go mod tidy
		rm -f tools_*.go
		minor=${K8S_VERSION#v1.}
		minor=${minor%%.*}
		log "  compiling (go build -p 2)"
		mkdir -p out
		pkgs=
		for c in $K8S_COMPONENTS; do pkgs="$pkgs k8s.io/kubernetes/cmd/$c"; done
		# shellcheck disable=SC2086
		CGO_ENABLED=0 GOFLAGS=-mod=mod go build -p 2 -trimpath -o out/ -ldflags "-s -w \
			-X k8s.io/component-base/version.gitVersion=$K8S_VERSION \
			-X k8s.io/component-base/version.gitMajor=1 \
			-X k8s.io/component-base/version.gitMinor=$minor \
			-X k8s.io/component-base/version.gitTreeState=clean \
			-X k8s.io/component-base/version.buildDate=1970-01-01T00:00:00Z" $pkgs
		out/kubectl version --client >/dev/null
		mkdir -p "$K8S_BIN_DIR"
		for c in $K8S_COMPONENTS; do install -m 0755 out/"$c" "$K8S_BIN_DIR/$c.tmp"; done
		for c in $K8S_COMPONENTS; do mv -f "$K8S_BIN_DIR/$c.tmp" "$K8S_BIN_DIR/$c"; done
	) || { rm -rf "$tmp"; printf 'error: building Kubernetes %s failed (see above)\n' "$K8S_VERSION" >&2; return 1; }
	rm -rf "$tmp"
	log "built Kubernetes $K8S_VERSION in $((SECONDS - start)) s: $K8S_BIN_DIR"
}

k8s_build_etcd() {
	[ -x "$ETCD_BIN_DIR/etcd" ] && return 0
	command -v go >/dev/null || { printf 'error: building etcd needs Go\n' >&2; return 1; }
	log "building etcd $ETCD_VERSION from the Go module proxy (once; about a minute)"
	local tmp start=$SECONDS
	tmp=$(mktemp -d) || return 1
	(
		set -e
		cd "$tmp"
		go mod init hotcell-etcd-build >/dev/null 2>&1
		printf 'package main\n\nimport _ "go.etcd.io/etcd/server/v3"\n' >tools.go
		GOFLAGS=-mod=mod go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >/dev/null 2>&1 ||
			GOFLAGS=-mod=mod go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION"
		GOFLAGS=-mod=mod go mod tidy >/dev/null 2>&1 || GOFLAGS=-mod=mod go mod tidy
		rm -f tools.go
		CGO_ENABLED=0 GOFLAGS=-mod=mod go build -p 2 -trimpath -ldflags "-s -w" -o out/etcd go.etcd.io/etcd/server/v3
		out/etcd --version >/dev/null
		mkdir -p "$ETCD_BIN_DIR"
		install -m 0755 out/etcd "$ETCD_BIN_DIR/etcd.tmp"
		mv -f "$ETCD_BIN_DIR/etcd.tmp" "$ETCD_BIN_DIR/etcd"
	) || { rm -rf "$tmp"; printf 'error: building etcd %s failed (see above)\n' "$ETCD_VERSION" >&2; return 1; }
	rm -rf "$tmp"
	log "built etcd $ETCD_VERSION in $((SECONDS - start)) s: $ETCD_BIN_DIR"
}

# k8s_packages installs the Debian packages the cluster runs on: a
# containerd of its own (never Docker's), runc, the CNI plugins, conntrack
# and socat (kubectl port-forward), openssl for the certificates, the
# registry and htpasswd for its password. Their own services are kept from
# starting (policy-rc.d).
k8s_packages() {
	local missing=() p rc_made=
	for p in containerd runc containernetworking-plugins conntrack socat openssl nftables docker-registry apache2-utils; do
		dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	log "installing ${missing[*]} for the test cluster"
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 0755 /usr/sbin/policy-rc.d && rc_made=1
	fi
	export DEBIAN_FRONTEND=noninteractive
	{ apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null; } || { [ -z "$rc_made" ] || rm -f /usr/sbin/policy-rc.d; return 1; }
	[ -z "$rc_made" ] || rm -f /usr/sbin/policy-rc.d
}

# k8s_pause_image builds the pause container (a static Go program that
# reaps children and exits on SIGTERM) as a one-layer OCI archive at
# K8S_BIN_DIR/pause.oci.tar, named K8S_PAUSE_IMAGE.
k8s_pause_image() {
	local out=$K8S_BIN_DIR/pause.oci.tar tmp
	[ -s "$out" ] && return 0
	tmp=$(mktemp -d) || return 1
	(
		set -e
		cd "$tmp"
		mkdir src root oci oci/blobs oci/blobs/sha256
		cat >src/main.go <<'GO'
// pause is the test cluster's sandbox container: it holds the pod's
// namespaces, reaps orphaned children and exits on SIGTERM or SIGINT.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}
GO
		(cd src && go mod init pause >/dev/null 2>&1 && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o ../root/pause .)
		tar --numeric-owner --owner=0 --group=0 --mtime=@0 -C root -cf layer.tar pause
		oci_blob() { # FILE -> prints "digest size", moves FILE into the layout
			local d s
			d=$(sha256sum "$1" | cut -d' ' -f1)
			s=$(stat -c %s "$1")
			mv "$1" "oci/blobs/sha256/$d"
			echo "$d $s"
		}
		read -r ld ls < <(oci_blob layer.tar)
		printf '{"architecture":"amd64","os":"linux","config":{"Entrypoint":["/pause"],"User":"65535:65535"},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' "$ld" >config.json
		read -r cd cs < <(oci_blob config.json)
		printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:%s","size":%s}]}' "$cd" "$cs" "$ld" "$ls" >manifest.json
		read -r md ms < <(oci_blob manifest.json)
		printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"platform":{"architecture":"amd64","os":"linux"},"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}]}' "$md" "$ms" "$K8S_PAUSE_IMAGE" "${K8S_PAUSE_IMAGE##*:}" >oci/index.json
		printf '{"imageLayoutVersion":"1.0.0"}' >oci/oci-layout
		mkdir -p "$K8S_BIN_DIR"
		tar --numeric-owner --owner=0 --group=0 --mtime=@0 -C oci -cf "$out.tmp" oci-layout index.json blobs
		mv -f "$out.tmp" "$out"
	) || { rm -rf "$tmp" "$out.tmp"; printf 'error: building the pause image failed\n' >&2; return 1; }
	rm -rf "$tmp"
}

# k8s_cert NAME CN [O] [SANS]: a key and a certificate signed by the
# cluster's CA in K8S_STATE/pki (EC P-256, a year).
k8s_cert() {
	local pki=$K8S_STATE/pki name=$1 cn=$2 o=${3:-} sans=${4:-} subj ext
	subj="/CN=$cn"
	[ -z "$o" ] || subj="/O=$o$subj"
	openssl ecparam -name prime256v1 -genkey -noout -out "$pki/$name.key" 2>/dev/null
	openssl req -new -key "$pki/$name.key" -subj "$subj" -out "$pki/$name.csr" 2>/dev/null
	ext="basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth,clientAuth"
	[ -z "$sans" ] || ext="$ext
subjectAltName=$sans"
	openssl x509 -req -in "$pki/$name.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
		-days 365 -sha256 -extfile <(printf '%s\n' "$ext") -out "$pki/$name.crt" 2>/dev/null
	rm -f "$pki/$name.csr"
}

# k8s_kubeconfig NAME CERT: a kubeconfig for the user of pki/CERT.*.
k8s_kubeconfig() {
	local pki=$K8S_STATE/pki
	cat >"$K8S_STATE/$1.kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: hotcell-k8s
  cluster:
    server: https://127.0.0.1:$K8S_APISERVER_PORT
    certificate-authority: $pki/ca.crt
users:
- name: $2
  user:
    client-certificate: $pki/$2.crt
    client-key: $pki/$2.key
contexts:
- name: hotcell-k8s
  context:
    cluster: hotcell-k8s
    user: $2
current-context: hotcell-k8s
KC
	chmod 0600 "$K8S_STATE/$1.kubeconfig"
}

# k8s_config writes the certificates, kubeconfigs and the configurations
# of containerd, CNI and the kubelet under K8S_STATE.
k8s_config() {
	local s=$K8S_STATE pki=$K8S_STATE/pki
	mkdir -p "$pki" "$s/log" "$s/run" "$s/cni/net.d" "$s/containerd" "$s/kubelet" "$s/etcd"
	chmod 0700 "$s" "$pki"
	if [ ! -s "$pki/ca.crt" ]; then
		openssl ecparam -name prime256v1 -genkey -noout -out "$pki/ca.key" 2>/dev/null
		openssl req -x509 -new -key "$pki/ca.key" -subj /CN=hotcell-k8s-ca -days 365 -sha256 -out "$pki/ca.crt" 2>/dev/null
		k8s_cert apiserver kube-apiserver "" "DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:127.0.0.1,IP:$K8S_HOST_IP,IP:${K8S_SERVICE_CIDR%.*/*}.1"
		k8s_cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters
		k8s_cert admin kubernetes-admin system:masters
		k8s_cert controller-manager system:kube-controller-manager
		k8s_cert scheduler system:kube-scheduler
		k8s_cert kubelet "system:node:$K8S_NODE" system:nodes "DNS:$K8S_NODE,IP:127.0.0.1,IP:$K8S_HOST_IP"
		openssl ecparam -name prime256v1 -genkey -noout -out "$pki/sa.key" 2>/dev/null
		openssl ec -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
		chmod 0600 "$pki"/*.key
	fi
	# kube-proxy's user, whom the default RBAC binds to system:node-proxier
	# (made apart: a cluster up from before kube-proxy ran gets it too).
	[ -s "$pki/kube-proxy.crt" ] || { k8s_cert kube-proxy system:kube-proxy && chmod 0600 "$pki/kube-proxy.key"; }
	k8s_kubeconfig admin admin
	k8s_kubeconfig controller-manager controller-manager
	k8s_kubeconfig scheduler scheduler
	k8s_kubeconfig kubelet kubelet
	k8s_kubeconfig kube-proxy kube-proxy

	cat >"$s/containerd/config.toml" <<TOML
# The test cluster's own containerd: its root, state and socket are its own,
# so Docker's containerd (/var/run/docker/containerd) is never touched.
version = 2
root = "$s/containerd/root"
state = "$s/containerd/state"
[grpc]
  address = "$s/containerd/containerd.sock"
[ttrpc]
  address = "$s/containerd/containerd.sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = "$s/containerd/opt"
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "$K8S_PAUSE_IMAGE"
    # runc cannot write oom_score_adj below the daemon's own here (the
    # bounding set lacks CAP_SYS_RESOURCE): the pause container failed.
    restrict_oom_score_adj = true
    stream_server_address = "127.0.0.1"
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = false
          Root = "$s/runc"
$(k8s_gvisor_runtime)
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "$s/cni/net.d"
    # The cluster's registry speaks plain HTTP on loopback.
    [plugins."io.containerd.grpc.v1.cri".registry.mirrors."$K8S_REGISTRY"]
      endpoint = ["http://$K8S_REGISTRY"]
TOML

	# The registry: its storage under K8S_STATE, deletes allowed (a
	# snapshot deleted removes its image), every call with the user
	# K8S_REGISTRY_USER and a password made here (a sandbox must neither
	# read nor write it: hotcell's driver gets the password from a Secret,
	# and pods pull with it as their image pull secret).
	mkdir -p "$s/registry/data"
	if [ ! -s "$s/registry/password" ]; then
		(umask 077 && openssl rand -hex 16 >"$s/registry/password")
		htpasswd -nbB "$K8S_REGISTRY_USER" "$(cat "$s/registry/password")" >"$s/registry/htpasswd"
	fi
	cat >"$s/registry/config.yml" <<YAML
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $s/registry/data
  delete:
    enabled: true
http:
  addr: $K8S_REGISTRY
auth:
  htpasswd:
    realm: hotcell-k8s
    path: $s/registry/htpasswd
YAML

	# runsc's options (the shim passes them as flags), as under Docker
	# (gvisor_built_args): hotcell's platform (systrap), the pod's network
	# namespace as the sandbox's host network (gVisor's netstack is not
	# used: the CNI's veth, the bridge and the host firewall apply as for
	# runc), host-uds open (the agent dials the daemon's unix socket in the
	# node's run dir), the root filesystem's writes on the host (overlay2
	# none). The shim reads this file at each pod's start.
	cat >"$s/containerd/runsc.toml" <<TOML
binary_name = "$K8S_GVISOR_RUNSC"
root = "$s/runsc-gvisor"
[runsc_config]
  platform = "${HOTCELL_GVISOR_PLATFORM:-systrap}"
  network = "host"
  host-uds = "open"
  overlay2 = "none"
TOML

	# Pods sit on K8S_BRIDGE with no default route and no masquerading: they
	# reach one another, the bridge's own address (K8S_HOST_IP) and the
	# Services' ClusterIPs (a route to K8S_SERVICE_CIDR via the bridge, where
	# kube-proxy translates them), nothing else. The firewall plugin accepts
	# their traffic in FORWARD, whose policy Docker sets to DROP.
	cat >"$s/cni/net.d/10-hotcell-k8s.conflist" <<JSON
{
  "cniVersion": "1.0.0",
  "name": "hotcell-k8s",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$K8S_BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$K8S_POD_CIDR", "gateway": "$K8S_HOST_IP"}]],
        "routes": [{"dst": "$K8S_SERVICE_CIDR"}],
        "dataDir": "$s/cni/networks"
      }
    },
    {"type": "firewall", "backend": "iptables"}
  ]
}
JSON

	cat >"$s/kubelet/config.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# The node's address must not be loopback (the kubelet refuses it), and the
# API server dials the kubelet at the node's address: both are the bridge's.
# Pods can reach this port; it takes only client certificates of the CA.
address: $K8S_HOST_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
containerRuntimeEndpoint: unix://$s/containerd/containerd.sock
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $pki/ca.crt}
authorization:
  mode: AlwaysAllow
tlsCertFile: $pki/kubelet.crt
tlsPrivateKeyFile: $pki/kubelet.key
# The host is on cgroup v1 (hybrid): kubelet 1.35+ refuses it unless told.
failCgroupV1: false
# containerd 1.6 cannot tell the kubelet its cgroup driver.
cgroupDriver: cgroupfs
cgroupRoot: /hotcell-k8s
failSwapOn: false
# Left to itself the kubelet rewrites host firewall rules (KUBE-FIREWALL
# drops non-loopback traffic to 127.0.0.0/8, canary chains, ip6tables).
makeIPTablesUtilChains: false
podCIDR: $K8S_POD_CIDR
podLogsDir: $s/pod-logs
volumePluginDir: $s/kubelet-plugins
# Imported images are never pulled again: keep them whatever the disk use.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "50Mi"
  nodefs.available: "1%"
  imagefs.available: "1%"
  nodefs.inodesFree: "1%"
serializeImagePulls: false
resolvConf: /etc/resolv.conf
YAML

	# kube-proxy in nftables mode: ClusterIP Services in a table of its own
	# (ip kube-proxy), beside Docker's and hotcell's rules, never in
	# theirs. The conntrack settings it would write host-wide are left as
	# they are (0), and node ports open on the bridge's address only.
	cat >"$s/kube-proxy.yaml" <<YAML
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
clientConnection:
  kubeconfig: $s/kube-proxy.kubeconfig
hostnameOverride: $K8S_NODE
bindAddress: $K8S_HOST_IP
clusterCIDR: $K8S_POD_CIDR
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
nodePortAddresses: ["$K8S_HOST_IP/32"]
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
YAML
}

# k8s_gvisor says whether the cluster's containerd can run gVisor: the
# shim and hotcell's runsc are built.
k8s_gvisor() { [ -x "$K8S_GVISOR_SHIM" ] && [ -x "$K8S_GVISOR_RUNSC" ]; }

# k8s_gvisor_runtime prints containerd's runtime handler runsc (gVisor's
# shim, with the runsc options of runsc.toml) when k8s_gvisor, else
# nothing. containerd 1.6 finds the shim on its PATH (its runtime_path is
# not used for a pod's sandbox): k8s_up puts the shim's directory first.
k8s_gvisor_runtime() {
	k8s_gvisor || return 0
	cat <<TOML
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runsc]
        runtime_type = "io.containerd.runsc.v1"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runsc.options]
          TypeUrl = "io.containerd.runsc.v1.options"
          ConfigPath = "$K8S_STATE/containerd/runsc.toml"
TOML
}

k8s_kubectl() { "$K8S_BIN_DIR/kubectl" --kubeconfig "$K8S_STATE/admin.kubeconfig" "$@"; }
k8s_ctr() { ctr --address "$K8S_STATE/containerd/containerd.sock" -n k8s.io "$@"; }

# k8s_start NAME CMD...: runs CMD in its own session, its output in
# K8S_STATE/log/NAME.log and its pid in K8S_STATE/run/NAME.pid.
k8s_start() {
	local name=$1
	shift
	if k8s_running "$name"; then return 0; fi
	setsid "$@" </dev/null >>"$K8S_STATE/log/$name.log" 2>&1 &
	echo $! >"$K8S_STATE/run/$name.pid"
}

# k8s_running NAME: whether the process K8S_STATE/run/NAME.pid is alive.
k8s_running() {
	local pid
	pid=$(cat "$K8S_STATE/run/$1.pid" 2>/dev/null) && [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null
}

# k8s_wait WHAT SECONDS CMD...: polls CMD until it succeeds, or fails
# naming WHAT and the log to read.
k8s_wait() {
	local what=$1 secs=$2 log=$3 i
	shift 3
	for ((i = 0; i < secs * 4; i++)); do
		if "$@" >/dev/null 2>&1; then return 0; fi
		sleep 0.25
	done
	printf 'error: %s did not come up in %s s; see %s\n' "$what" "$secs" "$log" >&2
	tail -n 20 "$log" >&2 2>/dev/null || true
	return 1
}

k8s_healthz() { curl -fsk --max-time 2 "$1" | grep -qx ok; }

# k8s_up brings the cluster up (building what is missing first) and waits
# until the node is Ready and the default service account exists. It is
# idempotent: on a cluster that is up it only checks.
k8s_up() {
	local s=$K8S_STATE start=$SECONDS
	k8s_packages || return 1
	k8s_build || return 1
	k8s_pause_image || return 1
	if [ ! -d "$s" ] && ip link show "$K8S_BRIDGE" >/dev/null 2>&1; then
		printf 'error: a link named %s exists but no cluster state does (%s): remove it or set HOTCELL_K8S_BRIDGE\n' "$K8S_BRIDGE" "$s" >&2
		return 1
	fi
	log "starting the test cluster (Kubernetes $K8S_VERSION) in $s"
	k8s_config
	# What this run adds to the host and must remove again: the bridge (made
	# now, so K8S_HOST_IP exists before any pod), the firewall plugin's
	# FORWARD chain.
	if ! ip link show "$K8S_BRIDGE" >/dev/null 2>&1; then
		ip link add "$K8S_BRIDGE" type bridge &&
			ip addr add "$K8S_HOST_IP/${K8S_POD_CIDR#*/}" dev "$K8S_BRIDGE" &&
			ip link set "$K8S_BRIDGE" up || return 1
	fi
	if [ ! -e "$s/cni-forward-before" ]; then
		if iptables -w -n -L CNI-FORWARD >/dev/null 2>&1; then echo yes; else echo no; fi >"$s/cni-forward-before"
	fi
	# The volumes the controller's hostPath provisioner makes, under a fixed
	# directory: removed at down unless the host had it.
	if [ ! -e "$s/hostpath-before" ]; then
		if [ -e "$K8S_HOSTPATH_DIR" ]; then echo yes; else echo no; fi >"$s/hostpath-before"
	fi
	# kube-proxy's nftables tables, removed at down unless the host had them.
	if [ ! -e "$s/kube-proxy-before" ]; then
		if nft list table ip kube-proxy >/dev/null 2>&1 || nft list table ip6 kube-proxy >/dev/null 2>&1; then echo yes; else echo no; fi >"$s/kube-proxy-before"
	fi

	# The RuntimeClass gvisor is made when the running containerd has the
	# handler runsc: one started before the shim was built has not (it
	# reads its configuration at start only).
	if ! k8s_running containerd; then
		if k8s_gvisor; then echo runsc >"$s/containerd/gvisor"; else rm -f "$s/containerd/gvisor"; fi
	fi
	PATH=$(dirname "$K8S_GVISOR_SHIM"):$PATH k8s_start containerd containerd --config "$s/containerd/config.toml"
	k8s_wait containerd 30 "$s/log/containerd.log" k8s_ctr version || return 1
	if ! k8s_ctr images ls -q | grep -qxF "$K8S_PAUSE_IMAGE"; then
		k8s_ctr images import "$K8S_BIN_DIR/pause.oci.tar" >/dev/null || return 1
	fi

	k8s_start registry docker-registry serve "$s/registry/config.yml"
	k8s_wait registry 30 "$s/log/registry.log" curl -fs --max-time 2 -u "$K8S_REGISTRY_USER:$(cat "$s/registry/password")" "http://$K8S_REGISTRY/v2/" || return 1

	k8s_start etcd "$ETCD_BIN_DIR/etcd" --name hotcell-k8s --data-dir "$s/etcd" \
		--listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
		--listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
		--initial-cluster hotcell-k8s=http://127.0.0.1:2380 --unsafe-no-fsync --log-level warn
	k8s_wait etcd 30 "$s/log/etcd.log" sh -c 'curl -fs --max-time 2 http://127.0.0.1:2379/health | grep -q "\"health\":\"true\""' || return 1

	local pki=$s/pki
	k8s_start kube-apiserver "$K8S_BIN_DIR/kube-apiserver" \
		--bind-address=127.0.0.1 --advertise-address="$K8S_HOST_IP" --secure-port="$K8S_APISERVER_PORT" \
		--etcd-servers=http://127.0.0.1:2379 \
		--service-cluster-ip-range="$K8S_SERVICE_CIDR" \
		--client-ca-file="$pki/ca.crt" --tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" \
		--kubelet-client-certificate="$pki/apiserver-kubelet-client.crt" --kubelet-client-key="$pki/apiserver-kubelet-client.key" \
		--kubelet-preferred-address-types=InternalIP \
		--service-account-issuer=https://kubernetes.default.svc --service-account-key-file="$pki/sa.pub" \
		--service-account-signing-key-file="$pki/sa.key" \
		--authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction --allow-privileged=true \
		--cert-dir="$s/apiserver-certs" --profiling=false
	k8s_wait kube-apiserver 90 "$s/log/kube-apiserver.log" sh -c "'$K8S_BIN_DIR/kubectl' --kubeconfig '$s/admin.kubeconfig' get --raw /readyz | grep -qx ok" || return 1

	k8s_start kube-controller-manager "$K8S_BIN_DIR/kube-controller-manager" \
		--kubeconfig="$s/controller-manager.kubeconfig" \
		--authentication-kubeconfig="$s/controller-manager.kubeconfig" --authorization-kubeconfig="$s/controller-manager.kubeconfig" \
		--bind-address=127.0.0.1 --leader-elect=false --use-service-account-credentials=true \
		--service-account-private-key-file="$pki/sa.key" --root-ca-file="$pki/ca.crt" \
		--cluster-signing-cert-file="$pki/ca.crt" --cluster-signing-key-file="$pki/ca.key" \
		--service-cluster-ip-range="$K8S_SERVICE_CIDR" --cert-dir="$s/controller-manager-certs" --profiling=false \
		--enable-hostpath-provisioner
	k8s_start kube-scheduler "$K8S_BIN_DIR/kube-scheduler" \
		--kubeconfig="$s/scheduler.kubeconfig" \
		--authentication-kubeconfig="$s/scheduler.kubeconfig" --authorization-kubeconfig="$s/scheduler.kubeconfig" \
		--bind-address=127.0.0.1 --leader-elect=false --profiling=false
	# The kubelet puts its pods under cgroupRoot, which must exist in every
	# hierarchy (a new cpuset starts with no CPUs and no memory nodes).
	local h
	for h in /sys/fs/cgroup/*/; do
		case "$h" in */unified/) continue ;; esac
		[ -f "$h/cgroup.procs" ] || continue
		mkdir -p "$h/hotcell-k8s"
	done
	if [ -f /sys/fs/cgroup/cpuset/cpuset.cpus ]; then
		[ -n "$(cat /sys/fs/cgroup/cpuset/hotcell-k8s/cpuset.cpus)" ] ||
			cat /sys/fs/cgroup/cpuset/cpuset.cpus >/sys/fs/cgroup/cpuset/hotcell-k8s/cpuset.cpus
		[ -n "$(cat /sys/fs/cgroup/cpuset/hotcell-k8s/cpuset.mems)" ] ||
			cat /sys/fs/cgroup/cpuset/cpuset.mems >/sys/fs/cgroup/cpuset/hotcell-k8s/cpuset.mems
	fi
	k8s_start kubelet "$K8S_BIN_DIR/kubelet" --config="$s/kubelet/config.yaml" \
		--kubeconfig="$s/kubelet.kubeconfig" --root-dir="$s/kubelet" --cert-dir="$s/kubelet/pki" \
		--hostname-override="$K8S_NODE" --node-ip="$K8S_HOST_IP"
	k8s_wait kube-controller-manager 60 "$s/log/kube-controller-manager.log" k8s_healthz https://127.0.0.1:10257/healthz || return 1
	k8s_wait kube-scheduler 60 "$s/log/kube-scheduler.log" k8s_healthz https://127.0.0.1:10259/healthz || return 1
	k8s_wait kubelet 60 "$s/log/kubelet.log" k8s_healthz http://127.0.0.1:10248/healthz || return 1
	k8s_wait "node $K8S_NODE Ready" 90 "$s/log/kubelet.log" k8s_kubectl wait --timeout=5s --for=condition=Ready "node/$K8S_NODE" || return 1
	k8s_wait "the default service account" 60 "$s/log/kube-controller-manager.log" k8s_kubectl -n default get serviceaccount default || return 1
	# kube-proxy once the node is registered (it reads the node's address).
	k8s_start kube-proxy "$K8S_BIN_DIR/kube-proxy" --config="$s/kube-proxy.yaml"
	k8s_wait kube-proxy 60 "$s/log/kube-proxy.log" curl -fs --max-time 2 http://127.0.0.1:10256/healthz || return 1
	# The default StorageClass, with a real provisioner: the controller's own
	# hostPath one (one node, volumes in K8S_HOSTPATH_DIR, removed with their
	# claims).
	k8s_kubectl apply -f - >/dev/null <<YAML || return 1
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: $K8S_STORAGE_CLASS
  annotations:
    storageclass.kubernetes.io/is-default-class: "true"
provisioner: kubernetes.io/host-path
reclaimPolicy: Delete
volumeBindingMode: Immediate
YAML
	if [ -e "$s/containerd/gvisor" ]; then
		k8s_kubectl apply -f - >/dev/null <<YAML || return 1
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata:
  name: gvisor
handler: runsc
YAML
	fi
	k8s_write_env
	log "the test cluster is up ($((SECONDS - start)) s): $(k8s_env | grep -v PASSWORD | tr '\n' ' ')"
}

# k8s_write_env records how to reach the cluster in K8S_STATE/env, which
# internal/testk8s reads.
k8s_write_env() {
	k8s_env >"$K8S_STATE/env.tmp" && mv -f "$K8S_STATE/env.tmp" "$K8S_STATE/env"
}

# k8s_env prints the cluster's coordinates as shell assignments.
k8s_env() {
	cat <<ENV
KUBECONFIG=$K8S_STATE/admin.kubeconfig
HOTCELL_K8S_KUBECONFIG=$K8S_STATE/admin.kubeconfig
HOTCELL_K8S_HOST_IP=$K8S_HOST_IP
HOTCELL_K8S_KUBECTL=$K8S_BIN_DIR/kubectl
HOTCELL_K8S_CONTAINERD=$K8S_STATE/containerd/containerd.sock
HOTCELL_K8S_NODE=$K8S_NODE
HOTCELL_K8S_REGISTRY=$K8S_REGISTRY
HOTCELL_K8S_REGISTRY_USER=$K8S_REGISTRY_USER
HOTCELL_K8S_REGISTRY_PASSWORD=$(cat "$K8S_STATE/registry/password" 2>/dev/null)
HOTCELL_K8S_STORAGE_CLASS=$K8S_STORAGE_CLASS
ENV
}

# k8s_status prints each component's state; it fails unless all run and
# the node is Ready.
k8s_status() {
	local c ok=0
	if [ ! -d "$K8S_STATE" ]; then
		echo "down (no $K8S_STATE)"
		return 1
	fi
	for c in containerd registry etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy; do
		if k8s_running "$c"; then
			printf '%-24s running (pid %s)\n' "$c" "$(cat "$K8S_STATE/run/$c.pid")"
		else
			printf '%-24s not running (log: %s)\n' "$c" "$K8S_STATE/log/$c.log"
			ok=1
		fi
	done
	if k8s_running kube-apiserver; then
		k8s_kubectl get nodes -o wide 2>&1 || ok=1
		k8s_kubectl wait --timeout=2s --for=condition=Ready "node/$K8S_NODE" >/dev/null 2>&1 || ok=1
	fi
	return $ok
}

# k8s_stop NAME: SIGTERM, up to 20 s, then SIGKILL.
k8s_stop() {
	local pid i
	pid=$(cat "$K8S_STATE/run/$1.pid" 2>/dev/null) || return 0
	if kill -0 "$pid" 2>/dev/null; then
		kill "$pid" 2>/dev/null
		for ((i = 0; i < 80; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
		kill -9 "$pid" 2>/dev/null || true
	fi
	rm -f "$K8S_STATE/run/$1.pid"
}

# k8s_down stops the cluster and leaves the host as it was: pods go first
# (their network torn down by the CNI while the kubelet still runs), then
# the kubelet, kube-proxy, the control plane, etcd and containerd; then the
# bridge, kube-proxy's tables, the firewall plugin's chain, cgroups, mounts,
# the files the kubelet and CNI write outside K8S_STATE whatever the flags,
# and K8S_STATE itself. The binaries stay, so the next up takes seconds.
k8s_down() {
	local s=$K8S_STATE start=$SECONDS i m
	if [ ! -d "$s" ]; then
		log "the test cluster is not up (no $s)"
		return 0
	fi
	log "stopping the test cluster in $s"
	k8s_stop kube-controller-manager
	k8s_stop kube-scheduler
	if k8s_running kube-apiserver && k8s_running kubelet; then
		k8s_kubectl delete pods --all-namespaces --all --force --grace-period=0 --wait=false >/dev/null 2>&1 || true
		# Without their API objects the kubelet still gives each container
		# its spec's grace period (30 s by default) before SIGKILL: send it
		# now, through containerd.
		for m in $(k8s_ctr tasks ls -q 2>/dev/null); do k8s_ctr tasks kill -a -s SIGKILL "$m" >/dev/null 2>&1 || true; done
		# The kubelet stops each sandbox, and the CNI releases its address:
		# wait until no task runs and no address is leased.
		for ((i = 0; i < 240; i++)); do
			if ! k8s_ctr tasks ls 2>/dev/null | grep -q RUNNING &&
				! ls "$s/cni/networks/hotcell-k8s" 2>/dev/null | grep -q '^[0-9]'; then
				break
			fi
			[ $((i % 20)) -eq 19 ] && k8s_kubectl delete pods --all-namespaces --all --force --grace-period=0 --wait=false >/dev/null 2>&1
			sleep 0.25
		done
	fi
	k8s_stop kubelet
	k8s_stop kube-proxy
	k8s_stop kube-apiserver
	k8s_stop etcd
	# Whatever still runs in containerd (the kubelet died early): stop it
	# through containerd, then containerd itself, then any shim left.
	if k8s_running containerd; then
		for m in $(k8s_ctr tasks ls -q 2>/dev/null); do k8s_ctr tasks kill -s SIGKILL "$m" >/dev/null 2>&1; done
		sleep 0.5
		for m in $(k8s_ctr tasks ls -q 2>/dev/null); do k8s_ctr tasks delete -f "$m" >/dev/null 2>&1; done
		for m in $(k8s_ctr containers ls -q 2>/dev/null); do k8s_ctr containers delete "$m" >/dev/null 2>&1; done
	fi
	k8s_stop containerd
	k8s_stop registry
	# A shim killed leaves its socket in /run/containerd/s (shared with
	# Docker's containerd), named by the hash of our address, namespace, id.
	local sid sns
	for m in $(pgrep -f -- "-address $s/containerd/containerd.sock" || true); do
		sid=$(tr '\0' '\n' <"/proc/$m/cmdline" 2>/dev/null | sed -n '/^-id$/{n;p;}')
		sns=$(tr '\0' '\n' <"/proc/$m/cmdline" 2>/dev/null | sed -n '/^-namespace$/{n;p;}')
		kill -9 "$m" 2>/dev/null || true
		[ -z "$sid" ] || rm -f "/run/containerd/s/$(printf '%s' "$s/containerd/containerd.sock/${sns:-k8s.io}/$sid" | sha256sum | cut -d' ' -f1)"
	done
	# gVisor's sandboxes and gofers (in the pods' cgroups too, unless one
	# was made outside them).
	for m in $(pgrep -f -- "--root=$s/runsc-gvisor" || true); do kill -9 "$m" 2>/dev/null || true; done
	# Processes still in the pods' cgroups, then the cgroups.
	for m in /sys/fs/cgroup/*/hotcell-k8s /sys/fs/cgroup/hotcell-k8s; do
		[ -d "$m" ] || continue
		find "$m" -name cgroup.procs -exec cat {} + 2>/dev/null | xargs -r kill -9 2>/dev/null || true
	done
	sleep 0.2
	for m in /sys/fs/cgroup/*/hotcell-k8s /sys/fs/cgroup/hotcell-k8s; do
		[ -d "$m" ] && find "$m" -depth -type d -exec rmdir {} + 2>/dev/null || true
	done
	# Mounts under the state directory (sandbox shm, overlay roots), then the
	# pods' network namespaces containerd made.
	{ findmnt -rn -o TARGET | grep -F "$s/" || true; } | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
	for m in /var/run/netns/cni-*; do
		[ -e "$m" ] || continue
		# Only ours: a namespace with an address in K8S_POD_CIDR.
		if ip netns exec "$(basename "$m")" ip -4 -o addr 2>/dev/null | grep -q " ${K8S_POD_CIDR%.*}\."; then
			ip netns delete "$(basename "$m")" 2>/dev/null || true
		fi
	done
	ip link del "$K8S_BRIDGE" 2>/dev/null || true
	# kube-proxy's tables (it leaves them when it stops).
	if [ "$(cat "$s/kube-proxy-before" 2>/dev/null)" = no ]; then
		nft delete table ip kube-proxy 2>/dev/null || true
		nft delete table ip6 kube-proxy 2>/dev/null || true
	fi
	if [ "$(cat "$s/cni-forward-before" 2>/dev/null)" = no ]; then
		# The plugin's jump carries a comment: delete each rule as listed.
		iptables -w -S FORWARD 2>/dev/null | grep -e '-j CNI-FORWARD$' | sed 's/^-A FORWARD //' |
			while read -r m; do eval "iptables -w -D FORWARD $m" 2>/dev/null || true; done || true
		iptables -w -F CNI-FORWARD 2>/dev/null || true
		iptables -w -X CNI-FORWARD 2>/dev/null || true
		iptables -w -F CNI-ADMIN 2>/dev/null || true
		iptables -w -X CNI-ADMIN 2>/dev/null || true
	fi
	# Written outside K8S_STATE whatever the flags.
	rm -rf /var/lib/kubelet/device-plugins
	rmdir /var/lib/kubelet 2>/dev/null || true
	find /var/log/containers -maxdepth 1 -type l -lname "$s/*" -delete 2>/dev/null || true
	rmdir /var/log/containers 2>/dev/null || true
	rm -f /var/lib/cni/results/hotcell-k8s-*
	rmdir /var/lib/cni/results /var/lib/cni 2>/dev/null || true
	local fwd kp hp
	fwd=$(cat "$s/cni-forward-before" 2>/dev/null || echo yes)
	kp=$(cat "$s/kube-proxy-before" 2>/dev/null || echo yes)
	hp=$(cat "$s/hostpath-before" 2>/dev/null || echo yes)
	# Volumes of claims the cluster did not delete before it stopped.
	[ "$hp" = yes ] || rm -rf "$K8S_HOSTPATH_DIR"
	rm -rf "$s"
	if ! k8s_leftovers "$fwd" "$kp" "$hp"; then
		printf 'error: the test cluster left the above behind\n' >&2
		return 1
	fi
	log "the test cluster is down ($((SECONDS - start)) s)"
}

# k8s_leftovers [CNI_FORWARD_BEFORE [KUBE_PROXY_BEFORE [HOSTPATH_BEFORE]]]
# prints whatever of a cluster is still on the host (processes, the state
# directory, mounts, cgroups, the bridge, network namespaces holding a pod
# address, the firewall plugin's chain, kube-proxy's tables and the
# provisioner's volume directory when the cluster made them, the kubelet's
# and CNI's stray files) and fails if there is any.
k8s_leftovers() {
	local s=$K8S_STATE left=0 m
	pgrep -a -f -- "^($K8S_BIN_DIR/|$ETCD_BIN_DIR/etcd|containerd --config $s/|docker-registry serve $s/)" && left=1
	pgrep -a -f -- "-address $s/containerd/containerd.sock" && left=1
	pgrep -a -f -- "--root=$s/runsc-gvisor" && left=1
	[ ! -e "$s" ] || { echo "left: $s"; left=1; }
	findmnt -rn -o TARGET | grep -F "$s/" && left=1
	for m in /sys/fs/cgroup/*/hotcell-k8s /sys/fs/cgroup/hotcell-k8s; do
		[ ! -d "$m" ] || { echo "left: cgroup $m"; left=1; }
	done
	! ip link show "$K8S_BRIDGE" >/dev/null 2>&1 || { echo "left: link $K8S_BRIDGE"; left=1; }
	if [ "${2:-yes}" = no ]; then
		for m in ip ip6; do
			! nft list table "$m" kube-proxy >/dev/null 2>&1 || { echo "left: nftables table $m kube-proxy"; left=1; }
		done
	fi
	for m in /var/run/netns/cni-*; do
		[ -e "$m" ] || continue
		if ip netns exec "$(basename "$m")" ip -4 -o addr 2>/dev/null | grep -q " ${K8S_POD_CIDR%.*}\."; then
			echo "left: network namespace $m"
			left=1
		fi
	done
	if [ "${3:-yes}" = no ] && [ -e "$K8S_HOSTPATH_DIR" ]; then
		echo "left: $K8S_HOSTPATH_DIR"
		left=1
	fi
	if [ "${1:-yes}" = no ] && iptables -w -n -L CNI-FORWARD >/dev/null 2>&1; then
		echo "left: iptables chain CNI-FORWARD"
		left=1
	fi
	for m in /var/lib/kubelet/device-plugins /var/lib/cni/results/hotcell-k8s-*; do
		[ ! -e "$m" ] || { echo "left: $m"; left=1; }
	done
	return $left
}

# k8s_import_image IMAGE...: copies each image from the host's Docker
# Engine into the cluster's containerd (docker save | ctr import), where
# pods run it with imagePullPolicy Never or IfNotPresent: there is no
# registry. An image the cluster already has at the same ID is skipped.
k8s_import_image() {
	local img id have
	for img in "$@"; do
		id=$(docker image inspect -f '{{.Id}}' "$img") || { printf 'error: no image %s in the Docker Engine\n' "$img" >&2; return 1; }
		have=$(k8s_ctr images ls 2>/dev/null | awk -v n="docker.io/${img}" -v m="$img" '$1 == n || $1 == m {print $3}' | head -n1)
		# ctr lists the manifest digest; the config digest is the Docker ID.
		if [ -n "$have" ] && k8s_ctr content get "$have" 2>/dev/null | grep -qF "${id}"; then
			continue
		fi
		log "importing $img into the test cluster"
		docker save "$img" | k8s_ctr images import - >/dev/null || { printf 'error: importing %s into the test cluster failed\n' "$img" >&2; return 1; }
	done
}

# k8s_build_background starts k8s_build in the background (output in
# K8S_BUILD_LOG), so that a cold build overlaps the steps of scripts/test
# that mostly wait on downloads; ensure_k8s waits for it.
K8S_BUILD_LOG=${HOTCELL_K8S_BUILD_LOG:-/var/log/hotcell-k8s-build.log}
K8S_BUILD_PID=
k8s_build_background() {
	log "building the test cluster's binaries in the background if they are missing (log: $K8S_BUILD_LOG)"
	k8s_build >"$K8S_BUILD_LOG" 2>&1 &
	K8S_BUILD_PID=$!
}

# ensure_k8s brings the test cluster up for the tests unless it is up
# already (then it is left as it is, and up, at the end). A cluster this
# brings up is taken down by k8s_down_if_ours, and on exit at the latest.
K8S_OURS=
ensure_k8s() {
	if [ -n "$K8S_BUILD_PID" ]; then
		log "waiting for the test cluster's build (log: $K8S_BUILD_LOG)"
		wait "$K8S_BUILD_PID" || { cat "$K8S_BUILD_LOG" >&2; die "building the test cluster failed"; }
		K8S_BUILD_PID=
	fi
	if k8s_status >/dev/null 2>&1; then
		log "the test cluster is up already: the tests use it and leave it up"
		return 0
	fi
	K8S_OURS=1
	trap k8s_down_if_ours EXIT
	k8s_up || { k8s_down_if_ours; die "the test cluster did not come up (sudo scripts/k8s status; logs in $K8S_STATE/log)"; }
}

# k8s_down_if_ours takes down a cluster ensure_k8s brought up.
k8s_down_if_ours() {
	[ -n "$K8S_OURS" ] || return 0
	K8S_OURS=
	k8s_down
}
