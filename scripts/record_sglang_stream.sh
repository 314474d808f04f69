#!/usr/bin/env bash
# Record what a real SGLang server sends: a streamed /generate (SSE), a non-streamed one, and
# /server_info, for tests/fixtures/sglang/<version>/. Boots one NGRAM server on the dummy model
# (scripts/make_dummy_model.py) so the meta_info carries the speculative fields. Usage:
#   scripts/record_sglang_stream.sh OUT_DIR [PORT]
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:?usage: record_sglang_stream.sh OUT_DIR [PORT]}"; port="${2:-21000}"
mkdir -p "$out"
py="${PYTHON:-python3}"
SGLANG_IS_FLASHINFER_AVAILABLE=false "$py" -m sglang.launch_server --model-path .models/llama-1b \
  --load-format dummy --attention-backend triton --sampling-backend pytorch --skip-server-warmup \
  --speculative-algorithm NGRAM --speculative-num-draft-tokens 4 --cuda-graph-max-bs 8 \
  --host 127.0.0.1 --port "$port" >"$out/server.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; sleep 5; kill -9 $server 2>/dev/null || true' EXIT
for _ in $(seq 600); do
  curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
  kill -0 $server 2>/dev/null || { echo "server died"; tail -20 "$out/server.log"; exit 1; }
  sleep 1
done
body='{"text": "Explain how a hash table handles collisions.", "sampling_params": {"max_new_tokens": 24, "temperature": 0, "ignore_eos": true}'
curl -sN "http://127.0.0.1:$port/generate" -H 'Content-Type: application/json' \
  -d "$body, \"stream\": true}" >"$out/generate_stream.sse"
curl -s "http://127.0.0.1:$port/generate" -H 'Content-Type: application/json' \
  -d "$body}" >"$out/generate.json"
curl -s "http://127.0.0.1:$port/server_info" >"$out/server_info.json"
echo "recorded in $out: $(wc -c <"$out/generate_stream.sse") bytes of SSE"
