#!/usr/bin/env bash
# Makes the secrets of a TLS deployment for development and trials, into DIR (default
# deploy/secrets, which git ignores and deploy/docker-compose.yml reads): a private CA
# (ca.crt, ca.key), the coordinator's certificate and key signed by it (tls.crt, tls.key; SAN
# tpserve, tpserve.<namespace>.svc(.cluster.local) for NAMESPACE (default: default),
# coordinator, localhost and 127.0.0.1) and one random API key (api-keys.txt). Use your own
# PKI in production. Existing files are left alone unless FORCE=1.
#
#   scripts/make-dev-certs.sh [DIR]
#   tpserve-cli --server 127.0.0.1:50051 --tls_ca_file deploy/secrets/ca.crt \
#     --api_key "$(grep -v '^#' deploy/secrets/api-keys.txt | head -1)" health
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="${1:-$root/deploy/secrets}"
ns="${NAMESPACE:-default}"
days="${DAYS:-365}"
mkdir -p "$dir"
chmod 0700 "$dir"
cd "$dir"
if [[ -e tls.crt && "${FORCE:-0}" != 1 ]]; then
  echo "make-dev-certs: $dir/tls.crt exists (FORCE=1 to replace)" >&2
  exit 1
fi
ec=(-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes)
openssl req -x509 "${ec[@]}" -keyout ca.key -out ca.crt -subj "/CN=tpserve dev CA" \
  -days "$days" 2>/dev/null
openssl req "${ec[@]}" -keyout tls.key -out tls.csr -subj "/CN=tpserve" 2>/dev/null
cat >tls.ext <<EXT
subjectAltName=DNS:tpserve,DNS:tpserve.$ns.svc,DNS:tpserve.$ns.svc.cluster.local,DNS:coordinator,DNS:localhost,IP:127.0.0.1
extendedKeyUsage=serverAuth
EXT
openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -days "$days" -extfile tls.ext \
  -out tls.crt 2>/dev/null
rm -f tls.csr tls.ext
{
  echo "# tpserve API keys, one per line (clients send 'authorization: Bearer KEY')"
  openssl rand -hex 32
} >api-keys.txt
# Readable by the containers' uid 10001 through Compose's bind mounts; the directory
# itself (0700) keeps other users of this host out.
chmod 0644 ca.crt tls.crt tls.key api-keys.txt
chmod 0600 ca.key
echo "make-dev-certs: wrote ca.crt ca.key tls.crt tls.key api-keys.txt in $dir"
