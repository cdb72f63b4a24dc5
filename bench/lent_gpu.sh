#!/bin/bash
# Running the GPU benches (gpu_acceptance.py, sensitivity.py, the GPU tests) on a lent GPU machine
# that has torch, triton, cupy and cuda-bindings but no network and no benchfarm dependencies.
#
#   bash bench/lent_gpu.sh wheels                    # here: the service's pure-Python deps into .whl
#   bash bench/lent_gpu.sh start NAME 'CMD' LIMIT    # there: CMD detached, then as `wait`
#   bash bench/lent_gpu.sh launch NAME 'CMD'         # there: CMD detached, return at once
#   bash bench/lent_gpu.sh wait LIMIT NAME...        # there: collect each NAME's output into $OUT every
#                                                    # 10 s until all finished or LIMIT seconds passed
#
# A command runs under setsid in its own copy of the tree (/tmp/NAME-repo) with RUN_OUT=/tmp/NAME-out,
# so it outlives the device call that started it and a later call (carrying only this script) can wait
# on it; beside it, the GPUs' memory in use every 5 s (RUN_OUT/gpu-memory.csv). Versions of the
# wheels are the venv's, so they follow pyproject's resolution.
set -u
SITE=${LENT_GPU_SITE:-/tmp/site}   # where the wheels are installed, once per machine

# What benchfarm serve / run-job import beyond what the GPU host has (wheels for cp312 manylinux).
PACKAGES="pydantic pydantic_core annotated-types typing-inspection typing_extensions pydantic-settings
python-dotenv sqlalchemy alembic mako fastapi annotated-doc starlette uvicorn anyio h11 click pygithub
pyjwt pynacl cryptography cffi pycparser buildkite-sdk rich requests urllib3 opentelemetry-api itsdangerous"

wheels() {
    local pins=() name
    for name in $PACKAGES; do
        pins+=("$name==$(.venv/bin/python -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$name")")
    done
    local platforms=() p
    for p in manylinux_2_28 manylinux_2_27 manylinux_2_17 manylinux2014 manylinux1 manylinux_2_34; do
        platforms+=(--platform "${p}_x86_64")
    done
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        "${platforms[@]}" -d .whl "${pins[@]}"
}

launch() {
    local name=$1 cmd=$2
    if [ ! -d "$SITE/pydantic" ]; then
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl
    fi
    rm -rf "/tmp/$name-repo" "/tmp/$name-out"
    mkdir -p "/tmp/$name-repo" "/tmp/$name-out"
    tar --exclude=./.whl -cf - . | tar -xf - -C "/tmp/$name-repo"
    nvidia-smi > "/tmp/$name-out/nvidia-smi.txt" 2>&1
    (cd "/tmp/$name-repo" && PYTHONPATH="$SITE:/tmp/$name-repo" RUN_OUT="/tmp/$name-out" \
        setsid nohup bash -c "( $cmd ); echo \$? > /tmp/$name-out/rc" > "/tmp/$name-out/log" 2>&1 < /dev/null &)
    # device memory every 5 s while it runs: the headroom of the job's buffer copies (placement_total_bytes)
    if command -v nvidia-smi > /dev/null; then
        (setsid nohup bash -c "while [ -d /tmp/$name-out ] && [ ! -f /tmp/$name-out/rc ]; do nvidia-smi --query-gpu=timestamp,index,memory.used,memory.total \
            --format=csv,noheader >> /tmp/$name-out/gpu-memory.csv 2>&1; sleep 5; done" > /dev/null 2>&1 < /dev/null &)
    fi
}

# The device tool returns at most 8 files: a NAME's small files travel as one NAME.tar.gz, its array
# dumps (*.npz, megabytes each) one file each under $OUT/NAME/.
collect() {
    local name=$1 src="/tmp/$1-out"
    [ -d "$src" ] || return 0
    mkdir -p "$OUT/$name"
    (cd "$src" && find . -type f ! -name '*.npz' -print0 | tar --null -czf "/tmp/$name-small.tar.gz" -T - 2>/dev/null) \
        && cp "/tmp/$name-small.tar.gz" "$OUT/$name.tar.gz"
    find "$src" -type f -name '*.npz' -exec cp {} "$OUT/$name/" \; 2>/dev/null
}

wait_for() {
    local limit=$1 started name pending
    shift
    started=$(date +%s)
    while true; do
        pending=0
        for name in "$@"; do
            collect "$name"
            [ -f "/tmp/$name-out/rc" ] || pending=1
        done
        if [ $pending = 0 ] || [ $(( $(date +%s) - started )) -ge "$limit" ]; then
            for name in "$@"; do
                if [ -f "/tmp/$name-out/rc" ]; then echo "== $name finished rc=$(cat "/tmp/$name-out/rc")"
                else echo "== $name still running"; fi
                tail -12 "/tmp/$name-out/log" 2>/dev/null
            done
            return 0
        fi
        sleep 10
    done
}

case "${1:-}" in
    wheels) wheels ;;
    launch) launch "$2" "$3" ;;
    start) launch "$2" "$3" && wait_for "$4" "$2" ;;
    wait) shift; wait_for "$@" ;;
    *) echo "usage: $0 wheels | start NAME 'CMD' LIMIT | launch NAME 'CMD' | wait LIMIT NAME..." >&2; exit 2 ;;
esac
