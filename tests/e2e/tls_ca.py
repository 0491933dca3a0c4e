#!/usr/bin/env python3
"""A throwaway certificate authority for the TLS tests, made with the openssl
command line: tls_ca.py DIR [CLIENT_CN] writes, in DIR,

  ca.crt, ca.key            the authority the servers' certificates chain to
  other-ca.crt              an authority nothing chains to (a wrong CA)
  server.crt, server.key    for localhost and 127.0.0.1
  expired.crt, expired.key  the same names, expired in 2020
  client.crt, client.key    a client certificate whose CN is CLIENT_CN (default kayak)

Keys are EC P-256, unencrypted, readable by the owner only. A DIR that holds
them already is left as it is (servers and tests of one run share it)."""
import os
import subprocess
import sys
import tempfile

SUBJECT_NAMES = "subjectAltName=DNS:localhost,IP:127.0.0.1"


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def key(name, cwd, rsa_bits=0):
    """An EC P-256 key, or RSA of `rsa_bits`."""
    if rsa_bits:
        openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", f"rsa_keygen_bits:{rsa_bits}",
                "-out", name, cwd=cwd)
    else:
        openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
                "-out", name, cwd=cwd)
    os.chmod(os.path.join(cwd, name), 0o600)


def authority(name, cn, cwd, rsa_bits=0):
    key(name + ".key", cwd, rsa_bits)
    openssl("req", "-x509", "-new", "-key", name + ".key", "-subj", "/CN=" + cn, "-days", "2",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign", "-out", name + ".crt", cwd=cwd)


def signed(name, cn, cwd, start, end, extensions, ca="ca", rsa_bits=0):
    """A certificate for `cn` signed by `ca`, valid from `start` to `end`
    (openssl ca's YYMMDDHHMMSSZ), with `extensions` (config lines)."""
    key(name + ".key", cwd, rsa_bits)
    openssl("req", "-new", "-key", name + ".key", "-subj", "/CN=" + cn, "-out", name + ".csr",
            cwd=cwd)
    with open(os.path.join(cwd, "ca.cnf"), "w") as f:
        f.write(f"""[ca]
default_ca = throwaway
[throwaway]
database = {cwd}/index.txt
new_certs_dir = {cwd}
serial = {cwd}/serial
default_md = sha256
policy = anything
copy_extensions = none
unique_subject = no
[anything]
commonName = supplied
[ext]
{extensions}
""")
    open(os.path.join(cwd, "index.txt"), "a").close()
    if not os.path.exists(os.path.join(cwd, "serial")):
        with open(os.path.join(cwd, "serial"), "w") as f:
            f.write("1000\n")
    openssl("ca", "-batch", "-config", "ca.cnf", "-cert", ca + ".crt", "-keyfile", ca + ".key",
            "-in", name + ".csr", "-out", name + ".crt", "-startdate", start, "-enddate", end,
            "-extensions", "ext", "-notext", cwd=cwd)


def self_signed(name, cn, cwd, rsa_bits, *extensions):
    """A self-signed certificate of an RSA key, valid for two days."""
    key(name + ".key", cwd, rsa_bits)
    args = []
    for e in extensions:
        args += ["-addext", e]
    openssl("req", "-x509", "-new", "-key", name + ".key", "-subj", "/CN=" + cn, "-days", "2",
            *args, "-out", name + ".crt", cwd=cwd)


def make(directory, client_cn="kayak"):
    if os.path.exists(os.path.join(directory, "client.crt")):
        return directory
    os.makedirs(directory, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=directory) as work:
        authority("ca", "kayak test CA", work)
        authority("other-ca", "kayak other CA", work)
        server_ext = SUBJECT_NAMES + "\nextendedKeyUsage=serverAuth"
        signed("server", "localhost", work, "200101000000Z", "491231000000Z", server_ext)
        signed("expired", "localhost", work, "200101000000Z", "200102000000Z", server_ext)
        signed("client", client_cn, work, "200101000000Z", "491231000000Z",
               "extendedKeyUsage=clientAuth")
        names = ["ca.crt", "ca.key", "other-ca.crt", "server.crt", "server.key", "expired.crt",
                 "expired.key", "client.crt", "client.key"]
        # client.crt last: its presence says the set is whole
        for name in sorted(names, key=lambda n: n == "client.crt"):
            os.replace(os.path.join(work, name), os.path.join(directory, name))
    return directory


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    make(*sys.argv[1:])
