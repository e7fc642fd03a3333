#!/bin/bash
# ON the H200: reassemble the SGLang 0.5.17 bundle parts in DIR, check them, unpack to /tmp/site,
# and lay out the dummy model at /tmp/model (same model kit as vLLM). Starts nothing.
set -euo pipefail
D=$(readlink -f "${1:?dir with sglang0517.tar.xz.partNN and SHA256SUMS}")
cat "$D"/sglang0517.tar.xz.part* > /tmp/sglang0517.tar.xz
(cd /tmp && grep ' sglang0517.tar.xz$' "$D/SHA256SUMS" | sha256sum -c -)
rm -rf /tmp/site && mkdir -p /tmp/site /tmp/model /tmp/mk
python3 -c "import tarfile; tarfile.open('/tmp/sglang0517.tar.xz','r:xz').extractall('/tmp/site', filter='tar')"
rm -f /tmp/sglang0517.tar.xz
python3 -c "import tarfile; tarfile.open('$D/model-kit.tar.xz','r:xz').extractall('/tmp/mk', filter='data')"
cp /tmp/mk/tokenizer/* /tmp/model/ && cp /tmp/mk/llama8b-like-config.json /tmp/model/config.json
