#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Builds the engine and store tests with AddressSanitizer + UndefinedBehaviorSanitizer
# (build/asan) and the thread hand-over test with ThreadSanitizer (build/tsan), and runs them.
# Only Mantissa's own code is instrumented: LibTorch, Qt and SQLite come prebuilt. ASan still
# checks every heap access our code makes (its allocator serves the whole process); TSan only
# understands threads whose code it compiled, which is why test_threads does not link LibTorch.
# The GUI tests are left out (Qt draws nothing of ours that these would check).
#   scripts/sanitize.sh [asan|tsan|all]      default: all; MANTISSA_JOBS (default 2) build jobs and tests at once
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WHICH="${1:-all}"
JOBS="${MANTISSA_JOBS:-2}"
SUPPRESSIONS="$ROOT/scripts/sanitizers"
PREFIX="$("$ROOT/.venv/bin/python" -c 'import torch;print(torch.utils.cmake_prefix_path)')"

# test_cli starts dozens of instrumented mantissa-train processes: about 3 min under ASan
# (docs/RELIABILITY.md); its CTest timeout is raised in sanitizer trees (tests/CMakeLists.txt).
# test_cuda_kernels_on_cpu runs the CUDA kernels on the CPU (tests/cuda_sim): under ASan every
# read and write of theirs outside a tensor is reported with the kernel's line (3 min at -O1).
ASAN_TESTS=(test_config test_fuzz_config test_data test_numerics test_block_formats test_precision
            test_store test_events test_golden test_threads test_compare test_cli test_cuda_kernels_on_cpu)
TSAN_TESTS=(test_threads test_controller_threads)

log() { printf '[sanitize] %s\n' "$*" >&2; }

# build DIR SANITIZERS TARGET...: -O1 keeps the instrumented tests fast enough for CI, -g1
# gives reports file:line without the cost of full debug information.
build() {
    local dir="$1" sanitizers="$2"
    shift 2
    if [ ! -f "$dir/build.ninja" ]; then
        cmake -S "$ROOT" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O1 -g1" \
              -DMANTISSA_SANITIZE="$sanitizers" -DMANTISSA_CUDA_KERNELS=OFF -DCMAKE_PREFIX_PATH="$PREFIX" >&2
    fi
    cmake --build "$dir" -j "$JOBS" --target "$@" >&2
}

# run_tests DIR TEST...: each test's own CTest timeout applies.
run_tests() {
    local dir="$1"
    shift
    local regex
    regex="^($(IFS='|'; echo "$*"))\$"
    (cd "$dir" && QT_QPA_PLATFORM=offscreen ctest --output-on-failure --no-tests=error --parallel "$JOBS" -R "$regex")
}

if [ "$WHICH" = asan ] || [ "$WHICH" = all ]; then
    SECONDS=0
    build "$ROOT/build/asan" "address,undefined" "${ASAN_TESTS[@]}" mantissa-train
    log "asan: built in ${SECONDS}s"
    SECONDS=0
    # Child processes (mantissa-train started by the tests) inherit these.
    export ASAN_OPTIONS="halt_on_error=1:detect_stack_use_after_return=0:strict_init_order=1"
    export LSAN_OPTIONS="suppressions=$SUPPRESSIONS/lsan.supp:print_suppressions=0"
    export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$SUPPRESSIONS/ubsan.supp"
    run_tests "$ROOT/build/asan" "${ASAN_TESTS[@]}"
    log "asan: tests ran in ${SECONDS}s"
fi

if [ "$WHICH" = tsan ] || [ "$WHICH" = all ]; then
    SECONDS=0
    build "$ROOT/build/tsan" "thread" "${TSAN_TESTS[@]}"
    log "tsan: built in ${SECONDS}s"
    SECONDS=0
    export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$SUPPRESSIONS/tsan.supp"
    run_tests "$ROOT/build/tsan" "${TSAN_TESTS[@]}"
    log "tsan: tests ran in ${SECONDS}s"
fi
