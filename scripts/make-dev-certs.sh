#!/usr/bin/env bash
# Makes the secrets of a TLS deployment for development and trials, into DIR (default
# deploy/secrets, which git ignores and deploy/docker-compose.yml reads): a private CA
# (ca.crt, ca.key), the coordinator's certificate and key signed by it (tls.crt, tls.key; SAN
# tpserve, tpserve.<namespace>.svc(.cluster.local) for NAMESPACE (default: default),
# coordinator, localhost and 127.0.0.1) and one random API key (api-keys.txt). Use your own
# PKI in production. Existing files are left alone unless FORCE=1.
#
# The cluster (coordinator <-> workers, mutual TLS) gets a CA of its own (cluster-ca.crt,
# cluster-ca.key), a worker certificate (cluster-worker.crt/.key: serverAuth and clientAuth,
# the latter for the workers' own health checks; SANs: every name the coordinator dials a
# worker by for WORKERS ranks (default 2): worker<r> (Compose),
# tpserve-worker-<r>.tpserve-worker(.<namespace>.svc(.cluster.local)) (Kubernetes),
# *.tpserve.<namespace> (deploy/k8s/lws), plus localhost and 127.0.0.1) and a coordinator certificate (cluster-coordinator.crt/.key,
# clientAuth).
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
# The cluster's own CA and certificates.
openssl req -x509 "${ec[@]}" -keyout cluster-ca.key -out cluster-ca.crt \
  -subj "/CN=tpserve dev cluster CA" -days "$days" 2>/dev/null
sans="DNS:localhost,IP:127.0.0.1,DNS:*.tpserve.$ns"  # the last: LeaderWorkerSet pods
for ((r = 0; r < ${WORKERS:-2}; r++)); do
  w="tpserve-worker-$r.tpserve-worker"
  sans="$sans,DNS:worker$r,DNS:$w,DNS:$w.$ns.svc,DNS:$w.$ns.svc.cluster.local"
done
for who in worker coordinator; do
  openssl req "${ec[@]}" -keyout "cluster-$who.key" -out "cluster-$who.csr" \
    -subj "/CN=tpserve $who" 2>/dev/null
  if [[ $who == worker ]]; then
    printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$sans" >"cluster-$who.ext"
  else
    printf 'extendedKeyUsage=clientAuth\n' >"cluster-$who.ext"
  fi
  openssl x509 -req -in "cluster-$who.csr" -CA cluster-ca.crt -CAkey cluster-ca.key \
    -days "$days" -extfile "cluster-$who.ext" -out "cluster-$who.crt" 2>/dev/null
  rm -f "cluster-$who.csr" "cluster-$who.ext"
done
{
  echo "# tpserve API keys, one per line (clients send 'authorization: Bearer KEY')"
  openssl rand -hex 32
} >api-keys.txt
# Readable by the containers' uid 10001 through Compose's bind mounts; the directory
# itself (0700) keeps other users of this host out.
chmod 0644 ca.crt tls.crt tls.key api-keys.txt cluster-ca.crt cluster-worker.crt \
  cluster-worker.key cluster-coordinator.crt cluster-coordinator.key
chmod 0600 ca.key cluster-ca.key
echo "make-dev-certs: wrote ca.crt ca.key tls.crt tls.key api-keys.txt cluster-ca.crt" \
  "cluster-ca.key cluster-worker.crt cluster-worker.key cluster-coordinator.crt" \
  "cluster-coordinator.key in $dir"
