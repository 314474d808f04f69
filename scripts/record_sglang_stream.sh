#!/usr/bin/env bash
# Record what a real SGLang server sends, for tests/fixtures/sglang/<version>/: a streamed
# /generate (SSE), a non-streamed one, the same two with log-probabilities (top 5 per position,
# what the quality gate reads), a batch of two prompts, and /server_info. Usage:
#   scripts/record_sglang_stream.sh OUT_DIR [PORT]
# With SGLANG_URL set (http://127.0.0.1:PORT of a running server), records from that server;
# otherwise boots one NGRAM server (so the meta_info carries the speculative fields) on
# $MODEL (default .models/smollm2-135m, the real checkpoint of scripts/make_real_model.py; a
# model folder without weights, such as scripts/make_dummy_model.py's, gets --load-format dummy),
# with the CUDA-graph flag names of the SGLang that imports ($PYTHON, default python3).
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:?usage: record_sglang_stream.sh OUT_DIR [PORT]}"; port="${2:-21000}"
mkdir -p "$out"
py="${PYTHON:-python3}"
url="${SGLANG_URL:-}"
if [ -z "$url" ]; then
  model="${MODEL:-.models/smollm2-135m}"
  load=(); ls "$model"/*.safetensors >/dev/null 2>&1 || load=(--load-format dummy)
  version=$("$py" -c 'import importlib.metadata as m; print(m.version("sglang"))')
  graphs=(--cuda-graph-max-bs 8)
  if "$py" -c "import sys; v=tuple(int(x) for x in '$version'.split('.')[:3]); sys.exit(v < (0,5,14))"; then
    graphs=(--cuda-graph-max-bs-decode 8)
  fi
  SGLANG_IS_FLASHINFER_AVAILABLE=false "$py" -m sglang.launch_server --model-path "$model" \
    "${load[@]}" --attention-backend triton --sampling-backend pytorch --skip-server-warmup \
    --speculative-algorithm NGRAM --speculative-num-draft-tokens 4 "${graphs[@]}" \
    --host 127.0.0.1 --port "$port" >"$out/server.log" 2>&1 &
  server=$!
  trap 'kill $server 2>/dev/null; sleep 5; kill -9 $server 2>/dev/null || true' EXIT
  url="http://127.0.0.1:$port"
  for _ in $(seq 600); do
    curl -sf "$url/health" >/dev/null && break
    kill -0 $server 2>/dev/null || { echo "server died"; tail -20 "$out/server.log"; exit 1; }
    sleep 1
  done
fi
text='"text": "Explain how a hash table handles collisions."'
sampling='"sampling_params": {"max_new_tokens": 24, "temperature": 0, "ignore_eos": true}'
logprobs='"return_logprob": true, "top_logprobs_num": 5, "logprob_start_len": -1'
post() { curl -s "$url/generate" -H 'Content-Type: application/json' -d "$1"; }
curl -sN "$url/generate" -H 'Content-Type: application/json' \
  -d "{$text, $sampling, \"stream\": true}" >"$out/generate_stream.sse"
post "{$text, $sampling}" >"$out/generate.json"
curl -sN "$url/generate" -H 'Content-Type: application/json' \
  -d "{$text, $sampling, $logprobs, \"stream\": true}" >"$out/generate_logprobs_stream.sse"
post "{$text, $sampling, $logprobs}" >"$out/generate_logprobs.json"
post "{\"text\": [\"The capital of France is\", \"Write a haiku about GPUs.\"], $sampling, $logprobs}" \
  >"$out/generate_batch_logprobs.json"
curl -s "$url/server_info" >"$out/server_info.json"
echo "recorded in $out from $url: $(wc -c <"$out/generate_stream.sse") bytes of SSE"
