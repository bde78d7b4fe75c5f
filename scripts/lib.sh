# Shared by scripts/serve and scripts/test: install and start what hotcell
# needs on a Debian host. Sourced, not run.

log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

HOTCELL_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export PATH=$PATH:/usr/local/go/bin

need_root() {
	[ "$(id -u)" = 0 ] || die "run this as root (hotcell drives the Docker Engine and the host firewall): sudo $0"
}

# ensure_packages installs the Debian packages hotcell and its tests use.
ensure_packages() {
	local missing=()
	command -v dockerd >/dev/null || missing+=(docker.io)
	dpkg -s busybox-static >/dev/null 2>&1 || missing+=(busybox-static)
	command -v debootstrap >/dev/null || missing+=(debootstrap)
	command -v git >/dev/null || missing+=(git)
	command -v tmux >/dev/null || missing+=(tmux)
	command -v curl >/dev/null || missing+=(curl)
	# mkfs.ext4 makes the workspace disks (internal/wsdisk).
	command -v mkfs.ext4 >/dev/null || missing+=(e2fsprogs)
	command -v ip >/dev/null && command -v iptables-save >/dev/null || missing+=(iproute2 iptables)
	command -v ipset >/dev/null || missing+=(ipset)
	if [ ${#missing[@]} -gt 0 ]; then
		log "installing ${missing[*]}"
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq
		apt-get install -y -qq "${missing[@]}" >/dev/null
	fi
}

# ensure_docker starts the Docker Engine unless one already answers.
ensure_docker() {
	if docker info >/dev/null 2>&1; then return; fi
	log "starting the Docker Engine"
	if [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
		systemctl start docker || true
	fi
	if ! docker info >/dev/null 2>&1; then
		if ! pgrep -x dockerd >/dev/null; then
			nohup dockerd >/var/log/hotcell-dockerd.log 2>&1 &
		fi
		for _ in $(seq 1 60); do
			docker info >/dev/null 2>&1 && break
			sleep 0.5
		done
	fi
	docker info >/dev/null 2>&1 || die "the Docker Engine did not start; see /var/log/hotcell-dockerd.log"
}

ensure_go() {
	command -v go >/dev/null || die "Go is not installed: install Go 1.26 or newer at /usr/local/go (https://go.dev/doc/install)"
	local v
	v=$(go env GOVERSION | sed 's/^go//')
	case "$v" in
	1.2[6-9]* | 1.[3-9]* | [2-9].*) ;;
	*) die "Go $v is too old: hotcell needs Go 1.26 or newer" ;;
	esac
}

# ensure_e2b_sdk installs the e2b npm SDK the E2B end-to-end tests run
# (test/e2e/e2b, pinned by its package-lock.json) with npm ci.
ensure_e2b_sdk() {
	command -v node >/dev/null && command -v npm >/dev/null ||
		die "Node.js is not installed: the E2B tests run the e2b npm SDK; install Node.js 20.18 or newer (https://nodejs.org)"
	local v
	v=$(node -p 'process.versions.node')
	case "$v" in
	20.1[8-9].* | 20.[2-9][0-9].* | 2[2-9].* | [3-9][0-9].*) ;;
	*) die "Node.js $v is too old (or 21.x): the e2b SDK needs Node.js 20.18 or newer" ;;
	esac
	log "installing the e2b npm SDK for the E2B tests"
	(cd "$HOTCELL_ROOT/test/e2e/e2b" && npm ci --no-audit --no-fund --loglevel=error)
}

# build_binaries builds bin/hotcell and the static bin/hotcell-agent.
build_binaries() {
	log "building hotcell and hotcell-agent"
	mkdir -p "$HOTCELL_ROOT/bin"
	(cd "$HOTCELL_ROOT" &&
		CGO_ENABLED=0 go build -trimpath -o bin/hotcell ./cmd/hotcell &&
		CGO_ENABLED=0 go build -trimpath -o bin/hotcell-agent ./cmd/hotcell-agent)
}

# ensure_base_image builds hotcell/base:latest unless it is there.
ensure_base_image() {
	if docker image inspect hotcell/base:latest >/dev/null 2>&1; then return; fi
	log "building the default image hotcell/base:latest (a few minutes, once)"
	"$HOTCELL_ROOT/bin/hotcell" image build
}
