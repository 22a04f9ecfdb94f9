#!/bin/sh
# Copies the current src/ and bench/ (working tree; HEAD alone may lack files a commit refers to)
# to a scratch tree outside the work tree, so long experiments are not broken by colleagues' edits
# in progress. Take it when `npm run bench` starts; read-only for the repo.
#   sh bench/experiments/snapshot.sh /tmp/paywarden-snap  then  cd /tmp/paywarden-snap && npx tsx bench/experiments/…
set -eu
DEST=${1:-/tmp/paywarden-snap}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$DEST"
mkdir -p "$DEST"
cp -R "$ROOT/src" "$ROOT/package.json" "$ROOT/tsconfig.json" "$DEST/"
cp -R "$ROOT/bench" "$DEST/bench"
rm -rf "$DEST/bench/results"
ln -s "$ROOT/node_modules" "$DEST/node_modules"
echo "snapshot of the working tree (HEAD $(git -C "$ROOT" rev-parse --short HEAD)) in $DEST"
