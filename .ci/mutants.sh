#!/usr/bin/env bash
# Mutation testing before landing (issue 33, item 5): cargo-mutants (crates.io, installed once
# into target/tools) applies one plausible bug at a time (an operator flipped, a constant
# changed, a function body replaced by a default value) to the loader's orders and rules and
# runs the tests of the package that holds them; a mutant the tests do not catch ("missed")
# is a rule no test pins. Not part of CI's default run (.ci/run): it builds and tests once per
# mutant, minutes each on two cores. docs/TESTING.md ("Mutation testing (cargo mutants)")
# lists the survivors of the last run with their verdicts, its command and its run time.
#
# Usage: .ci/mutants.sh [SCOPE...] [-- CARGO-MUTANTS-ARGS...]
#   SCOPE (default: all, in this order; mutants in each at the last run: orders 621, mix 273,
#   pack 257, elastic 87, sequential 329, foreign 1976):
#     orders      interop/src/orders (Megatron's samples, blends and splits, llm.c's orders)
#     mix         loader/src/mix.rs (mixture schedules)
#     pack        loader/src/pack.rs, loader/src/stage/pack.rs, loader/src/sequential/packer.rs
#     elastic     loader/src/state.rs, loader/src/indexed/iter.rs (states, elastic resume)
#     sequential  loader/src/sequential (shard sources, the re-deal, their states)
#     foreign     interop/src/layouts (the foreign readers' validations)
#   CARGO-MUTANTS-ARGS go to cargo-mutants as they are (for example `--list`, `--in-place`,
#   `--re PATTERN`, `--shard 0/4`).
# Environment:
#   GUIDELOOM_MUTANTS_JOBS     parallel mutants (default 1; each takes a build's memory)
#   GUIDELOOM_MUTANTS_TIMEOUT  seconds a mutant's tests may run (default 600)
#   GUIDELOOM_MUTANTS_COPY_TARGET  start the scratch copy from target/ (default true: the
#                              dependencies are not rebuilt; false for a clean build)
#   GUIDELOOM_MUTANTS_OUT      where results go (default target/mutants): one folder per scope
#                              with cargo-mutants' mutants.out (caught.txt, missed.txt,
#                              timeout.txt, unviable.txt, outcomes.json, one log per mutant)
# Exit status: 0 when every scope ran and no mutant was missed, else cargo-mutants' own (2:
# some mutant was missed; 3: some timed out; 4: the tests fail without any mutation).
set -euo pipefail
cd "$(dirname "$0")/.."
unset CARGO_TARGET_DIR # cargo-mutants builds in its own copy of the tree

tools="$PWD/target/tools"
mutants="$tools/bin/cargo-mutants"
if ! "$mutants" mutants --version >/dev/null 2>&1; then
  echo "== installing cargo-mutants from crates.io into target/tools (once)"
  cargo install --root "$tools" cargo-mutants --locked
fi

scopes=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  scopes+=("$1")
  shift
done
[ "${1-}" = "--" ] && shift
[ ${#scopes[@]} -eq 0 ] && scopes=(orders mix pack elastic sequential foreign)

jobs="${GUIDELOOM_MUTANTS_JOBS:-1}"
timeout="${GUIDELOOM_MUTANTS_TIMEOUT:-600}"
out="${GUIDELOOM_MUTANTS_OUT:-$PWD/target/mutants}"
copy_target="${GUIDELOOM_MUTANTS_COPY_TARGET:-true}"
status=0
for scope in "${scopes[@]}"; do
  # The package whose code is mutated, its test targets run for each mutant (the library's
  # unit tests and the one integration-test binary; no doc-tests, no thread/allocator
  # binaries), and the files mutated.
  case "$scope" in
    orders) pkg=guideloom-interop tests=(--lib --test interop) files=("interop/src/orders/**/*.rs") ;;
    mix) pkg=guideloom-loader tests=(--lib --test it) files=(loader/src/mix.rs) ;;
    pack) pkg=guideloom-loader tests=(--lib --test it)
      files=(loader/src/pack.rs loader/src/stage/pack.rs loader/src/sequential/packer.rs) ;;
    elastic) pkg=guideloom-loader tests=(--lib --test it) files=(loader/src/state.rs loader/src/indexed/iter.rs) ;;
    sequential) pkg=guideloom-loader tests=(--lib --test it) files=("loader/src/sequential/*.rs") ;;
    foreign) pkg=guideloom-interop tests=(--lib --test interop) files=("interop/src/layouts/**/*.rs") ;;
    *)
      echo "unknown scope $scope: expected orders, mix, pack, elastic, sequential or foreign" >&2
      exit 64
      ;;
  esac
  file_args=()
  for f in "${files[@]}"; do file_args+=(--file "$f"); done
  echo "== [${SECONDS}s] cargo mutants: $scope (package $pkg; ${files[*]})"
  mkdir -p "$out/$scope"
  rc=0
  # --copy-target: the scratch copy starts from this tree's target/ (dependencies built once).
  "$mutants" mutants --package "$pkg" --test-package "$pkg" "${file_args[@]}" \
    --copy-target "$copy_target" --jobs "$jobs" --timeout "$timeout" --output "$out/$scope" \
    "$@" -- "${tests[@]}" || rc=$?
  missed="$out/$scope/mutants.out/missed.txt"
  echo "== [${SECONDS}s] $scope: exit $rc; missed: $(if [ -f "$missed" ]; then wc -l <"$missed"; else echo none run; fi)"
  [ "$rc" -ne 0 ] && [ "$status" -eq 0 ] && status=$rc
done
exit "$status"
