"""How Client and AsyncClient reach a server: the channel credentials made from PEM files
(TLS verifying the server against a CA; mutual TLS with a client certificate and key) and
the API key, sent as "authorization: Bearer KEY" metadata on every call."""
from __future__ import annotations

import os
from typing import Optional, Tuple

import grpc

API_KEY_ENV = "TPSERVE_API_KEY"


def _read(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise ValueError(f"{what}: cannot read {path}: {e.strerror}") from None


def channel_credentials(ca_file: Optional[str] = None, cert_file: Optional[str] = None,
                        key_file: Optional[str] = None) -> Optional[grpc.ChannelCredentials]:
    """grpc.ssl_channel_credentials from the PEM files, or None (plaintext) when none is
    given. Without ca_file the system's CAs verify the server. cert_file and key_file go
    together (mutual TLS)."""
    if not (ca_file or cert_file or key_file):
        return None
    if bool(cert_file) != bool(key_file):
        raise ValueError("cert_file and key_file go together (a client certificate and its key)")
    return grpc.ssl_channel_credentials(
        root_certificates=_read(ca_file, "ca_file") if ca_file else None,
        private_key=_read(key_file, "key_file") if key_file else None,
        certificate_chain=_read(cert_file, "cert_file") if cert_file else None)


def call_metadata(api_key: Optional[str]) -> Tuple[Tuple[str, str], ...]:
    """The metadata of every call: the API key (from $TPSERVE_API_KEY when api_key is None;
    an empty string sends none)."""
    key = os.environ.get(API_KEY_ENV, "") if api_key is None else api_key
    return (("authorization", f"Bearer {key}"),) if key else ()


def resolve(credentials, ca_file, cert_file, key_file):
    """The channel credentials of a client: the grpc.ChannelCredentials given, or those of
    the files (not both)."""
    if credentials is not None and (ca_file or cert_file or key_file):
        raise ValueError("give credentials or ca_file/cert_file/key_file, not both")
    return credentials if credentials is not None else channel_credentials(ca_file, cert_file,
                                                                            key_file)
