#!/usr/bin/env bash
# Install s3rver (a local S3-compatible server for the remote tests) into build/s3rver once, then
# print the path of its command. Idempotent: with it installed this only prints the path.
# Usage: scripts/s3rver.sh [PREFIX]   (default build/s3rver)
set -eu
prefix=${1:-build/s3rver}
bin="$prefix/node_modules/.bin/s3rver"
if [ ! -x "$bin" ]; then
    command -v npm >/dev/null || { echo "s3rver.sh: npm not found (install nodejs: scripts/deps.sh)" >&2; exit 1; }
    mkdir -p "$prefix"
    npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error s3rver@3.7.1 >&2
fi
echo "$(cd "$(dirname "$bin")" && pwd)/s3rver"
