#!/usr/bin/env bash
# Builds h2spec into OUT (default .ci/bin/h2spec) for tests/it/http2_conformance.rs.
# First ../shared/tools/h2spec-build.sh (the project's script); if that
# fails because the source snapshot has no cmd/h2spec (its .gitignore line
# `h2spec` dropped that directory), the same snapshot is built here with
# tests/h2/h2spec-cli/main.go as its command: Debian's Go, no download.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=$(realpath -m "${1:-$repo/.ci/bin/h2spec}")
shared=${SHARED_DIR:-$repo/../shared}
mkdir -p "$(dirname "$out")"
if "$shared/tools/h2spec-build.sh" "$out" && [ -x "$out" ]; then
  exit 0
fi
echo "h2spec-build.sh failed; building the snapshot with tests/h2/h2spec-cli" >&2
if ! command -v go >/dev/null || [ ! -d /usr/share/gocode/src/golang.org/x/net/http2 ]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends golang-go \
    golang-github-fatih-color-dev golang-golang-x-net-dev >/dev/null
fi
gp=$(mktemp -d)
trap 'rm -rf "$gp"' EXIT
src="$gp/src/github.com/summerwind/h2spec"
mkdir -p "$(dirname "$src")"
cp -r "$shared/third_party/h2spec" "$src"
chmod -R u+w "$src"
mkdir -p "$src/cmd/h2spec"
cp "$here/h2spec-cli/main.go" "$src/cmd/h2spec/main.go"
cd "$src"
GOPATH="$gp:/usr/share/gocode" GO111MODULE=off GOFLAGS= GOCACHE="$gp/cache" go build -o "$out" ./cmd/h2spec
echo "built $out"
