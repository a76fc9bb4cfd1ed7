#!/usr/bin/env bash
# The GPU check: runs, on a machine with an NVIDIA GPU, the bundle that scripts/gpu-bundle.sh
# built elsewhere (.gpu-bundle/). It installs nothing and builds nothing, so it runs on a bare,
# offline machine:
#   - probes nvidia-smi, the libraries the bundle expects the machine to provide (cudart,
#     cuBLAS, NCCL: /usr/local/cuda, the Python wheels' folders) and ldd of every binary;
#   - runs every CUDA test binary (kernels against the CPU reference, the NCCL and staged Gloo
#     communicators, the model on the GPU against the CPU on SmolLM2's real weights), the
#     decode benchmark of a synthetic Llama-3-8B-shaped model made on the GPU (batch 1, 16,
#     64: tokens/s and the fraction of the HBM limit), `tpserve generate` on the GPU and on
#     the CPU (their greedy tokens side by side), and through GPU worker processes
#     (`generate --workers`, TP=1 and TP=2 sharing the GPU);
#   - under one deadline (TPSERVE_GPU_DEADLINE, default 480 s), which it does not overrun:
#     each binary's timeout is what is left of it (less END_RESERVE_S for the end); worker
#     processes start only when there is time for them, their port files are awaited within
#     it, and they are stopped with SIGTERM, then SIGKILL after a short grace;
#   - writes $OUT/gpu_results.json (OUT defaults to .cache/gpu) after every binary and on
#     exit, whatever happens: each binary's exit code or signal, whether it timed out, its
#     GoogleTest report (or that none came), and the log beside it ($OUT/gpu_run.log, which
#     keeps the last TPSERVE_GPU_LOG_KB, default 8192, of the output). Two files, within what
#     a device call brings back.
# Environment: OUT, TPSERVE_GPU_DEADLINE, TPSERVE_GPU_BUNDLE (default .gpu-bundle),
# TPSERVE_GPU_MODEL (default: the bundle's model), TPSERVE_GPU_LOG_KB.
# Exit status: 0 when everything ran and passed; 1 otherwise; 2 without a bundle.
# Without a GPU (CI, or a chroot proving the bundle) every test skips with its reason and the
# benchmark and the GPU generation are recorded as skipped.
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
bundle_dir="${TPSERVE_GPU_BUNDLE:-$root/.gpu-bundle}"
out="${OUT:-$root/.cache/gpu}"
deadline="${TPSERVE_GPU_DEADLINE:-480}"
mkdir -p "$out"
results="$out/gpu_results.json"
work="$(mktemp -d)"
started=$(date +%s)
elapsed() { echo $(($(date +%s) - started)); }
left() { echo $((deadline - $(elapsed))); }
END_RESERVE_S=15  # kept from every binary's timeout for the end: stopping workers, the JSON
STOP_GRACE_S=3    # from SIGTERM to SIGKILL for a worker process
# The output goes to stdout and to the log, which keeps the newest TPSERVE_GPU_LOG_KB of it
# (at least half, after a marker line): a binary that floods its output cannot make a file
# too big to come back.
log_cap=$((${TPSERVE_GPU_LOG_KB:-8192} * 1024))
exec > >(LC_ALL=C awk -v f="$out/gpu_run.log" -v cap="$log_cap" '
  BEGIN {
    printf "" > f; close(f); n = 0; keep = int(cap / 2)
    mark = "[run.sh: older output dropped; the log keeps the newest " keep " bytes]"
  }
  {
    print; fflush()
    print >> f; fflush(f)
    n += length($0) + 1
    if (n > cap) {  # the file: the marker line, then its last `keep` bytes
      close(f)
      system("{ echo \"" mark "\"; tail -c " keep " \"" f "\"; } > \"" f ".tmp\" && " \
             "mv \"" f ".tmp\" \"" f "\"")
      n = length(mark) + 1 + keep
    }
  }') 2>&1
logger=$!

# alive PID: the process exists and is not a zombie.
alive() {
  local stat
  { read -r stat <"/proc/$1/stat"; } 2>/dev/null || return 1
  stat="${stat##*) }"
  [[ -n "$stat" && "${stat:0:1}" != Z ]]
}
any_alive() {  # PID...: one of them runs
  local p
  for p in "$@"; do alive "$p" && return 0; done
  return 1
}
await_end() {  # TENTHS PID...: up to TENTHS tenths of a second for every PID to end
  local tenths="$1"
  shift
  while ((tenths-- > 0)) && any_alive "$@"; do sleep 0.1; done
  return 0
}
# stop_pids PID...: SIGTERM; up to STOP_GRACE_S (less when the deadline is nearer) for them to
# end; SIGKILL for those left, and up to 2 s more. Reaps those that ended; names any that did
# not (a process stuck in the driver) and leaves it: the script ends within its deadline.
stop_pids() {
  local grace=$STOP_GRACE_S p
  (($(left) - 5 < grace)) && grace=$(($(left) - 5))
  ((grace < 0)) && grace=0
  for p in "$@"; do kill -TERM "$p" 2>/dev/null; done
  await_end $((grace * 10)) "$@"
  for p in "$@"; do alive "$p" && kill -KILL "$p" 2>/dev/null; done
  await_end 20 "$@"
  for p in "$@"; do
    if alive "$p"; then
      echo "run.sh: process $p did not end after SIGKILL; left as it is"
    else
      wait "$p" 2>/dev/null
    fi
  done
  return 0
}

# JSON pieces. str: a string literal (control characters dropped, newlines kept as \n).
str() {
  local s
  s="$(printf '%s' "$1" | tr -d '\000-\010\013\014\016-\037')"
  s="${s//\\/\\\\}"
  s="${s//\"/\\\"}"
  s="${s//$'\n'/\\n}"
  s="${s//$'\t'/\\t}"
  printf '"%s"' "$s"
}
# A JSON file's text when it parses (python3 checks when it is there), else null.
json_or_null() {
  local f="$1"
  if [[ ! -s "$f" ]]; then echo null; return; fi
  if command -v python3 >/dev/null; then
    python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$f" 2>/dev/null || { echo null; return; }
  elif [[ "$(head -c1 "$f")" != "{" || "$(tr -d ' \n' <"$f" | tail -c1)" != "}" ]]; then
    echo null
    return
  fi
  cat "$f"
}

bundle_info=""
probe="{}"
records=()
decode_bench=null
generate=null
finished=false
status="incomplete"

write_results() {
  local joined
  joined="$(IFS=,; echo "${records[*]:-}")"
  {
    printf '{"script":"tests/gpu/run.sh","bundle":%s,"deadline_s":%s,"elapsed_s":%s,' \
      "$(str "$bundle_info")" "$deadline" "$(elapsed)"
    printf '"finished":%s,"status":%s,"probe":%s,"binaries":[%s],' \
      "$finished" "$(str "$status")" "$probe" "$joined"
    printf '"decode_bench":%s,"generate":%s}\n' "$decode_bench" "$generate"
  } >"$results.tmp" && mv "$results.tmp" "$results"
}
on_exit() {
  if declare -F stop_workers >/dev/null; then stop_workers; fi
  write_results
  echo "run.sh: $status after $(elapsed) s; results in $results"
  if command -v python3 >/dev/null; then python3 "$root/tests/gpu/summarize.py" "$results" || true; fi
  rm -rf "$work"
  # The log complete before the script ends: the logger ends once its input closes (2 s at most).
  exec >/dev/null 2>&1
  local tries
  for ((tries = 20; tries > 0; tries--)); do alive "$logger" || break; sleep 0.1; done
}
trap on_exit EXIT
trap 'status="stopped by a signal"; exit 143' TERM INT HUP

echo "== probe"
gpu_line="$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1)" ||
  gpu_line="nvidia-smi failed: $gpu_line"
command -v nvidia-smi >/dev/null || gpu_line="nvidia-smi is not on the PATH"
echo "$gpu_line"
have_gpu=false
nvidia-smi -L >/dev/null 2>&1 && have_gpu=true

# Folders holding the libraries the bundle does not carry: the toolkit's, the driver's, and
# the nvidia-* wheels' lib/ folders (NCCL ships only there).
lib_dirs=(/usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/nvidia/lib64)
if command -v python3 >/dev/null; then
  while read -r d; do lib_dirs+=("$d"); done < <(python3 - <<'EOF' 2>/dev/null
import glob, os, site, sys
roots = site.getsitepackages() + [site.getusersitepackages()] + sys.path
seen = set()
for r in roots:
    for d in glob.glob(os.path.join(r, "nvidia", "*", "lib")):
        if d not in seen:
            seen.add(d)
            print(d)
EOF
  )
fi
existing=()
for d in "${lib_dirs[@]}"; do [[ -d "$d" ]] && existing+=("$d"); done
LD_LIBRARY_PATH="$(IFS=:; echo "${existing[*]:-}")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LD_LIBRARY_PATH
provided=""
for lib in libcuda.so.1 libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
  found=""
  for d in "${existing[@]}"; do [[ -e "$d/$lib" ]] && { found="$d/$lib"; break; }; done
  [[ -z "$found" ]] && found="$(ldconfig -p 2>/dev/null | awk -v l="$lib" '$1 == l {print $NF; exit}')"
  echo "  $lib: ${found:-not found}"
  provided+="${provided:+,}$(str "$lib"):$(if [[ -n "$found" ]]; then str "$found"; else echo null; fi)"
done
os_name="$(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")"
echo "$(uname -srm), ${os_name:-unknown OS}, $(nproc) cores, $(ldd --version 2>&1 | head -1)"
probe="{\"nvidia_smi\":$(str "$gpu_line"),\"gpu\":$have_gpu,\"host\":$(str "$(uname -srm)"),"
probe+="\"os\":$(str "$os_name"),\"libc\":$(str "$(ldd --version 2>&1 | head -1)"),"
probe+="\"cores\":$(nproc),\"library_path\":$(str "$LD_LIBRARY_PATH"),\"provided\":{$provided}"

tarball="$bundle_dir/tpserve-gpu.tar.gz"
if [[ ! -f "$tarball" ]]; then
  probe+="}"
  status="no bundle"
  echo "run.sh: no bundle at $tarball. Make one where the CUDA toolkit is (the project's" \
    "build machine): scripts/gpu-bundle.sh, then carry .gpu-bundle to this machine."
  exit 2
fi
bin="$work/bundle"
mkdir -p "$bin"
if ! tar -C "$bin" -xzf "$tarball"; then
  probe+="}"
  status="bundle unreadable"
  exit 2
fi
bundle_info="$(head -1 "$bin/MANIFEST" | sed "s/^# //")"
echo "$bundle_info"
mapfile -t programs < <(grep -v '^#' "$bin/MANIFEST")
model="${TPSERVE_GPU_MODEL:-$(ls "$bundle_dir"/models/*.gguf 2>/dev/null | head -1)}"
export TPSERVE_GPU_MODEL="$model"  # the real-weights model of cuda_llama_model_test
ldd_missing=""
for p in "${programs[@]}"; do
  missing="$(ldd "$bin/$p" 2>&1 | awk '/not found/ {print $1}' | tr '\n' ' ')"
  if [[ -n "$missing" ]]; then
    echo "  ldd $p: missing $missing"
    ldd_missing+="${ldd_missing:+,}$(str "$p"):$(str "$missing")"
  fi
done
probe+=",\"model\":$(str "${model##*/}"),\"ldd_missing\":{$ldd_missing}}"
write_results

# run_bounded CAP_S CMD...: runs CMD with the smaller of CAP_S and what is left of the deadline
# (less END_RESERVE_S); sets rc, signal, timed_out, seconds, timeout_s. Returns 1, running
# nothing, when that leaves under 5 s.
run_bounded() {
  local cap="$1"
  shift
  timeout_s=$(($(left) - END_RESERVE_S))
  ((timeout_s > cap)) && timeout_s=$cap
  rc="" signal="" timed_out=false seconds=0
  if ((timeout_s < 5)); then return 1; fi
  local t0
  t0=$(date +%s)
  timeout -k 5 "$timeout_s" "$@"
  rc=$?
  seconds=$(($(date +%s) - t0))
  if ((rc == 124 || rc == 137)) && ((seconds >= timeout_s)); then
    timed_out=true
  elif ((rc > 128)); then
    signal="SIG$(kill -l $((rc - 128)) 2>/dev/null || echo $((rc - 128)))"
  fi
  return 0
}
record() {  # name kind outcome extra-json-fields
  records+=("{\"name\":$(str "$1"),\"kind\":\"$2\",\"outcome\":$(str "$3"),\"rc\":${rc:-null},\"signal\":$(if [[ -n "$signal" ]]; then str "$signal"; else echo null; fi),\"timed_out\":$timed_out,\"seconds\":$seconds,\"timeout_s\":$timeout_s$4}")
  echo "-- $1: $3 (rc ${rc:-none}${signal:+, $signal}, $seconds s)"
  write_results
}
not_run() {  # name kind [outcome]: a failure with no process to show for it
  rc="" signal="" timed_out=false seconds=0 timeout_s=0
  record "$1" "$2" "${3:-not run: deadline}" ""
  failed=1
}
failed=0
top_count() { sed -n "s/^  \"$1\": \([0-9]*\),*$/\1/p" "$2" | head -1; }

echo "== CUDA tests ($(elapsed) s)"
for p in "${programs[@]}"; do
  [[ "$p" == *_test ]] || continue
  report="$work/$p.json"
  cap=120
  [[ "$p" == cuda_llama_model_test ]] && cap=240
  echo "-- $p"
  if ! run_bounded "$cap" "$bin/$p" --gtest_output="json:$report"; then
    not_run "$p" gtest
    continue
  fi
  tests="$(top_count tests "$report")"
  failures="$(top_count failures "$report")"
  skipped="$(grep -c '"result": "SKIPPED"' "$report" 2>/dev/null)"
  if $timed_out; then
    outcome="timed out"
  elif [[ -n "$signal" ]]; then
    outcome="crashed ($signal)"
  elif [[ ! -s "$report" ]]; then
    outcome="no report (rc $rc)"
  elif ((rc != 0)) || [[ "${failures:-1}" != 0 ]]; then
    outcome="failed"
  elif [[ "${skipped:-0}" == "${tests:-x}" ]]; then
    outcome="skipped"
  else
    outcome="passed"
  fi
  [[ "$outcome" == passed || "$outcome" == skipped ]] || failed=1
  record "$p" gtest "$outcome" ",\"tests\":${tests:-null},\"failures\":${failures:-null},\"skipped\":${skipped:-0},\"report\":$(json_or_null "$report")"
done

echo "== decode benchmark ($(elapsed) s)"
if run_bounded 150 "$bin/cuda_decode_throughput" --batches=1,16,64 --context=512 --steps=32 \
  --json_out="$work/bench.json"; then
  decode_bench="$(json_or_null "$work/bench.json")"
  if ((rc == 0)) && [[ "$decode_bench" != null ]]; then
    outcome=passed
  elif ((rc == 2)) && ! $have_gpu; then
    outcome="skipped (no GPU)"
  else
    outcome="failed"
    failed=1
  fi
  record cuda_decode_throughput bench "$outcome" ""
else
  not_run cuda_decode_throughput bench
fi

echo "== tpserve generate, GPU and CPU ($(elapsed) s)"
# generate_tokens LABEL ON_GPU CAP_S ARGS...: 24 greedy tokens of the chat prompt from `tpserve
# generate ARGS`, recorded as LABEL; sets ids (empty when none came). Without a GPU, a GPU run
# that fails as it should (exit 1) is recorded as skipped.
generate_tokens() {
  local label="$1" on_gpu="$2" cap="$3" f="$work/generate$((${#records[@]})).jsonl" outcome
  shift 3
  ids=""
  if ! run_bounded "$cap" "$bin/tpserve" generate --model="$model" --chat --max_tokens=24 --json \
    --prompt="What is the capital of France?" "$@" >"$f"; then
    not_run "$label" generate
    return
  fi
  ids="$(sed -n 's/.*"token_ids":\[\([0-9,]*\)\].*/\1/p' "$f")"
  if [[ -n "$ids" ]]; then
    outcome=passed
  elif $on_gpu && ! $have_gpu && [[ "$rc" == 1 ]]; then
    outcome="skipped (no GPU)"
  else
    outcome=failed
    failed=1
  fi
  record "$label" generate "$outcome" ""
}
if [[ -z "$model" ]]; then
  echo "run.sh: no model in $bundle_dir/models: the generation is not run"
  failed=1
else
  generate_tokens "tpserve generate (CPU)" false 60 --device=-1 --threads="$(nproc)"
  cpu_ids="$ids"
  generate_tokens "tpserve generate (GPU)" true 60 --device=0
  gpu_ids="$ids"
  same=null
  if [[ -n "$cpu_ids" && -n "$gpu_ids" ]]; then
    same=false
    [[ "$cpu_ids" == "$gpu_ids" ]] && same=true
  fi
  generate="{\"model\":$(str "${model##*/}"),\"cpu_token_ids\":[$cpu_ids],\"gpu_token_ids\":[$gpu_ids],\"same_tokens\":$same"

  # The served path: `tpserve worker --device 0` processes (Init, Ready and Steps over the
  # Session and the shared-memory step link) driven by `generate --workers`; TP=2 puts both
  # ranks on the one GPU (shared-memory collectives staged through host memory).
  workers=()
  stop_workers() {
    ((${#workers[@]})) && stop_pids "${workers[@]}"
    workers=()
  }
  # served TP: starts TP GPU workers, generates through them; sets ids (or empty). Starts none
  # unless the deadline leaves time to start them (their port files awaited up to 10 s), to
  # generate (5 s at least) and to stop them.
  served() {
    local tp="$1" addresses="" r port_until
    local label="tpserve generate --workers (GPU workers, TP=$tp)"
    ids=""
    if (($(left) < END_RESERVE_S + 10)); then
      not_run "$label" generate
      return
    fi
    for ((r = 0; r < tp; r++)); do
      rm -f "$work/port$r"
      "$bin/tpserve" worker --listen=127.0.0.1:0 --port_file="$work/port$r" --device=0 \
        --model="$model" 2>"$work/worker$tp-$r.log" &
      workers+=($!)
    done
    port_until=$(($(date +%s) + 10))
    ((port_until > started + deadline - END_RESERVE_S - 5)) &&
      port_until=$((started + deadline - END_RESERVE_S - 5))
    for ((r = 0; r < tp; r++)); do
      while [[ ! -s "$work/port$r" ]] && alive "${workers[r]}" && (($(date +%s) < port_until)); do
        sleep 0.1
      done
      if [[ ! -s "$work/port$r" ]]; then
        not_run "$label" generate "failed: rank $r wrote no port file"
        stop_workers
        tail -5 "$work/worker$tp-$r.log"
        return
      fi
      addresses+="${addresses:+,}127.0.0.1:$(cat "$work/port$r")"
    done
    generate_tokens "$label" true 90 --workers="$addresses" --comm=shm
    stop_workers
    [[ -n "$ids" ]] || ! $have_gpu || tail -5 "$work"/worker"$tp"-*.log
  }
  served 1
  served1_ids="$ids"
  served 2
  served2_ids="$ids"
  generate+=",\"served_tp1_token_ids\":[$served1_ids],\"served_tp2_token_ids\":[$served2_ids]}"
fi

finished=true
if ((failed)); then status="failed"; else status="passed"; fi
exit "$failed"
