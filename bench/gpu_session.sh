#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# The one device call of a session lent a GPU (../shared/gpu/README.md), in the order of what
# each part is worth, all inside one deadline so that the logs come back even when time runs out:
#   1. the build of mantissa-train and cuda_checks (full log kept);
#   2. the benchmark's first part (bench/gpu.py --part first): BF16/FP16 against autocast on
#      GPT-2 small, torch.compile and FP32 parity, the telemetry cost, FP8 delayed against BF16
#      on the wide shape;
#   3. where the time goes (bench/gpu.py --part profile: bench/gpu_profile's kernel tables for a
#      telemetry step, FP8 on GPT-2 small and fp8-block on the wide shape; GPU_PROFILE_S, default 100);
#   4. the correctness checks (bench/cuda_checks: the device against the CPU);
#   5. the benchmark's other rows (--part rest) in whatever time is left.
#
#   here, once:  ../shared/gpu/prepare.sh
#   the device:  run(command="bash bench/gpu_session.sh", carry=[".gpu"], timeout_s=600, kind="nvidia-h200")
# (kind: sessions 26-27 measured on an H200; a run without a kind may start an H100, whose figures
# do not compare with theirs. build.txt names the card either way.)
#
# Logs under $OUT: timeline.txt, build.txt (+ build_log.txt: configure and build), gpu_bench.txt
# and gpu_bench_{first,rest}.json, gpu_profile.txt, cuda_checks.txt. GPU_PARTS (default "first
# profile rest") names the parts to run. GPU_SESSION_S is the deadline (s, default
# 570, inside the call's 600), GPU_CHECKS_S the checks' share (default 140), GPU_BENCH_ARGS
# replaces bench/gpu.py's shape/step arguments, GPU_SKIP_CHECKS=1 skips the checks,
# GPU_SKIP_BUILD=1 uses build/gpu as it is when mantissa-train is there, GPU_SKIP_DONE=<json>
# takes the rows an earlier call measured from its --json instead of running them again.
# A rerun: the machine stays warm only ~30 s after a call, and no machine starts with under 4
# minutes of the session's 15 left, so a rerun is issued at once, with both limits under what
# `status` says is left (budget_left_s - 30), e.g.
#   run(command="GPU_SESSION_S=150 GPU_SKIP_BUILD=1 GPU_SKIP_CHECKS=1 GPU_PARTS=rest \
#       GPU_SKIP_DONE=.gpu/gpu_bench_rest.json bash bench/gpu_session.sh", carry=[".gpu"], timeout_s=180)
# The warm machine keeps build/gpu (GPU_SKIP_BUILD=1: no rebuild for copied sources' new times).
# A rerun's $OUT starts empty: for rest's ratios to autocast, copy the first call's
# gpu_bench_first.json (and, to go on where rest stopped, gpu_bench_rest.json) into .gpu/ here
# and pass GPU_REF_JSON=.gpu/gpu_bench_first.json.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out="${OUT:-/tmp/gpu-session}"
mkdir -p "$out"
start=$SECONDS
deadline=$((start + ${GPU_SESSION_S:-570}))
# Never 0: `timeout 0` would mean no limit at all.
left() { local l=$((deadline - SECONDS)); echo $((l > 1 ? l : 1)); }
mark() { echo "# $1 at $((SECONDS - start)) s" | tee -a "$out/timeline.txt"; }

# 1. The build: .gpu/build.sh's configuration, with nvcc named (the wrapper in /usr/local/bin
# hides CUDA from LibTorch's config), and only the two programs the session runs.
torch_prefix="$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')"
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name())' \
    | tee "$out/build.txt"
# The host's memory (Mantissa refuses a project that does not fit it) and the GPU's mode.
{ grep -E 'MemTotal|MemAvailable' /proc/meminfo; nproc; nvidia-smi --query-gpu=name,memory.total,compute_mode \
    --format=csv,noheader 2>&1; } | tee -a "$out/build.txt"
if [ "${GPU_SKIP_BUILD:-0}" = 1 ] && [ -x build/gpu/app/mantissa-train ]; then
    mark "build skipped (GPU_SKIP_BUILD=1)"
elif ! timeout -k 10 "$(left)" cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMANTISSA_WITH_QT=OFF \
        -DCMAKE_PREFIX_PATH="$torch_prefix;$PWD/.gpu/deps/usr" -DCMAKE_POLICY_VERSION_MINIMUM=3.5 \
        -DTORCH_CUDA_ARCH_LIST=9.0 -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc \
        -DCUDA_TOOLKIT_ROOT_DIR=/usr/local/cuda > "$out/build_log.txt" 2>&1; then
    tail -40 "$out/build_log.txt" | tee -a "$out/build.txt"
    echo "the configuration failed: see build_log.txt" | tee -a "$out/build.txt"
    exit 1
else
    # Both programs in one ninja call (the checks' source has no precompiled header and builds
    # beside the rest); -k 0 goes on past a failure, so that mantissa-train, which the
    # benchmark needs, is built even when cuda_checks is not. Old binaries go first: a failed
    # build must not pass for one that worked.
    rm -f build/gpu/app/mantissa-train build/gpu/bench/cuda_checks build/gpu/bench/gpu_profile
    timeout -k 10 "$(left)" cmake --build build/gpu -j "$(nproc)" --target mantissa-train cuda_checks gpu_profile -- -k 0 \
        >> "$out/build_log.txt" 2>&1
    if [ ! -x build/gpu/app/mantissa-train ]; then
        grep -B2 -A30 -m3 "FAILED\|error" "$out/build_log.txt" | head -120 | tee -a "$out/build.txt"
        if [ ! -x build/gpu/bench/cuda_checks ]; then
            echo "the build failed: see build_log.txt" | tee -a "$out/build.txt"
            exit 1
        fi
        # The checks built: they get the whole time, the benchmark (which needs mantissa-train)
        # is skipped.
        echo "mantissa-train did not build (see build_log.txt): only the checks run" | tee -a "$out/build.txt"
        GPU_PARTS=checks-only
    else
        mark "mantissa-train built"
    fi
    if [ ! -x build/gpu/bench/cuda_checks ]; then
        grep -B2 -A30 -m3 "FAILED\|error" "$out/build_log.txt" | tail -60 | tee -a "$out/build.txt"
        echo "cuda_checks did not build (see build_log.txt): the checks are skipped" | tee -a "$out/build.txt"
    fi
fi
mark "built"

bench() { # $1: the part, $2: its seconds (timeout 0 would mean no limit at all)
    if [ "$2" -lt 10 ]; then mark "no time left for bench part $1"; return; fi
    # shellcheck disable=SC2086 # the arguments are meant to split
    timeout -k 10 "$2" python3 bench/gpu.py --build build/gpu --part "$1" --json "$out/gpu_bench_$1.json" \
        --ref-json "${GPU_REF_JSON:-$out/gpu_bench_first.json}" ${GPU_SKIP_DONE:+--skip-done "$GPU_SKIP_DONE"} \
        ${GPU_BENCH_ARGS:---shapes small,wide --telemetry --steps 20} 2>&1 | tee -a "$out/gpu_bench.txt"
    mark "bench part $1 done"
}
checks_s=${GPU_CHECKS_S:-140}
[ "${GPU_SKIP_CHECKS:-0}" = 1 ] && checks_s=0
parts="${GPU_PARTS:-first profile rest}"
# 2. The benchmark's first part, leaving the checks their share.
if [[ " $parts " == *" first "* ]]; then bench first "$(($(left) - checks_s))"; fi
# 3. The profiles, inside their share.
if [[ " $parts " == *" profile "* ]] && [ -x build/gpu/bench/gpu_profile ] && [ "$(left)" -gt 30 ]; then
    profile_s=${GPU_PROFILE_S:-100}
    [ "$profile_s" -gt "$(($(left) - checks_s))" ] && profile_s=$(($(left) - checks_s))
    if [ "$profile_s" -ge 20 ]; then
        timeout -k 10 "$profile_s" python3 bench/gpu.py --build build/gpu --part profile --run-timeout 60 2>&1 \
            | tee "$out/gpu_profile.txt"
        mark "profiles done"
    fi
fi
# 4. The checks.
if [ "$checks_s" -gt 0 ] && [ "$(left)" -ge 10 ] && [ -x build/gpu/bench/cuda_checks ]; then
    limit=$(left)
    [ "$limit" -gt "$checks_s" ] && [[ " $parts " == *" rest "* ]] && limit=$checks_s
    timeout -k 10 "$limit" build/gpu/bench/cuda_checks 2>&1 | tee "$out/cuda_checks.txt"
    mark "checks done"
fi
# 5. The rest of the benchmark in what is left.
if [[ " $parts " == *" rest "* ]] && [ "$(left)" -gt 20 ]; then bench rest "$(left)"; fi
mark "done"
