#!/usr/bin/env bash
# The Compose stack as its users run it (README, "With Docker Compose";
# docs/operating.md, "The Compose stack, run"). On a Debian 12 machine, as
# root, without a Docker engine, this:
#   - installs podman, Debian's docker-compose (1.29, a Compose
#     implementation that honours depends_on: service_healthy) and
#     mmdebstrap where missing, and starts podman's Docker-compatible API on
#     a socket of its own;
#   - builds stand-ins for the official images that the Dockerfile and the
#     Compose file name (golang, distroless static, redis, postgres,
#     prometheus) from Debian's packages, labelled
#     org.realty-gateway.stand-in=true, and tagged with the official names,
#     so that both files run unchanged;
#   - builds the gateway image from the unchanged deploy/Dockerfile through
#     Compose, starts the unchanged docker-compose.yml with a .env made from
#     .env.example, and walks the journey of the Compose file's header;
#   - removes every container, network and volume it made.
# It exits non-zero, saying what failed, on the first failure.
#
#   bash deploy/compose/check.sh          the check; leaves nothing running
#   KEEP=1 bash deploy/compose/check.sh   leaves the stack up on the ports
#                                         the Compose file publishes
#   bash deploy/compose/check.sh down     removes what a KEEP=1 run left
#
# The Debian root and the module proxy are cached under
# /var/cache/realty-gateway-compose (GATEWAY_COMPOSE_CACHE), and the
# stand-ins in podman's image store, each keyed by a hash of its recipe.
#
# podman runs no healthcheck by itself here (its timers need systemd):
# while the stack is up, a loop of this script runs each container's
# healthcheck every second ("podman healthcheck run"), as a Docker engine
# would at the Compose file's intervals.
set -euo pipefail
# Compose forwards standard input to exec and run: only what is piped in.
exec </dev/null
cd "$(dirname "$0")/../.."
ROOT=$PWD

CACHE=${GATEWAY_COMPOSE_CACHE:-/var/cache/realty-gateway-compose}
RUN_DIR=/run/realty-gateway-compose
PROJECT=realty-gateway-check
SOCK=$RUN_DIR/podman.sock
STANDINS=$ROOT/deploy/compose/standins
GO_VERSION=1.27.3 # the Dockerfile's golang tag
IMAGE=realty-gateway:1.0.0
IMAGE_MAX_MB=40

export DOCKER_HOST=unix://$SOCK
export CONTAINERS_CONF=$RUN_DIR/containers.conf
export CONTAINERS_REGISTRIES_CONF=$RUN_DIR/registries.conf
export COMPOSE_PROJECT_NAME=$PROJECT
# docker-compose runs "docker exec" and "docker start --attach" for exec
# and run (its own socket client never ends a piped standard input): the
# docker of $RUN_DIR/bin is podman, as Debian's podman-docker makes it.
export PATH=$RUN_DIR/bin:$PATH
# Builds go through the API, as Docker's classic builder, in Docker's image
# format (podman's own default, OCI, has no HEALTHCHECK).
export COMPOSE_DOCKER_CLI_BUILD=0 BUILDAH_FORMAT=docker
unset GATEWAY_PUBLISH

T0=$(date +%s)
step() { echo "== [$(($(date +%s) - T0))s] $*"; }
note() { echo "   $*"; }
die() {
  echo "check.sh: FAIL: $*" >&2
  exit 1
}

compose() { docker-compose --ansi never --env-file "$RUN_DIR/env" -f "$ROOT/docker-compose.yml" "$@"; }

# ---------------------------------------------------------------- cleanup

stop_pidfile() {
  local f=$RUN_DIR/$1.pid
  if [ -s "$f" ]; then
    kill "$(cat "$f")" 2>/dev/null || true
    rm -f "$f"
  fi
}

# remove_stack removes every container, network and volume of the
# project, and the helpers this script started.
remove_stack() {
  if [ -S "$SOCK" ] && [ -s "$RUN_DIR/env" ]; then
    compose --profile observability down -v --remove-orphans -t 10 >/dev/null 2>&1 || true
  fi
  if command -v podman >/dev/null 2>&1; then
    local ids
    ids=$(podman ps -aq --filter "label=com.docker.compose.project=$PROJECT" 2>/dev/null || true)
    [ -z "$ids" ] || podman rm -f $ids >/dev/null 2>&1 || true
    podman rm -f "$PROJECT-image" >/dev/null 2>&1 || true
    ids=$(podman volume ls -q --filter "label=com.docker.compose.project=$PROJECT" 2>/dev/null || true)
    [ -z "$ids" ] || podman volume rm -f $ids >/dev/null 2>&1 || true
    podman network rm -f "${PROJECT}_default" >/dev/null 2>&1 || true
    # Anonymous volumes (the images' VOLUMEs) of the containers it ran.
    if [ -s "$RUN_DIR/volumes.before" ]; then
      ids=$(podman volume ls -q 2>/dev/null | sort | comm -13 "$RUN_DIR/volumes.before" - || true)
      [ -z "$ids" ] || podman volume rm -f $ids >/dev/null 2>&1 || true
    fi
  fi
  stop_pidfile health
  stop_pidfile service
}

if [ "${1:-}" = down ]; then
  remove_stack
  rm -rf "$RUN_DIR"
  echo "removed the stack of project $PROJECT"
  exit 0
fi
[ $# -eq 0 ] || die "usage: [KEEP=1] bash deploy/compose/check.sh [down]"
[ "$(id -u)" = 0 ] || die "run as root: podman runs the stack as root here"

on_exit() {
  local rc=$?
  if [ "$rc" -ne 0 ] && [ -S "$SOCK" ] && [ -s "$RUN_DIR/env" ]; then
    echo "---- the stack when it failed:" >&2
    compose --profile observability ps >&2 2>/dev/null || true
    compose --profile observability logs --tail 30 >&2 2>/dev/null || true
  fi
  if [ "${KEEP:-}" = 1 ] && [ "$rc" -eq 0 ]; then
    return
  fi
  [ "${KEEP:-}" = 1 ] && [ "$rc" -ne 0 ] && { echo "KEEP=1: the failed stack is left up" >&2; return; }
  remove_stack
  if [ "$rc" -eq 0 ]; then
    local left
    left=$(podman ps -aq --filter "label=com.docker.compose.project=$PROJECT")
    left+=$(podman volume ls -q | sort | comm -13 "$RUN_DIR/volumes.before" -)
    left+=$(podman network ls -q --filter "name=^${PROJECT}_")
    rm -rf "$RUN_DIR"
    [ -z "$left" ] || { echo "check.sh: FAIL: left behind: $left" >&2; exit 1; }
    step "passed; nothing left running"
  fi
  rm -rf "$RUN_DIR"
}

# ---------------------------------------------------------------- installs

step "installing what is missing"
missing=()
for c in podman:podman netavark:netavark aardvark-dns:aardvark-dns runc:runc conmon:conmon \
  docker-compose:docker-compose mmdebstrap:mmdebstrap jq:jq curl:curl iptables:iptables; do
  cmd=${c%%:*} pkg=${c#*:}
  case $cmd in
  netavark) [ -x /usr/lib/podman/netavark ] || missing+=("$pkg") ;;
  aardvark-dns) [ -x /usr/lib/podman/aardvark-dns ] || missing+=("$pkg") ;;
  *) command -v "$cmd" >/dev/null 2>&1 || missing+=("$pkg") ;;
  esac
done
if [ ${#missing[@]} -gt 0 ]; then
  note "apt-get install ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
command -v go >/dev/null 2>&1 || die "go is not on PATH (the module proxy of the golang stand-in and the JWKS verifier need it)"

# A stale KEEP=1 stack goes first: the check starts from nothing.
remove_stack
rm -rf "$RUN_DIR"
mkdir -p "$RUN_DIR" "$CACHE"
trap on_exit EXIT

# The machine's hard limits are below podman's default ulimits for root,
# and crun fails on its cgroups: runc. No pulls: every image is local, and
# a name that is not must fail, not reach a registry.
cat > "$CONTAINERS_CONF" <<'EOF'
[containers]
default_ulimits = ["nofile=16384:16384", "nproc=16384:16384"]
[engine]
runtime = "runc"
[network]
network_backend = "netavark"
EOF
cat > "$CONTAINERS_REGISTRIES_CONF" <<'EOF'
unqualified-search-registries = []
short-name-mode = "permissive"
[[registry]]
prefix = "docker.io"
location = "docker.io"
blocked = true
[[registry]]
prefix = "gcr.io"
location = "gcr.io"
blocked = true
[[registry]]
prefix = "quay.io"
location = "quay.io"
blocked = true
EOF

podman volume ls -q | sort > "$RUN_DIR/volumes.before"
echo >> "$RUN_DIR/volumes.before" # never empty: remove_stack tests -s
mkdir -p "$RUN_DIR/bin"
printf '#!/bin/sh\nexec podman "$@"\n' > "$RUN_DIR/bin/docker"
chmod +x "$RUN_DIR/bin/docker"

podman system service --time=0 "unix://$SOCK" > "$RUN_DIR/service.log" 2>&1 &
echo $! > "$RUN_DIR/service.pid"
for _ in $(seq 100); do
  curl -sf --unix-socket "$SOCK" http://d/_ping >/dev/null 2>&1 && break
  sleep 0.1
done
curl -sf --unix-socket "$SOCK" http://d/_ping >/dev/null || die "podman's API did not answer on $SOCK: $(tail -5 "$RUN_DIR/service.log")"
note "$(podman --version), $(docker-compose version --short 2>/dev/null | sed 's/^/docker-compose /'), API on $SOCK"

# ---------------------------------------------------------------- stand-ins

hash() { sha256sum | cut -c1-16; }
label_of() { podman image inspect --format "{{index .Labels \"org.realty-gateway.stand-in.recipe\"}}" "$1" 2>/dev/null || true; }

step "Debian root for the stand-ins"
PKGS=ca-certificates,tzdata,netbase,redis-server,postgresql-15,prometheus,wget
SOURCES=/etc/apt/sources.list.d/debian.sources
[ -s "$SOURCES" ] || SOURCES=/etc/apt/sources.list
BASE_RECIPE="mmdebstrap minbase bookworm $PKGS no-recommends no-docs 1"
BASE_KEY=$(printf '%s' "$BASE_RECIPE" | hash)
BASE_TAR=$CACHE/debian-bookworm-$BASE_KEY.tar
BASE=localhost/realty-gateway-compose/debian:$BASE_KEY
if [ ! -s "$BASE_TAR" ]; then
  note "mmdebstrap bookworm (about a minute)"
  mmdebstrap --quiet --variant=minbase --include="$PKGS" \
    --aptopt='APT::Install-Recommends "false"' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    bookworm "$CACHE/partial.tar" "$SOURCES" || die "mmdebstrap failed"
  mv "$CACHE/partial.tar" "$BASE_TAR"
fi
if [ "$(label_of "$BASE")" != "$BASE_KEY" ]; then
  podman import --quiet --change "LABEL org.realty-gateway.stand-in.recipe=$BASE_KEY" \
    --change 'CMD ["/bin/bash"]' "$BASE_TAR" "$BASE" >/dev/null
fi

# build_standin NAME TAG [CONTEXT]: the image of Containerfile.NAME,
# rebuilt only when its recipe changed.
build_standin() {
  local name=$1 tag=$2 ctx=${3:-$STANDINS} key
  key=$( (echo "$BASE_KEY ${EXTRA_KEY:-}"; cat "$STANDINS/Containerfile.$name" "$STANDINS"/*.sh) | hash)
  if [ "$(label_of "$tag")" = "$key" ]; then
    note "$tag: cached stand-in"
    return
  fi
  note "$tag: building the stand-in"
  podman build --quiet -f "$STANDINS/Containerfile.$name" --build-arg "BASE=$BASE" \
    --label org.realty-gateway.stand-in=true --label "org.realty-gateway.stand-in.recipe=$key" \
    -t "$tag" "$ctx" >/dev/null || die "building the $tag stand-in failed"
}

step "stand-ins: redis, postgres, prometheus"
build_standin redis docker.io/library/redis:7.2.5
build_standin postgres docker.io/library/postgres:15.8
build_standin prometheus docker.io/prom/prometheus:v3.5.0

step "stand-in: distroless static (nonroot)"
# What the official image holds: CA certificates, time zones, os-release,
# /etc/services, passwd and group with root, nobody and nonroot (65532),
# /tmp; no shell, no package manager.
DISTROLESS=gcr.io/distroless/static-debian12:nonroot
DL_KEY=$( (echo "$BASE_KEY distroless 1"; sed -n '/^# What the official image holds/,/^DL_END/p' "$0") | hash)
if [ "$(label_of "$DISTROLESS")" != "$DL_KEY" ]; then
  dl=$(mktemp -d)
  tar -xf "$BASE_TAR" -C "$dl" ./etc/ssl/certs/ca-certificates.crt ./usr/share/zoneinfo \
    ./usr/lib/os-release ./etc/services ./etc/protocols
  ln -s ../usr/lib/os-release "$dl/etc/os-release"
  rm -rf "$dl/usr/share/zoneinfo/right" # leap-second variants; distroless ships none
  printf '%s\n' 'root:x:0:0:root:/root:/sbin/nologin' 'nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin' \
    'nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin' > "$dl/etc/passwd"
  printf '%s\n' 'root:x:0:' 'nobody:x:65534:' 'nonroot:x:65532:' > "$dl/etc/group"
  mkdir -p "$dl/tmp" "$dl/home/nonroot" "$dl/root"
  chmod 1777 "$dl/tmp"
  chmod 700 "$dl/home/nonroot" "$dl/root"
  chown 65532:65532 "$dl/home/nonroot"
  tar -C "$dl" --numeric-owner -cf "$dl.tar" .
  podman import --quiet --change "LABEL org.realty-gateway.stand-in=true" \
    --change "LABEL org.realty-gateway.stand-in.recipe=$DL_KEY" \
    --change 'LABEL org.realty-gateway.stand-in.for=gcr.io/distroless/static-debian12:nonroot' \
    --change 'LABEL org.realty-gateway.stand-in.is="Debian 12 (bookworm) ca-certificates, tzdata, base-files, netbase; passwd and group by hand"' \
    --change 'USER 65532:65532' --change 'WORKDIR /home/nonroot' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt' \
    "$dl.tar" "$DISTROLESS" >/dev/null
  rm -rf "$dl" "$dl.tar"
fi
# DL_END

step "stand-in: golang:$GO_VERSION (the toolchain and a module proxy of this repository's modules)"
GOROOT_NEW=$(GOTOOLCHAIN=go$GO_VERSION go env GOROOT) || die "could not fetch go$GO_VERSION through the module proxy"
[ -x "$GOROOT_NEW/bin/go" ] || die "go$GO_VERSION: no toolchain at $GOROOT_NEW"
MOD_KEY=$(cat go.mod go.sum | hash)
PROXY_DIR=$CACHE/goproxy-$MOD_KEY
if [ ! -d "$PROXY_DIR" ]; then
  # Every module that "go mod download" and "CGO_ENABLED=0 go build ."
  # need, in the module proxy's file layout, taken from this machine's
  # module cache where it holds them, else from its module proxy.
  tmpmod=$(mktemp -d)
  hostdl=$(go env GOMODCACHE)/cache/download
  GOMODCACHE=$tmpmod GOFLAGS=-modcacherw GOTOOLCHAIN=local GOPROXY="file://$hostdl,$(go env GOPROXY)" \
    go mod download || die "go mod download for the module proxy failed"
  GOMODCACHE=$tmpmod GOFLAGS=-modcacherw GOTOOLCHAIN=local GOPROXY="file://$hostdl,$(go env GOPROXY)" \
    CGO_ENABLED=0 go list -deps . >/dev/null || die "go list for the module proxy failed"
  rm -rf "$tmpmod/cache/download/sumdb" "$tmpmod/cache/download/golang.org/toolchain"
  mv "$tmpmod/cache/download" "$PROXY_DIR.tmp"
  rm -rf "$tmpmod"
  mv "$PROXY_DIR.tmp" "$PROXY_DIR"
fi
EXTRA_KEY="go$GO_VERSION $MOD_KEY"
GOLANG=docker.io/library/golang:$GO_VERSION
ctx=$CACHE/golang-context
rm -rf "$ctx"
mkdir -p "$ctx"
cp -al "$GOROOT_NEW" "$ctx/go" 2>/dev/null || cp -a "$GOROOT_NEW" "$ctx/go"
cp -al "$PROXY_DIR" "$ctx/goproxy" 2>/dev/null || cp -a "$PROXY_DIR" "$ctx/goproxy"
build_standin golang "$GOLANG" "$ctx"
EXTRA_KEY=
rm -rf "$ctx"

# ---------------------------------------------------------------- the stack

# The .env of the Compose file's header: .env.example with its blanks
# filled in.
pg_password=$(head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n')
sed "s/^POSTGRES_PASSWORD=\$/POSTGRES_PASSWORD=$pg_password/" .env.example > "$RUN_DIR/env"
grep -q "^POSTGRES_PASSWORD=$pg_password\$" "$RUN_DIR/env" || die ".env.example has no blank POSTGRES_PASSWORD= line to fill"
if grep -Eq '^[A-Z_]+=$' "$RUN_DIR/env"; then die ".env.example asks for a value the check does not know: $(grep -E '^[A-Z_]+=$' "$RUN_DIR/env")"; fi

# The healthcheck loop (see the header). It notes when each container
# first reported healthy, for the depends_on check.
mkdir -p "$RUN_DIR/healthy"
(
  while :; do
    for id in $(podman ps -q --no-trunc --filter "label=com.docker.compose.project=$PROJECT" 2>/dev/null); do
      if podman healthcheck run "$id" >/dev/null 2>&1 && [ ! -e "$RUN_DIR/healthy/$id" ]; then
        date +%s.%N > "$RUN_DIR/healthy/$id"
      fi
    done
    sleep 1
  done
) </dev/null >/dev/null 2>&1 &
echo $! > "$RUN_DIR/health.pid"

step "docker-compose build gateway (deploy/Dockerfile, unchanged)"
build_start=$(date -u +%Y-%m-%dT%H:%M:%SZ)
compose build gateway > "$RUN_DIR/build.log" 2>&1 || {
  tail -40 "$RUN_DIR/build.log" >&2
  die "the image did not build"
}
# Earlier builds' untagged images (the build stage, about 2 GB each; they
# carry the stand-ins' labels); this build's stay as the layer cache.
podman image prune -f --filter label=org.realty-gateway.stand-in=true --filter "until=$build_start" >/dev/null 2>&1 || true

step "the image: size, user, healthcheck without a shell"
size=$(podman image inspect --format '{{.Size}}' "$IMAGE")
gz=$(podman save "$IMAGE" 2>/dev/null | gzip -c | wc -c)
user=$(podman image inspect --format '{{.Config.User}}' "$IMAGE")
hc=$(podman image inspect --format '{{json .Config.Healthcheck}}' "$IMAGE" | jq -c '.Test // empty')
note "$IMAGE: $((size / 1000000)).$(((size % 1000000) / 100000)) MB ($size bytes; $((gz / 1000000)).$(((gz % 1000000) / 100000)) MB compressed), user $user, HEALTHCHECK $hc"
[ "$user" = 65532:65532 ] || die "the image runs as '$user', not 65532:65532"
[ "$size" -le $((IMAGE_MAX_MB * 1000000)) ] || die "the image is larger than $IMAGE_MAX_MB MB (docs/operating.md, \"The Compose stack, run\")"
[ "$(jq -r '.[0]' <<<"${hc:-null}")" = CMD ] || die "the image's HEALTHCHECK is not in exec form: ${hc:-none}"
if podman run --rm --entrypoint /bin/sh "$IMAGE" -c true >/dev/null 2>&1; then die "the image has a shell"; fi
# The image alone (embedded SQLite in its data directory), hardened as in
# the Compose file: its own HEALTHCHECK reports healthy.
podman run -d --name "$PROJECT-image" --label "com.docker.compose.project=$PROJECT" --read-only --cap-drop ALL \
  --security-opt no-new-privileges "$IMAGE" >/dev/null 2>"$RUN_DIR/image.err" || die "the image alone did not start: $(cat "$RUN_DIR/image.err")"
for _ in $(seq 60); do
  [ "$(podman inspect --format '{{.State.Health.Status}}' "$PROJECT-image")" = healthy ] && break
  sleep 0.5
done
[ "$(podman inspect --format '{{.State.Health.Status}}' "$PROJECT-image")" = healthy ] ||
  die "the image alone did not turn healthy: $(podman logs --tail 5 "$PROJECT-image" 2>&1)"
podman rm -f "$PROJECT-image" >/dev/null

# ---------------------------------------------------------------- helpers

BODY=$RUN_DIR/body
HEADERS=$RUN_DIR/headers
# req METHOD URL [TOKEN] [JSON]: prints the status; the body is in $BODY,
# the headers in $HEADERS.
req() {
  local args=(-sS -o "$BODY" -D "$HEADERS" -w '%{http_code}' -X "$1" --max-time 20 -H 'User-Agent: compose-check')
  [ -z "${3:-}" ] || args+=(-H "Authorization: Bearer $3")
  [ -z "${4:-}" ] || args+=(-H 'Content-Type: application/json' --data "$4")
  curl "${args[@]}" "$2" 2>"$RUN_DIR/curl.err" || { echo "curl: $(cat "$RUN_DIR/curl.err")"; }
}
# expect STATUS METHOD URL [TOKEN] [JSON]
expect() {
  local want=$1 got
  shift
  got=$(req "$@")
  [ "$got" = "$want" ] || die "$1 $2: $got, want $want: $(head -c 600 "$BODY" 2>/dev/null)"
}
header() { tr -d '\r' < "$HEADERS" | sed -n "s/^$1: //Ip" | head -1; }

ids_of() { compose ps -q "$1" 2>/dev/null; }
# wait_healthy SERVICE...: every container of each service is healthy.
wait_healthy() {
  local deadline=$(($(date +%s) + ${PATIENCE:-120})) s id st pending
  while :; do
    pending=
    for s in "$@"; do
      ids=$(ids_of "$s")
      [ -n "$ids" ] || pending="$pending $s(no container)"
      for id in $ids; do
        st=$(podman inspect --format '{{.State.Status}} {{.State.Health.Status}}' "$id" 2>/dev/null || echo gone)
        [ "$st" = "running healthy" ] || pending="$pending $s($st)"
      done
    done
    [ -n "$pending" ] || return 0
    [ "$(date +%s)" -lt "$deadline" ] || die "not healthy within ${PATIENCE:-120}s:$pending"
    sleep 0.5
  done
}
epoch() { date -d "$1" +%s.%N; }
# before A B: epoch A < epoch B
before() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a < b) }'; }

GW=http://127.0.0.1:8080
(cd "$ROOT" && go build -o "$RUN_DIR/jwksverify" ./deploy/compose/jwksverify) || die "building deploy/compose/jwksverify failed"
# jwks_verify BASEURL TOKEN...: go-jose, the JWKS fetched from BASEURL.
jwks_verify() {
  local base=$1
  shift
  "$RUN_DIR/jwksverify" -jwks "$base/.well-known/jwks.json" "$@" || die "the token did not verify against $base/.well-known/jwks.json"
}
kids() { curl -sf "$1/.well-known/jwks.json" | jq -r '[.keys[].kid] | sort | join(",")'; }
login() { # login BASEURL → token
  expect 200 POST "$1/auth/login" "" "{\"email\":\"agent@acme.example\",\"password\":\"$PASSWORD\",\"key\":\"$API_KEY\"}"
  jq -r .jwtToken "$BODY"
}
psql_q() { compose exec -T postgres psql -U gateway -d gateway -tAc "$1" </dev/null; }

# ---------------------------------------------------------------- journey

step "docker-compose up -d (depends_on: service_healthy)"
compose up -d > "$RUN_DIR/up.log" 2>&1 || {
  cat "$RUN_DIR/up.log" >&2
  die "docker-compose up failed"
}
wait_healthy postgres redis gateway
gw_id=$(ids_of gateway)
gw_started=$(epoch "$(podman inspect --format '{{.State.StartedAt}}' "$gw_id" | sed 's/ +0000 UTC//')")
for s in postgres redis; do
  id=$(ids_of "$s")
  [ -s "$RUN_DIR/healthy/$id" ] || die "$s: no healthy report recorded"
  before "$(cat "$RUN_DIR/healthy/$id")" "$gw_started" || die "the gateway started before $s was healthy"
done
note "postgres and redis healthy before the gateway started; all three healthy"

step "hardening of the running gateway"
[ "$(podman inspect --format '{{.HostConfig.ReadonlyRootfs}}' "$gw_id")" = true ] || die "the gateway's root filesystem is writable"
gw_pid=$(podman inspect --format '{{.State.Pid}}' "$gw_id")
grep -q '^NoNewPrivs:[[:space:]]*1' "/proc/$gw_pid/status" || die "the gateway may gain privileges (NoNewPrivs is not 1)"
grep -q '^CapEff:[[:space:]]*0000000000000000' "/proc/$gw_pid/status" || die "the gateway holds capabilities: $(grep CapEff "/proc/$gw_pid/status")"
grep -q '^CapPrm:[[:space:]]*0000000000000000' "/proc/$gw_pid/status" || die "the gateway holds permitted capabilities"
uid=$(awk '/^Uid:/ { print $2 }' "/proc/$gw_pid/status")
[ "$uid" = 65532 ] || die "the gateway runs as uid $uid"
rw=$(awk '$5 != "/" && $6 ~ /(^|,)rw(,|$)/ { print $5 }' "/proc/$gw_pid/mountinfo" | grep -Ev '^/(proc|dev|sys)(/|$)' | sort | tr '\n' ' ')
note "uid 65532, no capabilities, no_new_privs, read-only root; writable mounts: $rw"

step "firm add and user add (docker-compose exec, the image's binary)"
# add_firm HOW NAME, add_user HOW: HOW is "exec" (into the running gateway)
# or "run" (a one-off container, the Compose file's header).
add_firm() {
  local out line
  if [ "$1" = exec ]; then
    out=$(compose exec -T gateway /app/gateway firm add --name "$2" </dev/null 2>"$RUN_DIR/run.err") || die "firm add ($1): $(cat "$RUN_DIR/run.err")"
  else
    out=$(compose run --rm gateway firm add --name "$2" </dev/null 2>"$RUN_DIR/run.err") || die "firm add ($1): $(cat "$RUN_DIR/run.err")"
  fi
  line=$(tr -d '\r' <<<"$out" | grep '^{' | tail -1)
  FIRM=$(jq -r .firmId <<<"$line")
  API_KEY=$(jq -r .apiKey <<<"$line")
  [ "$FIRM" -gt 0 ] 2>/dev/null && [ -n "$API_KEY" ] || die "firm add ($1) printed no firm: $out"
}
add_user() {
  local out
  if [ "$1" = exec ]; then
    out=$(printf '%s\n' "$PASSWORD" | compose exec -T gateway /app/gateway user add --firm "$FIRM" --email agent@acme.example --password-stdin 2>"$RUN_DIR/run.err") ||
      die "user add ($1): $(cat "$RUN_DIR/run.err")"
  else
    out=$(printf '%s\n' "$PASSWORD" | compose run --rm -T gateway user add --firm "$FIRM" --email agent@acme.example --password-stdin 2>"$RUN_DIR/run.err") ||
      die "user add ($1): $(cat "$RUN_DIR/run.err")"
  fi
  grep -q '"firmUserId"' <<<"$out" || die "user add ($1) printed no user: $out"
}
PASSWORD=$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
add_firm exec "Acme Realty"
add_user exec
note "firm $FIRM, user agent@acme.example"

step "login through the published port, a listing written, read by id and by number"
TOKEN=$(login "$GW")
alg=$(cut -d. -f1 <<<"$TOKEN" | tr '_-' '/+' | base64 -d 2>/dev/null | jq -r .alg || true)
[ "$alg" = ES256 ] || die "the token is signed $alg, not ES256"
LISTING='{"title":"Compose check: two rooms by the park","isActive":true,"categoryId":1,"location":{"cityId":34,"cityName":"Springfield"},"attributes":{"price":250000,"room":2}}'
expect 201 POST "$GW/realty" "$TOKEN" "$LISTING"
ID=$(jq -r .id "$BODY")
NO=$(jq -r .no "$BODY")
[ "$ID" -gt 0 ] 2>/dev/null || die "the created listing has no id: $(cat "$BODY")"
# The miss: Redis holds nothing of it yet, after the read it does; the row
# is PostgreSQL's. The write left a copy in the gateway's local tier, kept
# at most the local max age (GATEWAY_CACHE_LOCAL_MAX_AGE, 2 s) from the
# write's start: past it, the read goes to Redis, then the store.
compose exec -T redis redis-cli FLUSHALL </dev/null >/dev/null
sleep 2.5
[ "$(psql_q "SELECT count(*) FROM listings WHERE id = $ID")" = 1 ] || die "PostgreSQL holds no listing $ID"
expect 200 GET "$GW/realty/$ID" "$TOKEN"
xcache=$(header X-Cache)
[ "$(jq -r .title "$BODY")" = "Compose check: two rooms by the park" ] || die "GET /realty/$ID: $(cat "$BODY")"
[ "$xcache" = MISS ] || die "the first read after Redis was flushed is X-Cache $xcache, not a miss"
keys=$(compose exec -T redis redis-cli DBSIZE </dev/null | tr -d '\r')
[ "$keys" -gt 0 ] || die "the miss left nothing in Redis"
expect 200 GET "$GW/realty/$FIRM-$NO" "$TOKEN"
[ "$(jq -r .id "$BODY")" = "$ID" ] || die "GET /realty/$FIRM-$NO is not listing $ID"
note "listing $ID ($FIRM-$NO): first read X-Cache $xcache, Redis then holds $keys keys; by number X-Cache $(header X-Cache)"

step "the token verifies against the stack's JWKS (go-jose)"
jwks_verify "$GW" "$TOKEN" | sed 's/^/   /'
KIDS=$(kids "$GW")
for k in ${KIDS//,/ }; do
  [ "$(psql_q "SELECT alg FROM signing_keys WHERE kid = '$k'")" = ES256 ] || die "JWKS kid $k is not an ES256 key in PostgreSQL's signing_keys"
done
note "JWKS kids $KIDS, each in PostgreSQL's signing_keys"

step "the gateway wrote nothing outside its data volume"
# podman mounts a tmpfs on /tmp, /var/tmp and /run of a read-only container;
# Docker does not, so they must stay empty.
gw_pid=$(podman inspect --format '{{.State.Pid}}' "$(ids_of gateway)")
for d in /tmp /var/tmp /run; do
  [ -z "$(ls -A "/proc/$gw_pid/root$d" 2>/dev/null | grep -v -x -e .containerenv -e secrets)" ] ||
    die "the gateway wrote into $d: $(ls -A "/proc/$gw_pid/root$d")"
done
files=$(find "/proc/$gw_pid/root/app/data" -type f -printf '%P(%m) ' 2>/dev/null)
note "nothing in /tmp, /var/tmp, /run; /app/data holds: $files"

step "docker-compose logs gateway: the structured log"
compose logs --no-color gateway > "$RUN_DIR/gateway.log" 2>&1
grep -q '"msg":"gateway listening"' "$RUN_DIR/gateway.log" || die "docker-compose logs gateway shows no JSON 'gateway listening' line"
note "$(grep -c '{"time"' "$RUN_DIR/gateway.log") JSON lines"

# survives CHECK: the token, the key set and the listing are the same.
survives() {
  expect 200 GET "$GW/realty/$ID" "$TOKEN"
  [ "$(jq -r .id "$BODY")" = "$ID" ] || die "$1: listing $ID is gone"
  [ "$(kids "$GW")" = "$KIDS" ] || die "$1: the JWKS changed: $(kids "$GW"), was $KIDS"
  jwks_verify "$GW" "$TOKEN" >/dev/null
  login "$GW" >/dev/null
}

step "docker-compose restart gateway keeps the key, its tokens and the listings"
compose restart gateway >/dev/null 2>&1 || die "docker-compose restart gateway failed"
wait_healthy gateway
survives "after the restart"

step "docker-compose down, then up, with the volumes kept; the header's docker-compose run lines"
compose down >/dev/null 2>&1 || die "docker-compose down failed"
[ -z "$(podman ps -aq --filter "label=com.docker.compose.project=$PROJECT")" ] || die "containers left after down"
# The header's "docker compose run --rm gateway ..." lines, while the
# gateway is not running: Compose 1.29 links a one-off container to its
# service's running containers, a legacy link that podman's API refuses
# (Docker's engine and Compose v2 do not need it).
compose up -d postgres redis >/dev/null 2>&1 || die "docker-compose up postgres redis failed"
wait_healthy postgres redis
first_firm=$FIRM first_key=$API_KEY
add_firm run "Beta Realty"
add_user run
second_firm=$FIRM second_key=$API_KEY
compose up -d >/dev/null 2>&1 || die "docker-compose up after down failed"
wait_healthy postgres redis gateway
login "$GW" >/dev/null
FIRM=$first_firm API_KEY=$first_key
survives "after down and up"
note "firm $second_firm and its user made with docker-compose run; they log in"

step "--scale gateway=2: the replicas verify each other's tokens"
GATEWAY_PUBLISH=127.0.0.1: compose up -d --scale gateway=2 >/dev/null 2>&1 || die "docker-compose up --scale gateway=2 failed"
wait_healthy gateway
[ "$(ids_of gateway | wc -l)" = 2 ] || die "not two gateway replicas"
p1=$(GATEWAY_PUBLISH=127.0.0.1: compose port --index=1 gateway 8080)
p2=$(GATEWAY_PUBLISH=127.0.0.1: compose port --index=2 gateway 8080)
[ -n "$p1" ] && [ -n "$p2" ] && [ "$p1" != "$p2" ] || die "the replicas' ports: '$p1' '$p2'"
t1=$(login "http://$p1")
t2=$(login "http://$p2")
expect 200 GET "http://$p2/realty/$ID" "$t1"
expect 200 GET "http://$p1/realty/$ID" "$t2"
jwks_verify "http://$p1" "$t1" "$t2" >/dev/null
jwks_verify "http://$p2" "$t1" "$t2" >/dev/null
note "replica $p1 and replica $p2: each accepts the other's token; both JWKS verify both"

step "observability profile: Prometheus (stand-in) loads the rules and scrapes both replicas"
GATEWAY_PUBLISH=127.0.0.1: compose --profile observability up -d --scale gateway=2 prometheus >/dev/null 2>&1 || die "starting prometheus failed"
wait_healthy prometheus
PROM=http://127.0.0.1:9090
rules=$(curl -sf "$PROM/api/v1/rules" | jq '[.data.groups[].rules[]] | length')
want_rules=$(grep -Ec '^ *- (alert|record):' deploy/observability/alerts.yaml)
[ "$rules" = "$want_rules" ] || die "Prometheus loaded $rules rules, alerts.yaml has $want_rules (alerting and recording)"
up=0
for _ in $(seq 60); do
  up=$(curl -sf "$PROM/api/v1/targets" | jq '[.data.activeTargets[] | select(.labels.job == "realty-gateway" and .health == "up")] | length')
  [ "$up" = 2 ] && break
  sleep 1
done
[ "$up" = 2 ] || die "Prometheus scrapes $up gateway replicas, want 2: $(curl -sf "$PROM/api/v1/targets" | jq -c '[.data.activeTargets[] | {scrapeUrl, health, lastError}]')"
note "$rules rules loaded; 2 replicas up on the admin port (job realty-gateway)"
python3 - <<'EOF' || die "Grafana's provisioning files do not parse"
import json, yaml
for f in ("deploy/observability/grafana/datasources.yaml", "deploy/observability/grafana/dashboards.yaml"):
    doc = yaml.safe_load(open(f))
    assert doc.get("apiVersion") == 1, f
json.load(open("deploy/observability/dashboard.json"))
EOF
note "Grafana: no stand-in (no Debian package); its provisioning files and dashboard parse"
compose --profile observability rm -sf prometheus >/dev/null 2>&1
compose up -d --scale gateway=1 >/dev/null 2>&1 || die "back to one replica failed"
wait_healthy gateway
expect 200 GET "$GW/realty/$ID" "$TOKEN"

step "docker-compose stop (default grace, 10 s) with requests in flight"
cfg=$RUN_DIR/load.cfg
awk -v u="$GW/realty/$ID" 'BEGIN { for (i = 0; i < 20000; i++) printf "url = \"%s\"\noutput = \"/dev/null\"\n", u }' > "$cfg"
for i in 1 2 3; do
  curl -s -K "$cfg" -H "Authorization: Bearer $TOKEN" -H 'User-Agent: compose-check' --max-time 30 \
    -w '%{stderr}%{http_code} %{exitcode}\n' 2>"$RUN_DIR/load.$i" &
  echo $! >> "$RUN_DIR/load.pids"
done
sleep 2
gw_id=$(ids_of gateway)
t_stop=$(date +%s.%N)
compose stop >/dev/null 2>&1 || die "docker-compose stop failed"
t_end=$(date +%s.%N)
for p in $(cat "$RUN_DIR/load.pids"); do wait "$p" || true; done
stop_s=$(awk -v a="$t_stop" -v b="$t_end" 'BEGIN { printf "%.1f", b - a }')
code=$(podman inspect --format '{{.State.ExitCode}}' "$gw_id")
gw_fin=$(epoch "$(podman inspect --format '{{.State.FinishedAt}}' "$gw_id" | sed 's/ +0000 UTC//')")
gw_s=$(awk -v a="$t_stop" -v b="$gw_fin" 'BEGIN { printf "%.1f", b - a }')
[ "$code" = 0 ] || die "the gateway exited $code on the stop"
awk -v s="$stop_s" 'BEGIN { exit !(s < 10) }' || die "the stop took ${stop_s}s, not within the 10 s grace"
for s in postgres redis; do
  c=$(podman inspect --format '{{.State.ExitCode}}' "$(ids_of "$s")")
  [ "$c" = 0 ] || die "$s exited $c on the stop"
done
ok=$(cat "$RUN_DIR"/load.? | grep -c '^200 0$' || true)
refused=$(cat "$RUN_DIR"/load.? | grep -c '^000 7$' || true)
other=$(cat "$RUN_DIR"/load.? | grep -v -e '^200 0$' -e '^000 7$' | sort | uniq -c | tr '\n' ';' || true)
[ "$ok" -gt 0 ] || die "no request succeeded under load"
[ -z "$other" ] || die "requests cut or failed during the stop (status exit-code: count): $other"
sigterm=$(podman logs "$gw_id" 2>&1 | grep '"msg":"shutting down"' | tail -1 | jq -r .time)
[ -n "$sigterm" ] || die "the gateway logged no drain"
exit_s=$(awk -v a="$(epoch "$sigterm")" -v b="$gw_fin" 'BEGIN { printf "%.1f", b - a }')
note "the stack stopped in ${stop_s}s (the gateway exited ${gw_s}s after the command, ${exit_s}s after its SIGTERM), gateway exit 0; $ok requests answered 200, $refused refused after the listener closed, none cut"
compose start >/dev/null 2>&1 || die "docker-compose start failed"
wait_healthy postgres redis gateway
survives "after stop and start"

step "docker-compose down -v starts clean"
compose down -v >/dev/null 2>&1 || die "docker-compose down -v failed"
[ -z "$(podman volume ls -q --filter "label=com.docker.compose.project=$PROJECT")" ] || die "volumes left after down -v"
compose up -d >/dev/null 2>&1 || die "docker-compose up after down -v failed"
wait_healthy postgres redis gateway
[ "$(psql_q "SELECT count(*) FROM firms")" = 0 ] || die "after down -v PostgreSQL still holds firms"
expect 401 GET "$GW/realty/$ID" "$TOKEN"
new_kids=$(kids "$GW")
[ -n "$new_kids" ] && [ "$new_kids" != "$KIDS" ] || die "after down -v the JWKS is $new_kids (was $KIDS)"
note "no firms, the old token refused, a new key ($new_kids)"

if [ "${KEEP:-}" = 1 ]; then
  add_firm exec "Acme Realty"
  add_user exec
  login "$GW" >/dev/null
  step "KEEP=1: the stack is up (project $PROJECT)"
  cat <<EOF
   export DOCKER_HOST=$DOCKER_HOST CONTAINERS_CONF=$CONTAINERS_CONF CONTAINERS_REGISTRIES_CONF=$CONTAINERS_REGISTRIES_CONF
   docker-compose -p $PROJECT --env-file $RUN_DIR/env ps
   curl -s $GW/auth/login -H 'Content-Type: application/json' -d '{"email":"agent@acme.example","password":"$PASSWORD","key":"$API_KEY"}'
   bash deploy/compose/check.sh down     # removes it all
EOF
fi
