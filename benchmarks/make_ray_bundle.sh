#!/usr/bin/env bash
# Build .rayx/: a slimmed Ray (core only: ray.init / ray start / tasks / actors)
# for CPython 3.12 on x86-64 Linux, small enough to travel through a 64 MiB
# limit, plus .rayx/setup.sh to `source` on the (offline) target machine.
#
#   benchmarks/make_ray_bundle.sh          # run from the repo root
#   PYVER=3.11 OUT=/tmp/rayx311 benchmarks/make_ray_bundle.sh   # local test build
#
# Result: .rayx/ray.tar.xz (ray + jsonschema deps) and .rayx/setup.sh.
set -euo pipefail

# 1. Keep the bundle out of git.
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
grep -qxF '/.rayx/' "$exclude" 2>/dev/null || echo '/.rayx/' >>"$exclude"

RAY_VERSION=${RAY_VERSION:-2.60.0}
PYVER=${PYVER:-3.12}                      # target CPython version
OUT=${OUT:-.rayx}
CACHE=${CACHE:-$HOME/.cache/boo-ray-bundle}/ray$RAY_VERSION-cp${PYVER/./}

# 2. Download the wheels once (ray + the deps the target lacks).
if [ ! -e "$CACHE/.complete" ]; then
  mkdir -p "$CACHE"
  python3 -m pip download -q --no-deps --only-binary=:all: \
    --python-version "$PYVER" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$CACHE" \
    "ray==$RAY_VERSION" jsonschema jsonschema-specifications referencing rpds-py
  touch "$CACHE/.complete"
fi

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

# 3. Unpack every wheel into one site dir, keeping the stored file modes
#    (zipfile drops them, which would leave raylet/gcs_server non-executable).
python3 - "$stage/site" "$CACHE"/*.whl <<'EOF'
import os, sys, zipfile
dest = sys.argv[1]
for whl in sys.argv[2:]:
    with zipfile.ZipFile(whl) as z:
        for info in z.infolist():
            path = z.extract(info, dest)
            mode = info.external_attr >> 16
            if mode & 0o111:
                os.chmod(path, 0o755)
EOF

# 4. Drop what a core-only cluster never loads (checked with an import trace
#    of ray.init, ray start --head, workers, agents, ray status/stop).
cd "$stage/site"
rm -rf ray/jars                      # Java worker (34 MB)
rm -rf ray/dashboard/client/build    # dashboard web UI (the python part stays)
rm -rf ray/serve ray/tune ray/rllib ray/data ray/train ray/llm ray/air
rm -rf ray/includes ray/*.pxd ray/*.pyi   # Cython headers/stubs

# 5. Strip debug info/symbols from the native code (raylet, gcs_server,
#    _raylet.so and the vendored aiohttp/psutil/... extensions).
find . -type f \( -name '*.so' -o -perm -u+x \) -exec sh -c \
  'head -c4 "$1" | grep -q ELF && strip --strip-unneeded "$1"' _ {} \;

# 6. A `ray` command (pip would normally create it from entry_points).
mkdir -p bin
printf '#!/usr/bin/env python3\nimport sys\nfrom ray.scripts.scripts import main\nsys.exit(main())\n' >bin/ray
chmod 755 bin/ray
cd - >/dev/null

# 7. Compress and write setup.sh.
rm -rf "$OUT" && mkdir -p "$OUT"
tar -C "$stage/site" -cf - . | xz -T0 -9e >"$OUT/ray.tar.xz"

cat >"$OUT/setup.sh" <<'EOF'
# source .rayx/setup.sh  -- unpack the slim Ray into $RAYSITE and put it on the paths.
# Safe to source more than once; never exits the calling shell.
RAYSITE=${RAYSITE:-/tmp/raysite}
_rx_tar="$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")" && pwd)/ray.tar.xz"
_rx_sum=$(cksum <"$_rx_tar")
if [ "$(cat "$RAYSITE/.bundle" 2>/dev/null)" != "$_rx_sum" ]; then
  # Unpack with python (the target may lack the xz tool) into a temp dir, then
  # move it into place so a half-unpacked tree is never used.
  rm -rf "$RAYSITE.tmp$$" &&
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter="tar")' \
      "$_rx_tar" "$RAYSITE.tmp$$" &&
    echo "$_rx_sum" >"$RAYSITE.tmp$$/.bundle" &&
    rm -rf "$RAYSITE" && mv "$RAYSITE.tmp$$" "$RAYSITE" ||
    echo "setup.sh: failed to unpack $_rx_tar into $RAYSITE" >&2
fi
case ":${PYTHONPATH:-}:" in *":$RAYSITE:"*) ;; *) export PYTHONPATH=$RAYSITE${PYTHONPATH:+:$PYTHONPATH} ;; esac
case ":$PATH:" in *":$RAYSITE/bin:"*) ;; *) export PATH=$RAYSITE/bin:$PATH ;; esac
# `ray start` turns token auth on whenever ~/.ray/auth_token exists (left by an
# earlier ray.init), and then ray.init(address=...) is refused; default it off.
export RAY_AUTH_MODE=${RAY_AUTH_MODE:-disabled}
export RAY_USAGE_STATS_ENABLED=${RAY_USAGE_STATS_ENABLED:-0}   # no network anyway
unset _rx_tar _rx_sum
EOF

du -b "$OUT"/* && du -sh "$OUT"
