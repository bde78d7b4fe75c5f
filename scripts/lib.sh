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
	# jq merges gVisor's runtime into the engine's daemon.json (ensure_runsc).
	command -v jq >/dev/null || missing+=(jq)
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

# gVisor: hotcell runs gvisor sandboxes with a runsc it builds from the Go
# module proxy at GVISOR_VERSION (Debian's runsc, 0.0~20221219, has only
# the ptrace platform, on which a process start costs about twice as much;
# see bench/README.md), installed once at $GVISOR_DIR/$GVISOR_VERSION/runsc:
# the path is the version stamp, so a second run finds it and takes no time.
# When the build fails (no Go module proxy), Debian's runsc is used instead.
GVISOR_VERSION=v0.0.0-20260905035102-160fafc42237
GVISOR_DIR=${HOTCELL_GVISOR_DIR:-/usr/local/lib/hotcell/gvisor}

# GVISOR_RUNTIME_ARGS are the flags Debian's runsc needs here (the driver's
# docker.GVisorRuntimeArgs): ptrace, its only platform that starts on these
# hosts (its KVM platform spins and never runs the box); host networking,
# which under Docker is the box's own network namespace (gVisor's netstack
# refuses to start in it, and the bridge and host firewall must apply as
# for runc); host-uds=open, so the agent can dial the daemon's socket in
# its read-only run dir.
GVISOR_RUNTIME_ARGS='["--platform=ptrace","--network=host","--host-uds=open"]'

# gvisor_built_args prints the flags of the runsc hotcell builds: the
# systrap platform (${HOTCELL_GVISOR_PLATFORM:-systrap}; kvm needs a /dev/kvm
# that runs guests, which these hosts' nested /dev/kvm does not), the same
# networking and socket flags, and --overlay2=none: newer runsc keeps the
# root filesystem's writes in an overlay inside the sandbox by default,
# where the engine cannot see them, and snapshots commit what it sees.
gvisor_built_args() {
	printf '["--platform=%s","--network=host","--host-uds=open","--overlay2=none"]\n' "${HOTCELL_GVISOR_PLATFORM:-systrap}"
}

# runsc_register FILE NAME RUNSC [ARGS] merges the runtime NAME (runsc at
# path RUNSC with the JSON array ARGS, GVISOR_RUNTIME_ARGS by default) into
# the engine config FILE, keeping every other setting, other runtimes and
# the entry's own other flags (its own --platform, --network, --host-uds and
# --overlay2 give way to ours). The entry's path stays when it is the
# operator's; one hotcell put there (Debian's /usr/bin/runsc, an older build
# under GVISOR_DIR) becomes RUNSC. It prints "changed" after rewriting FILE
# (atomically, same mode, the old one kept as FILE.hotcell-backup) or
# "unchanged" when FILE already had it, untouched. A missing or empty FILE
# counts as {}; one that is not a JSON object is an error and left as it is.
runsc_register() {
	local file=$1 name=$2 runsc=$3 args=${4:-$GVISOR_RUNTIME_ARGS} old new tmp
	old='{}'
	if [ -s "$file" ]; then
		old=$(jq -e 'if type == "object" then . else error("not a JSON object") end' "$file") ||
			{ printf 'error: %s is not a JSON object; fix it by hand\n' "$file" >&2; return 1; }
	fi
	new=$(printf '%s' "$old" | jq --arg n "$name" --arg path "$runsc" --arg ours "$GVISOR_DIR/" --argjson args "$args" '
		(.runtimes // {}) as $r | ($r[$n] // {}) as $e
		| .runtimes = $r + {($n): ($e + {
			path: (if ($e.path // "") == "" or $e.path == "/usr/bin/runsc" or ($e.path | startswith($ours)) then $path else $e.path end),
			runtimeArgs: ((reduce ($e.runtimeArgs // [])[] as $a ({out: [], skip: false};
				if .skip then .skip = false
				elif ($a | test("^--?(platform|network|host-uds|overlay2)$")) then .skip = true
				elif ($a | test("^--?(platform|network|host-uds|overlay2)=")) then .
				else .out += [$a] end) | .out) + $args)
		})}') || return 1
	if [ "$(printf '%s' "$old" | jq -S .)" = "$(printf '%s' "$new" | jq -S .)" ]; then
		echo unchanged
		return 0
	fi
	mkdir -p "$(dirname "$file")"
	tmp=$(mktemp "$file.XXXXXX") || return 1
	if [ -e "$file" ]; then
		cp -p "$file" "$file.hotcell-backup" && chmod --reference="$file" "$tmp" || { rm -f "$tmp"; return 1; }
	else
		chmod 0644 "$tmp"
	fi
	printf '%s\n' "$new" >"$tmp" && mv -f "$tmp" "$file" || { rm -f "$tmp"; return 1; }
	echo changed
}

# runsc_build makes sure $GVISOR_DIR/$GVISOR_VERSION/runsc is there: it
# builds it with `go install` from the Go module proxy (minutes, once) when
# it is not. It fails, leaving nothing behind, when Go or the build does.
runsc_build() {
	local dest=$GVISOR_DIR/$GVISOR_VERSION/runsc tmp
	[ -x "$dest" ] && return 0
	command -v go >/dev/null || { printf 'error: building runsc needs Go\n' >&2; return 1; }
	log "building gVisor's runsc $GVISOR_VERSION from the Go module proxy (once; about 5 minutes on 2 cores)"
	tmp=$(mktemp -d) || return 1
	if (cd "$tmp" && go mod init hotcell-runsc-build >/dev/null 2>&1 &&
		GOBIN=$tmp/bin CGO_ENABLED=0 GOFLAGS=-mod=mod go install "gvisor.dev/gvisor/runsc@$GVISOR_VERSION") &&
		"$tmp/bin/runsc" --version >/dev/null &&
		mkdir -p "$(dirname "$dest")" && install -m 0755 "$tmp/bin/runsc" "$dest.tmp" && mv -f "$dest.tmp" "$dest"; then
		rm -rf "$tmp"
		return 0
	fi
	rm -rf "$tmp" "$dest.tmp"
	printf 'error: building gVisor runsc %s failed\n' "$GVISOR_VERSION" >&2
	return 1
}

# runsc_pick prints the runsc ensure_runsc registers and its flags, as
# "PATH ARGS": hotcell's build when it is there, else Debian's runsc.
runsc_pick() {
	local built=$GVISOR_DIR/$GVISOR_VERSION/runsc deb
	if [ -x "$built" ]; then
		printf '%s %s\n' "$built" "$(gvisor_built_args)"
	elif deb=$(command -v runsc); then
		printf '%s %s\n' "$deb" "$GVISOR_RUNTIME_ARGS"
	else
		return 1
	fi
}

# ensure_runsc builds gVisor's runsc (runsc_build; Debian's runsc when that
# fails) and registers it with the running Docker Engine as runtime
# ${HOTCELL_GVISOR_ENGINE_RUNTIME:-runsc} (hotcell's gvisor_engine_runtime)
# in ${HOTCELL_DOCKER_DAEMON_JSON:-/etc/docker/daemon.json}. The engine
# reloads its runtimes on SIGHUP, so it is signalled (never restarted: its
# containers keep running), and only when the file changed; then this waits
# until `docker info` lists the runtime. It returns non-zero with a message
# when gVisor cannot be had: runc sandboxes work without it. Call it after
# ensure_go.
ensure_runsc() {
	local file=${HOTCELL_DOCKER_DAEMON_JSON:-/etc/docker/daemon.json}
	local name=${HOTCELL_GVISOR_ENGINE_RUNTIME:-runsc} runsc args res pid
	if ! runsc_build; then
		log "warning: using Debian's runsc (ptrace platform) instead: process starts in gvisor sandboxes cost 2-3 times as much (bench/README.md)"
		if ! command -v runsc >/dev/null; then
			log "installing gVisor (Debian's runsc)"
			export DEBIAN_FRONTEND=noninteractive
			{ apt-get update -qq && apt-get install -y -qq runsc >/dev/null; } ||
				{ printf 'error: apt-get install runsc failed\n' >&2; return 1; }
		fi
	fi
	read -r runsc args < <(runsc_pick) || { printf 'error: no runsc\n' >&2; return 1; }
	res=$(runsc_register "$file" "$name" "$runsc" "$args") || return 1
	if [ "$res" = changed ]; then
		pid=$(cat /var/run/docker.pid 2>/dev/null || pidof -s dockerd) ||
			{ printf 'error: no dockerd to reload\n' >&2; return 1; }
		log "registered gVisor ($runsc) as Docker runtime $name in $file; reloading dockerd (SIGHUP)"
		kill -HUP "$pid" || return 1
	fi
	# The engine lists the entry as the file has it (an operator's path stays).
	runsc=$(jq -r --arg n "$name" '.runtimes[$n].path' "$file") || return 1
	for _ in $(seq 1 60); do
		docker info --format '{{json .Runtimes}}' 2>/dev/null | jq -e --arg n "$name" --arg p "$runsc" '.[$n].path == $p' >/dev/null && return 0
		sleep 0.5
	done
	printf 'error: the Docker Engine does not list runtime %s (%s) after reloading %s (does dockerd read another --config-file?)\n' "$name" "$runsc" "$file" >&2
	return 1
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

# ensure_chromium installs Debian's chromium, the browser the web console's
# end-to-end test drives headless (test/e2e/console_browser_test.go).
ensure_chromium() {
	[ -x /usr/bin/chromium ] && return
	log "installing chromium for the web console's browser tests"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq chromium >/dev/null
}

# ensure_console_test_deps installs playwright-core (test/e2e/console,
# pinned by its package-lock.json) with npm ci. playwright-core downloads
# no browser: the test runs Debian's chromium (ensure_chromium).
ensure_console_test_deps() {
	command -v npm >/dev/null || die "npm is not installed: the web console's browser tests run playwright-core; install Node.js 20.18 or newer"
	log "installing playwright-core for the web console's browser tests"
	(cd "$HOTCELL_ROOT/test/e2e/console" && npm ci --no-audit --no-fund --loglevel=error)
}

# PostgreSQL: internal/store runs each of its tests against PostgreSQL as
# well as SQLite, and an e2e test serves a daemon from it. ensure_postgres
# installs Debian's PostgreSQL $HOTCELL_PG_VERSION, starts its cluster
# "main" with pg_ctlcluster (no systemd needed), listening on 127.0.0.1
# only, and makes the role hotcell_test (password hotcell_test; it can
# only log in from loopback and create databases: each test makes a fresh
# one and drops it). It exports HOTCELL_TEST_POSTGRES, the URL the tests
# reach it at (internal/testenv's RequirePostgres). Idempotent: a second
# call finds the server up and the role there.
HOTCELL_PG_VERSION=15
ensure_postgres() {
	local v=$HOTCELL_PG_VERSION policy=/usr/sbin/policy-rc.d ours= port
	if [ ! -x "/usr/lib/postgresql/$v/bin/postgres" ] || ! command -v pg_ctlcluster >/dev/null; then
		log "installing PostgreSQL $v"
		export DEBIAN_FRONTEND=noninteractive
		# The package's scripts would start the server through invoke-rc.d
		# (as a service, which needs an init system); refuse that with a
		# policy-rc.d for the install, unless one is there already, and
		# start the cluster below the same way on every host.
		if [ ! -e "$policy" ]; then
			printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 0755 "$policy" && ours=1
		fi
		apt-get update -qq && apt-get install -y -qq "postgresql-$v" >/dev/null ||
			{ [ -z "$ours" ] || rm -f "$policy"; die "apt-get install postgresql-$v failed"; }
		[ -z "$ours" ] || rm -f "$policy"
	fi
	if ! pg_lsclusters -h | awk -v v="$v" '$1 == v && $2 == "main" { f = 1 } END { exit !f }'; then
		log "creating the PostgreSQL $v cluster main"
		pg_createcluster "$v" main >/dev/null || die "pg_createcluster $v main failed"
	fi
	# Loopback only: nothing off the host reaches the test role.
	local conf=/etc/postgresql/$v/main/conf.d/hotcell.conf
	if [ ! -f "$conf" ]; then
		mkdir -p "$(dirname "$conf")"
		printf "# written by hotcell's scripts/lib.sh (ensure_postgres)\nlisten_addresses = '127.0.0.1'\n" >"$conf"
		pg_ctlcluster "$v" main stop >/dev/null 2>&1 || true # a running server rereads it on start
	fi
	port=$(pg_lsclusters -h | awk -v v="$v" '$1 == v && $2 == "main" { print $3 }')
	if ! pg_isready -q -h 127.0.0.1 -p "$port"; then
		log "starting PostgreSQL $v (cluster main, 127.0.0.1:$port)"
		# /run is a tmpfs: the socket directory goes with each boot.
		install -d -o postgres -g postgres -m 2775 /var/run/postgresql
		pg_ctlcluster "$v" main start || die "PostgreSQL $v did not start; see /var/log/postgresql/postgresql-$v-main.log"
		for _ in $(seq 1 60); do
			pg_isready -q -h 127.0.0.1 -p "$port" && break
			sleep 0.5
		done
		pg_isready -q -h 127.0.0.1 -p "$port" || die "PostgreSQL $v does not answer on 127.0.0.1:$port; see /var/log/postgresql/postgresql-$v-main.log"
	fi
	runuser -u postgres -- psql -q -p "$port" -v ON_ERROR_STOP=1 -c "DO \$\$ BEGIN
		IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'hotcell_test') THEN
			CREATE ROLE hotcell_test LOGIN CREATEDB PASSWORD 'hotcell_test';
		END IF; END \$\$" >/dev/null || die "creating the PostgreSQL role hotcell_test failed"
	export HOTCELL_TEST_POSTGRES="postgres://hotcell_test:hotcell_test@127.0.0.1:$port/postgres?sslmode=disable"
}

# build_binaries builds bin/hotcell and the static bin/hotcell-agent.
build_binaries() {
	log "building hotcell and hotcell-agent"
	mkdir -p "$HOTCELL_ROOT/bin"
	(cd "$HOTCELL_ROOT" &&
		CGO_ENABLED=0 go build -trimpath -o bin/hotcell ./cmd/hotcell &&
		CGO_ENABLED=0 go build -trimpath -o bin/hotcell-agent ./cmd/hotcell-agent)
}

# HOTCELL_BASE_VERSION is images.BaseVersion: an hotcell/base whose
# hotcell.base.version label differs is rebuilt (2 added the user "user").
HOTCELL_BASE_VERSION=2

# ensure_base_image builds hotcell/base:latest unless it is there, at
# HOTCELL_BASE_VERSION.
ensure_base_image() {
	local have
	if have=$(docker image inspect -f '{{index .Config.Labels "hotcell.base.version"}}' hotcell/base:latest 2>/dev/null); then
		if [ "$have" = "$HOTCELL_BASE_VERSION" ]; then return; fi
		log "hotcell/base:latest is version ${have:-1}, want $HOTCELL_BASE_VERSION: rebuilding it"
	fi
	log "building the default image hotcell/base:latest (a few minutes, once)"
	"$HOTCELL_ROOT/bin/hotcell" image build
}

# ensure_code_image builds hotcell/code:latest, the code-interpreter image
# (docs/code.md), unless it is there and was built from this hotcell's
# package list and code server (hotcell image build --code --if-stale
# compares the image's hotcell.code.version label). Building it installs
# Debian's Jupyter kernel, pandas, numpy, matplotlib and nodejs on top of
# hotcell/base from the Debian mirror: about 3 minutes on 2 cores, 1.4 GB.
ensure_code_image() {
	log "checking the code-interpreter image hotcell/code:latest (built once, ~3 minutes)"
	"$HOTCELL_ROOT/bin/hotcell" image build --code --if-stale
}

# ensure_hotcell_image builds hotcell/hotcell:latest, the image of the
# egress-node DaemonSet (deploy/kubernetes/egress-node.yaml), from
# bin/hotcell: its base hotcell/egress-base (hotcell/base plus Debian's
# iptables and ipset, from the Debian mirror, ~30 s) once, then the binary
# on it in seconds. TestDaemonSetEnforces layers its own build on the base.
ensure_hotcell_image() {
	log "checking the egress-node image hotcell/hotcell:latest"
	"$HOTCELL_ROOT/bin/hotcell" image build --hotcell --binary "$HOTCELL_ROOT/bin/hotcell"
}

# The test cluster (scripts/k8s, docs/kubernetes.md).
. "$HOTCELL_ROOT/scripts/lib-k8s.sh"
