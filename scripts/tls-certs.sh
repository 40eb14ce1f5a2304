#!/usr/bin/env bash
# Makes test certificates with Debian's openssl in DIR: ca.crt/ca.key, and server.crt/.key and
# client.crt/.key signed by that CA (ECDSA P-256, for 127.0.0.1 and localhost, good for a server
# and a client alike, valid two days). For benchmarks and trying TLS by hand; the Rust tests
# make their own with rcgen.
#   scripts/tls-certs.sh DIR
set -euo pipefail
DIR=${1:?usage: scripts/tls-certs.sh DIR}
command -v openssl >/dev/null || { echo "openssl is required (apt-get install openssl)"; exit 2; }
mkdir -p "$DIR"
cd "$DIR"
openssl req -x509 -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
    -keyout ca.key -out ca.crt -days 2 -subj /CN=lattice-test-ca 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n' > ext.cnf
for name in server client; do
    openssl req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
        -keyout "$name.key" -out "$name.csr" -subj "/CN=$name" 2>/dev/null
    openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial \
        -out "$name.crt" -days 2 -extfile ext.cnf 2>/dev/null
done
rm -f ext.cnf ./*.csr ca.srl
