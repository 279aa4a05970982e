# Sourced by the GPU scripts: CUDA libraries and headers on the GPU host, the carried binary.
export PATH="/usr/local/cuda/bin:$PATH"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:/usr/local/nvidia/lib64:/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
export TALLY_CUDA_INCLUDE="${TALLY_CUDA_INCLUDE:-/usr/local/cuda/include}"
export TALLY_CACHE="${TALLY_CACHE:-/tmp/tally-cache}"
export OUT="${OUT:-/tmp/out}"
mkdir -p "$OUT"
TALLY="${TALLY:-$PWD/.carry/bin/tally}"
[ -x "$TALLY" ] || TALLY="$PWD/target/release/tally"
export TALLY
# The same without the llama.cpp peer (starts without llama.cpp's libraries; scripts/gpu/pack.sh --llama).
TALLY_NOPEER="$PWD/.carry/bin/tally-nopeer"
[ -x "$TALLY_NOPEER" ] || TALLY_NOPEER="$TALLY"
export TALLY_NOPEER
# work_dir DIR: the script's files go to DIR (OUT from here on); REAL_OUT is the folder that
# comes back (the device's $OUT), where the script puts its tarball of DIR at the end.
work_dir() {
    REAL_OUT=$OUT
    export OUT=$1
    mkdir -p "$OUT"
}
# synth_checks "PRESET QUANT SEED TOKENS" ...: synthesise each file and run `tally check --backend
# cuda` (node by node against the CPU) on it; logs $OUT/check_PRESET_QUANT.log, one rc line each
# (seconds since $T0 when set).
synth_checks() {
    local spec f rc
    for spec in "$@"; do
        set -- $spec
        f="/tmp/$1-$2.gguf"
        "$TALLY_NOPEER" synth --preset "$1" --quant "$2" --seed "$3" --out "$f" > /dev/null 2>&1 || { echo "synth $1 $2 failed"; continue; }
        timeout 200 "$TALLY_NOPEER" check --model "$f" --backend cuda --tokens "$4" -n 3 > "$OUT/check_$1_$2.log" 2>&1; rc=$?
        echo "check $1 $2 rc=$rc ($(( $(date +%s) - ${T0:-$(date +%s)} )) s)"
        rm -f "$f"
    done
}
# logits_same DIR NAME V1 V2 [V3]: "same (7 steps)" when the logits digests (`tally run -o json`)
# in DIR/run-NAME-V.json agree for every V, else which steps differ, or the error.
logits_same() {
    python3 - "$@" <<'PY'
import json, sys
o, n, *vs = sys.argv[1:]
try:
    d = {v: json.load(open(f"{o}/run-{n}-{v}.json"))["logits_digests"] for v in vs}
    a = d[vs[0]]
    if all(x == a for x in d.values()) and len(a) == 7:
        print("same (7 steps)")
    else:
        print("DIFFER " + " ".join(f"{v}:{[i for i, (x, y) in enumerate(zip(a, d[v])) if x != y]}" for v in vs[1:]))
except Exception as e:
    print("ERROR", e)
PY
}
# bench_row FILE: "pp512=... tg128=..." from a `tally bench -o json` file.
bench_row() {
    python3 - "$1" 2>&1 <<'PY' | tail -1
import json, sys
print(" ".join(f"{x['test']}={x['avg_ts']:.1f}" for x in json.load(open(sys.argv[1]))))
PY
}
# mid_l4_files: MID (mid q4_k_m, seed 4) and L4 (the 35B-A3B shapes with 4 layers, pool fill),
# the two files of the GPU scripts' checks and digests, written with $TALLY_NOPEER.
mid_l4_files() {
    MID=/tmp/mid-q4_k_m.gguf
    L4=/tmp/l4.gguf
    "$TALLY_NOPEER" synth --preset mid --quant q4_k_m --seed 4 --out $MID > /dev/null 2>&1
    "$TALLY_NOPEER" synth --preset 35b-a3b --quant q4_k_m --seed 1 --set n_layers=4 --fill pool --out $L4 > /dev/null 2>&1
}
# run_json TAG FILE [BIN]: a prefill of RUN_TOKENS tokens (37 unless set) and 6 decode steps of
# FILE on CUDA with BIN (default $TALLY_NOPEER; prefix the call with variables to set options),
# `-o json` into $OUT/run-NAME-TAG.json (NAME: FILE's base name), what logits_same reads.
run_json() {
    local n
    n=$(basename "$2" .gguf)
    timeout 120 "${3:-$TALLY_NOPEER}" run --model "$2" --backend cuda --tokens "${RUN_TOKENS:-37}" -n 6 -o json \
        > "$OUT/run-$n-$1.json" 2> "$OUT/run-$n-$1.err"
}
# row NAME VALUE: one line of a script's summary (printed at the end with `printf '%s\n'
# "${summary[@]}"`), also appended to $OUT/summary.txt as it goes (it comes back if the call is cut).
summary=()
row() {
    summary+=("$(printf '%-44s %s' "$1" "$2")")
    printf '%-44s %s\n' "$1" "$2" >> "$OUT/summary.txt"
}
# gpu_job NAME: the usual start of a GPU script: the carried kernel cache (.carry/kcache) in use,
# the script's files in /tmp/NAME (OUT; REAL_OUT is what comes back), the clock started; then
# `el` (seconds since) and `pack` (the summary and a tarball of /tmp/NAME into REAL_OUT: a call
# returns only a few files; call it after each stage, so a cut call still brings something).
gpu_job() {
    [ -d .carry/kcache ] && cp -r .carry/kcache /tmp/tally-cache && export TALLY_CACHE=/tmp/tally-cache
    work_dir "/tmp/$1"
    JOB=$1
    t0=$(date +%s)
}
el() { echo "$(( $(date +%s) - ${t0:-$(date +%s)} )) s"; }
pack() {
    cp "$OUT/summary.txt" "$REAL_OUT/summary.txt" 2> /dev/null
    tar -C /tmp -czf "$REAL_OUT/$JOB.tgz" "$JOB"
}
# ncu_prefill FILE TOKENS [BIN]: ncu's device time per kernel of one prefill of TOKENS tokens of
# FILE (kernels serialised, clocks left alone) into $OUT/kernels-ppTOKENS.txt, with a summary row.
ncu_prefill() {
    command -v ncu > /dev/null || PATH="$PATH:$(ls -d /opt/nvidia/nsight-compute/*/ 2>/dev/null | tail -1)"
    timeout 200 ncu --clock-control none --metrics gpu__time_duration.sum --csv --log-file "$OUT/ncu-pp$2.csv" \
        "${3:-$TALLY_NOPEER}" run --model "$1" --backend cuda --tokens "$2" -n 0 > "$OUT/ncu-pp$2.out" 2>&1
    python3 tools/gpu/ncu_kernels.py "$OUT/ncu-pp$2.csv" > "$OUT/kernels-pp$2.txt" 2>&1
    row "ncu pp$2" "$(head -1 "$OUT/kernels-pp$2.txt") ($(el))"
    gzip -f "$OUT/ncu-pp$2.csv"
}
# ncu_step TAG FILE [BIN]: ncu's device time per kernel of a short generation of FILE on CUDA
# (a 9-word prompt's prefill + 3 decode steps; clocks and caches left alone, kernels serialised)
# with BIN (default $TALLY_NOPEER; prefix the call with variables to set options) into
# $OUT/step-TAG.txt (tools/gpu/ncu_step.py: the last full decode step per kernel), with a row.
ncu_step() {
    command -v ncu > /dev/null || PATH="$PATH:$(ls -d /opt/nvidia/nsight-compute/*/ 2>/dev/null | tail -1)"
    timeout 60 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
        --log-file "$OUT/ncu-$1.csv" "${3:-$TALLY_NOPEER}" generate --model "$2" --tokenizer crates/text/tests/data/tiny.gguf \
        --backend cuda --prompt "The quick brown fox jumps over the lazy dog" -n 4 --temp 0 --ignore-eos > "$OUT/ncu-$1.out" 2>&1
    python3 tools/gpu/ncu_step.py "$OUT/ncu-$1.csv" > "$OUT/step-$1.txt" 2>&1
    gzip -f "$OUT/ncu-$1.csv"
    row "ncu step $1" "$(grep 'last full' "$OUT/step-$1.txt") ($(el))"
}
# ab_start JOB TAR: the start of an A/B script: .carry/TAR.tar.xz unpacked into .carry (bin/tally
# the change, bin/tally-base the base, kcache; llama-lib, llama.cpp's libraries for a tally built
# with the dynamic-link peer, put on LD_LIBRARY_PATH when it came), TALLY and TALLY_NOPEER the
# change, gpu_job JOB, B and N the two binaries, the GPU's row, D the folder for the 35B files
# (/dev/shm when it has 45 GB free: the device's disk wrote 0.28-0.9 GB/s; else /tmp).
ab_start() {
    [ -f ".carry/$2.tar.xz" ] && tar xJf ".carry/$2.tar.xz" -C .carry
    [ -d .carry/llama-lib ] && export LD_LIBRARY_PATH="$PWD/.carry/llama-lib:$LD_LIBRARY_PATH"
    B=$PWD/.carry/bin/tally-base
    N=$PWD/.carry/bin/tally
    export TALLY=$N TALLY_NOPEER=$N
    gpu_job "$1"
    gpu_and_dir
}
# gpu_and_dir: after gpu_job, the GPU's row ($OUT/gpu.txt) and D, the folder for the 35B files
# (/dev/shm when it has 45 GB free: the device's disk wrote 0.28-0.9 GB/s; else /tmp).
gpu_and_dir() {
    nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1
    row gpu "$(cat "$OUT/gpu.txt")"
    D=/tmp
    [ "$(df -B1G --output=avail /dev/shm 2> /dev/null | tail -1)" -ge 45 ] 2> /dev/null && D=/dev/shm
}
# synth_35b MIX: after ab_start, the 35B-A3B synth file of MIX (seed 1, pool fill; with its MTP
# block at $D/MIX-mtp.gguf when SYNTH_MTP is set) at $D/MIX.gguf,
# written unless a call before this one on the same machine left it there; F is its path.
synth_35b() {
    F=$D/$1${SYNTH_MTP:+-mtp}.gguf
    # A call before this one may have left it in /dev/shm (which then has less than 45 GB free).
    [ -f "/dev/shm/${F##*/}" ] && F=/dev/shm/${F##*/}
    [ -f "$F" ] || "$N" synth --preset 35b-a3b --quant "$1" --seed 1 --fill pool ${SYNTH_MTP:+--mtp} --out "$F" > "$OUT/synth-$1.log" 2>&1
    row "synth $1" "$(el)"
}
# ab TAG FILE BENCH-ARGS...: `tally bench` of FILE, base ($B) / new ($N) (/ arm3: $N with ARM3's
# settings, e.g. ARM3="TALLY_X32=off") alternated twice, into $OUT/TAG-<v>-<round>.json, a row
# each; runs other than TAG pp start only while the call is under AB_UNTIL seconds (480).
ab() {
    local tag=$1 file=$2 round v bin
    shift 2
    for round in 1 2; do
        for v in base new ${ARM3:+arm3}; do
            [ "$tag" = pp ] || [ "$(( $(date +%s) - t0 ))" -lt "${AB_UNTIL:-480}" ] || continue
            bin=$N; [ $v = base ] && bin=$B
            local e=(); [ $v = arm3 ] && read -r -a e <<< "$ARM3"
            env "${e[@]}" timeout 120 "$bin" bench -m "$file" --backend cuda "$@" -r 3 -o json > "$OUT/$tag-$v-$round.json" 2> "$OUT/$tag-$v-$round.err"
            row "$tag $v $round" "rc=$? $(bench_row "$OUT/$tag-$v-$round.json") ($(el))"
            pack
        done
    done
}
# smi_start: nvidia-smi samples the SM clock, memory clock, power, temperature and throttle
# reasons every 100 ms into $OUT/smi.csv until smi_stop; `stage NAME` marks where a script's
# stage begins ($OUT/stages.txt); smi_stop ends the sampling and writes each stage's medians
# to $OUT/clocks.txt (tools/gpu/smi_stages.py).
smi_start() {
    local r=clocks_event_reasons.active
    nvidia-smi --query-gpu=$r --format=csv > /dev/null 2>&1 || r=clocks_throttle_reasons.active
    nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,$r \
        --format=csv,noheader,nounits -lms 100 > "$OUT/smi.csv" 2>&1 &
    SMI=$!
}
stage() { echo "$1 $(date +%s.%N)" >> "$OUT/stages.txt"; }
smi_stop() {
    stage end
    kill "$SMI" 2> /dev/null
    python3 tools/gpu/smi_stages.py "$OUT" > "$OUT/clocks.txt" 2>&1
}
# sbs_35b: after ab_start, the side by side with llama.cpp ($N, built with the dynamic-link
# peer) on the 35B-A3B Q4_K_M synth file under nvidia-smi sampling: pp512/8192/32768 and tg128
# into $OUT/sbs.md, then (while the call is under LIMIT) tg64 at depth 8,192 and 32,768 into
# $OUT/depth.md; clocks per stage in $OUT/clocks.txt.
sbs_35b() {
    smi_start
    stage synth
    synth_35b q4_k_m
    stage sbs
    timeout 260 "$N" bench -m "$F" --backend cuda --peer llama.cpp -p 512,8192,32768 -n 128 -r 3 \
        -o md --out-dir "$OUT/sbs" > "$OUT/sbs.md" 2> "$OUT/sbs.err"
    row "bench sbs" "rc=$? ($(el))"
    pack
    stage depth
    local left=$(( LIMIT - $(date +%s) + t0 - 10 ))
    if [ "$left" -gt 60 ]; then
        timeout "$left" "$N" bench -m "$F" --backend cuda --peer llama.cpp -p 512 -n 64 -d 8192,32768 -r 3 \
            -o md --out-dir "$OUT/depth" > "$OUT/depth.md" 2> "$OUT/depth.err"
        row "bench depth" "rc=$? ($(el))"
    fi
    smi_stop
    pack
}
# ncu_sections REGEX SKIP COUNT: while the call is under LIMIT, ncu's sections (speed of light,
# occupancy, launch, warp states, memory) of the kernels matching REGEX in a short generation of
# the 4-layer file (COUNT launches after SKIP) into $OUT/ncu-sections.txt.
ncu_sections() {
    local left=$(( LIMIT - $(date +%s) + t0 - 10 ))
    [ "$left" -gt 60 ] || return 0
    stage ncu
    mid_l4_files
    command -v ncu > /dev/null || PATH="$PATH:$(ls -d /opt/nvidia/nsight-compute/*/ 2>/dev/null | tail -1)"
    timeout "$left" ncu --clock-control none --cache-control none -k regex:"$1" \
        --launch-skip "$2" --launch-count "$3" --section SpeedOfLight --section Occupancy --section LaunchStats \
        --section WarpStateStats --section MemoryWorkloadAnalysis "$N" generate --model "$L4" \
        --tokenizer crates/text/tests/data/tiny.gguf --backend cuda --prompt "The quick brown fox" -n 3 \
        --temp 0 --ignore-eos > "$OUT/ncu-sections.txt" 2>&1
    row "ncu sections" "rc=$? ($(el))"
    pack
}
