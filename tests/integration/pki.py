"""Test certificates made with the `openssl` command (EC P-256 keys: quick), for the tests
of TLS: a CA, and keys with certificates it signs, each a (key path, certificate path)."""
import subprocess

SERVER_EXT = "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"
CLIENT_EXT = "extendedKeyUsage=clientAuth\n"


def openssl(cwd, *args):
    proc = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=30)
    assert proc.returncode == 0, f"openssl {' '.join(args)}:\n{proc.stderr}"


def make_ca(d, name):
    """A self-signed CA in directory `d`: (key path, certificate path)."""
    openssl(d, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
            "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.pem", "-subj",
            f"/CN=tpserve test {name}", "-days", "2")
    return d / f"{name}.key", d / f"{name}.pem"


def make_cert(d, name, ca, ext, days=2):
    """A key and a certificate signed by `ca` with the extensions `ext` (an openssl extfile's
    text), valid `days` days (-1: expired yesterday)."""
    (d / f"{name}.ext").write_text(ext)
    openssl(d, "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}")
    openssl(d, "x509", "-req", "-in", f"{name}.csr", "-CA", str(ca[1]), "-CAkey", str(ca[0]),
            "-days", str(days), "-extfile", f"{name}.ext", "-out", f"{name}.pem")
    return d / f"{name}.key", d / f"{name}.pem"
