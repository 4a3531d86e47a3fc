"""The browser's half of Web Push, done with third-party code (PyPI `http_ece` and
`cryptography`), so the node's encryption and VAPID signature are checked by an
implementation we did not write.

  webpush_check.py keys      -> {"p256dh", "auth", "private"}   (a subscription's keys)
  webpush_check.py decrypt   <- {"private", "auth", "body_b64", "authorization", "aud"}
                             -> {"plaintext", "vapid": {"ok", "claims", "k"}}
"""
import base64
import json
import os
import sys

import http_ece
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature


def b64d(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def b64e(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def keys():
    priv = ec.generate_private_key(ec.SECP256R1())
    pub = priv.public_key().public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
    )
    d = priv.private_numbers().private_value.to_bytes(32, "big")
    print(json.dumps({"p256dh": b64e(pub), "auth": b64e(os.urandom(16)), "private": b64e(d)}))


def check_vapid(authorization, aud):
    # "vapid t=<jwt>, k=<public key>" (RFC 8292 section 3)
    fields = dict(
        part.strip().split("=", 1) for part in authorization[len("vapid "):].split(",")
    )
    token, k = fields["t"], fields["k"]
    head, claims, sig = token.split(".")
    pub = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), b64d(k))
    raw = b64d(sig)
    der = encode_dss_signature(int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big"))
    try:
        pub.verify(der, f"{head}.{claims}".encode(), ec.ECDSA(hashes.SHA256()))
        ok = True
    except InvalidSignature:
        ok = False
    header = json.loads(b64d(head))
    claims = json.loads(b64d(claims))
    ok = ok and header.get("alg") == "ES256" and claims.get("aud") == aud
    return {"ok": ok, "claims": claims, "k": k}


def decrypt():
    req = json.load(sys.stdin)
    d = int.from_bytes(b64d(req["private"]), "big")
    priv = ec.derive_private_key(d, ec.SECP256R1())
    plaintext = http_ece.decrypt(
        base64.b64decode(req["body_b64"]),
        private_key=priv,
        auth_secret=b64d(req["auth"]),
        version="aes128gcm",
    )
    print(json.dumps({
        "plaintext": plaintext.decode("utf-8"),
        "vapid": check_vapid(req["authorization"], req["aud"]),
    }))


if __name__ == "__main__":
    {"keys": keys, "decrypt": decrypt}[sys.argv[1]]()
