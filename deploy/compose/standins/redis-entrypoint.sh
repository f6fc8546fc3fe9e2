#!/bin/sh
# The Redis stand-in's entrypoint (deploy/compose/check.sh): as the official
# image, protected mode off (the Compose network is the boundary) and the
# server run as the redis user from /data.
set -eu
if [ "${1#-}" != "$1" ]; then set -- redis-server "$@"; fi
if [ "${1:-}" = redis-server ]; then
  shift
  set -- redis-server --protected-mode no "$@"
  if [ "$(id -u)" = 0 ]; then
    chown -R redis:redis /data
    exec setpriv --reuid=redis --regid=redis --init-groups "$@"
  fi
fi
exec "$@"
