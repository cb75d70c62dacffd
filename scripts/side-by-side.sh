#!/usr/bin/env bash
# Side-by-side client accuracy and overhead (docs/performance.md): alternating runs of each
# client on each shape, every one scored by `llmspeed selftest --external` against the
# fixed-gap server's trace, server pinned to CPU 0 and client to CPU 1.
#
# usage: scripts/side-by-side.sh OUT.jsonl ROUNDS LLMSPEED [NAME=COMMAND_PREFIX ...]
#   LLMSPEED        the llmspeed binary that runs the self-test (and the in-process row)
#   NAME=PREFIX     a client: PREFIX is completed with vLLM's bench-serve flags, e.g.
#                   after="target/release/llmspeed bench serve"
#                   vllm-bench="/path/vllm-bench --tokenizer gpt2"
# SHAPES='--streams 8 --gap 2ms --tokens 50;...' replaces the two shapes.
# Each run appends one JSON object (selftest --json plus _client, _shape, _load, _round) to
# OUT.jsonl; scripts/side_by_side_table.py OUT.jsonl prints the table. Run it on a quiet
# machine: nothing else running, and the load average is recorded with every run.
set -u
if [ $# -lt 3 ]; then
  sed -n '2,14p' "$0" >&2
  exit 2
fi
OUT=$1; ROUNDS=$2; ST=$3; shift 3
FLAGS='--base-url {url} --model {model} --dataset-name custom --dataset-path {dataset} --num-prompts {streams} --custom-output-len {tokens} --ignore-eos --request-id-prefix {prefix} --save-result --save-detailed --result-dir {result_dir} --disable-tqdm'
NAMES=(); CMDS=()
for arg in "$@"; do
  NAMES+=("${arg%%=*}"); CMDS+=("${arg#*=} $FLAGS")
done
NAMES+=(in-process); CMDS+=("")
# SHAPES: shapes separated by ';' (default: the two of docs/performance.md).
IFS=';' read -r -a SHAPES <<< "${SHAPES:---streams 128 --gap 1ms --tokens 1000;--streams 1000 --gap 10ms --tokens 200}"
failed=0
for r in $(seq 1 "$ROUNDS"); do
  for shape in "${SHAPES[@]}"; do
    for i in "${!NAMES[@]}"; do
      load=$(cut -d' ' -f1 /proc/loadavg)
      if [ -z "${CMDS[$i]}" ]; then
        j=$("$ST" selftest --pin 0:1 $shape --json 2>/tmp/side-by-side.err)
      else
        j=$("$ST" selftest --pin 0:1 $shape --json --external "${CMDS[$i]}" 2>/tmp/side-by-side.err)
      fi
      if [ $? -ne 0 ] || [ -z "$j" ]; then
        echo "FAILED ${NAMES[$i]} [$shape]: $(tail -3 /tmp/side-by-side.err)" >&2
        failed=1
        continue
      fi
      python3 -c 'import json,sys; d=json.loads(sys.argv[1]); d.update(_client=sys.argv[2], _shape=sys.argv[3], _load=float(sys.argv[4]), _round=int(sys.argv[5])); print(json.dumps(d))' \
        "$j" "${NAMES[$i]}" "$shape" "$load" "$r" >> "$OUT"
      echo "round $r ${NAMES[$i]} [$shape] load $load" >&2
    done
  done
done
exit $failed
