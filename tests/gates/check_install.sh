#!/usr/bin/env bash
# Gate: `cmake --install` produces the headers, libraries, CMake package and pkg-config file,
# nothing from the tests; and a consumer project outside the tree builds and runs against the
# installed package, once through find_package and once through pkg-config.
#   check_install.sh BUILD_DIR SOURCE_DIR CXX
set -euo pipefail
build=${1:?} src=${2:?} cxx=${3:?}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >/dev/null

fail=0
expect() { [ -e "$prefix/$1" ] || { echo "INSTALL: missing $1" >&2; fail=1; }; }
expect include/sandboxio/errors.hpp
expect include/sandboxio/error_catalog.inc
expect include/sandboxio/dsn.hpp
expect include/sandboxio/machine.hpp
expect include/sandboxio/sinks.hpp
expect include/sandboxio/sync.hpp
expect include/sandboxio/fake.hpp
expect lib/libsandboxio_fake.a
expect include/sandboxio/docker.hpp
expect lib/libsandboxio_docker.a
expect lib/libsandboxio_blocking.a
expect lib/libsandboxio_sim.a
expect lib/libsandboxio_asio.a
expect lib/libsandboxio_contract.a
expect include/sandboxio/async.hpp
expect include/sandboxio/sim.hpp
expect include/sandboxio/contract.hpp
expect include/sandboxio/contract_gtest.hpp
expect bin/sandboxio
expect bin/sbx
expect lib/libsandboxio_engine.a
expect lib/libsandboxio_runtime.a
expect lib/cmake/sandboxio/sandboxioConfig.cmake
expect lib/cmake/sandboxio/sandboxioConfigVersion.cmake
expect lib/cmake/sandboxio/sandboxioTargets.cmake
expect lib/pkgconfig/sandboxio.pc
expect share/doc/sandboxio/LICENSE
# Nothing from the tests, the gates, the benchmarks or the developer tools.
stray=$(cd "$prefix" && find . -type f | grep -E -i '(^|/)(tests?|gates?|bench|fuzz)(/|$)|_test\b|(^|/)(libg(test|mock)|gtest/|gmock/)|gen_error_docs|consumer' || true)
if [ -n "$stray" ]; then echo "INSTALL: files that do not belong in the package: $stray" >&2; fail=1; fi
# Headers must not include anything from outside the installed tree or the system.
for h in "$prefix"/include/sandboxio/*.hpp; do
  grep -Eq '#include "(\.\./|src/|tests/)' "$h" && { echo "INSTALL: $h includes a private path" >&2; fail=1; }
done
[ "$fail" -eq 0 ] || exit 1

# 1. find_package
cmake -S "$src/tests/consumer" -B "$work/cmake-build" -DCMAKE_PREFIX_PATH="$prefix" \
      -DCMAKE_CXX_COMPILER="$cxx" >/dev/null
cmake --build "$work/cmake-build" >/dev/null
"$work/cmake-build/consumer" | tee "$work/out1"
grep -q '^consumer ok' "$work/out1"

# 2. pkg-config
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
# shellcheck disable=SC2046
"$cxx" -Wall -Wextra -Werror -o "$work/consumer-pc" "$src/tests/consumer/main.cpp" $(pkg-config --cflags --libs sandboxio)
"$work/consumer-pc" | tee "$work/out2"
grep -q '^consumer ok' "$work/out2"
echo "install gate passed: package complete, consumer built with find_package and pkg-config"
