"""OIDC on the internal entry points: google-auth verification against certificates served on loopback."""

from __future__ import annotations

import datetime
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID
from flask.testing import FlaskClient
from google.auth import crypt, jwt

from shared import config
from shared.auth import oidc as auth
from tests.function_apps import function_client
from tests.served import served

AUDIENCE = "https://agent-session.example.run.app/"
INVOKER = "tasks-invoker@project.iam.gserviceaccount.com"


@pytest.fixture(scope="module")
def keys() -> tuple[rsa.RSAPrivateKey, bytes]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test-google-certs")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    return key, cert.public_bytes(serialization.Encoding.PEM)


@pytest.fixture(scope="module")
def certs_url(keys: tuple[rsa.RSAPrivateKey, bytes]) -> Iterator[str]:
    """Serves {kid: PEM certificate}, the shape of Google's oauth2/v1/certs."""
    body = json.dumps({"test-kid": keys[1].decode()}).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    with served(server):
        yield f"http://127.0.0.1:{server.server_address[1]}/certs"


def token(keys: tuple[rsa.RSAPrivateKey, bytes], **overrides: Any) -> str:
    pem = keys[0].private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    signer = crypt.RSASigner.from_string(pem, key_id="test-kid")  # type: ignore[no-untyped-call]
    now = int(time.time())
    claims = {"iss": "https://accounts.google.com", "aud": AUDIENCE, "email": INVOKER, "email_verified": True,
              "iat": now, "exp": now + 600, "sub": "1234"} | overrides  # fmt: skip
    return jwt.encode(signer, claims).decode()  # type: ignore[no-untyped-call,no-any-return]


def headers(value: str) -> dict[str, str]:
    return {"authorization": f"Bearer {value}"}


def test_a_valid_token_for_the_invoker_passes(keys: tuple[rsa.RSAPrivateKey, bytes], certs_url: str) -> None:
    email = auth.verify(headers(token(keys)), audience=AUDIENCE, service_account=INVOKER, certs_url=certs_url)
    assert email == INVOKER


@pytest.mark.parametrize(
    ("request_headers", "error"),
    [
        ({}, auth.Unauthorized),
        ({"authorization": "Basic abc"}, auth.Unauthorized),
        ({"authorization": "Bearer not-a-jwt"}, auth.Unauthorized),
    ],
)
def test_missing_or_garbled_tokens_are_401(
    certs_url: str, request_headers: dict[str, str], error: type[Exception]
) -> None:
    with pytest.raises(error):
        auth.verify(request_headers, audience=AUDIENCE, service_account=INVOKER, certs_url=certs_url)


@pytest.mark.parametrize(
    ("claims", "error"),
    [
        ({"aud": "https://someone-else.run.app/"}, auth.Unauthorized),
        ({"exp": int(time.time()) - 3600, "iat": int(time.time()) - 7200}, auth.Unauthorized),
        ({"email": "attacker@evil.iam.gserviceaccount.com"}, auth.Forbidden),
        ({"email_verified": False}, auth.Forbidden),
    ],
)
def test_wrong_audience_expiry_or_caller_is_refused(
    keys: tuple[rsa.RSAPrivateKey, bytes], certs_url: str, claims: dict[str, Any], error: type[Exception]
) -> None:
    with pytest.raises(error):
        auth.verify(headers(token(keys, **claims)), audience=AUDIENCE, service_account=INVOKER, certs_url=certs_url)


def test_a_token_signed_by_another_key_is_refused(certs_url: str) -> None:
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    forged = token((other, b""))
    with pytest.raises(auth.Unauthorized):
        auth.verify(headers(forged), audience=AUDIENCE, service_account=INVOKER, certs_url=certs_url)


@contextmanager
def _oidc_required(monkeypatch: pytest.MonkeyPatch, entry_point: str, **env: str) -> Iterator[FlaskClient]:
    """``entry_point`` served as deployed with OIDC required and ``env`` set."""
    for name, value in {"REQUIRE_OIDC": "true", **env}.items():
        monkeypatch.setenv(name, value)
    config.reset()
    try:
        yield function_client(entry_point)
    finally:
        config.reset()


def test_agent_session_without_a_token_is_401_when_oidc_is_required(monkeypatch: pytest.MonkeyPatch) -> None:
    """The deployed behaviour, through functions-framework's app: no token, no session."""
    with _oidc_required(monkeypatch, "agent_session", TASKS_SERVICE_ACCOUNT=INVOKER, TASKS_TARGET_URL=AUDIENCE,
                        SLACK_BOT_TOKEN="xoxb-x") as client:  # fmt: skip
        response = client.post("/", json={"session_id": "ev-anything"})
        assert response.status_code == 401
        response = client.post("/", json={"session_id": "ev-anything"}, headers={"Authorization": "Bearer junk"})
        assert response.status_code == 401
        oversized = client.post("/", data=b"{" + b" " * 100_000 + b"}", content_type="application/json")
        assert oversized.status_code == 401  # the token first: a stranger learns nothing of the size limit


def test_the_sweep_without_a_token_is_401_when_oidc_is_required(monkeypatch: pytest.MonkeyPatch) -> None:
    with _oidc_required(monkeypatch, "sweep", SCHEDULER_SERVICE_ACCOUNT="scheduler@project.iam.gserviceaccount.com",
                        OIDC_AUDIENCE="https://sweep.example/") as client:  # fmt: skip
        response = client.post("/", json={"now": "2030-01-01T00:00:00+00:00"})
        assert response.status_code == 401
        assert client.post("/", data=b" " * 100_000, content_type="application/json").status_code == 401


class CertsServer:
    """Google's certificates on loopback, with every fetch counted; the Cache-Control header and a delay are set
    per test."""

    def __init__(self, keys: tuple[rsa.RSAPrivateKey, bytes]) -> None:
        body = json.dumps({"test-kid": keys[1].decode()}).encode()
        self.fetches: list[str] = []
        self.cache_control = "public, max-age=3600, must-revalidate, no-transform"  # Google's shape
        self.delay = 0.0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server.fetches.append(self.path)
                time.sleep(server.delay)
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Cache-Control", server.cache_control)
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass  # the client gave up waiting

            def log_message(self, *args: Any) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}/counted-certs"
        threading.Thread(target=self.http.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


@pytest.fixture
def certs_server(keys: tuple[rsa.RSAPrivateKey, bytes]) -> Iterator[CertsServer]:
    server = CertsServer(keys)
    auth.CERTS.forget()
    yield server
    server.close()
    auth.CERTS.forget()


def test_certificates_are_fetched_once_for_many_verifications(
    keys: tuple[rsa.RSAPrivateKey, bytes], certs_server: CertsServer
) -> None:
    """Defect: Google's certificates were fetched on every request (with a 120 s timeout)."""
    for _ in range(20):
        email = auth.verify(
            headers(token(keys)), audience=AUDIENCE, service_account=INVOKER, certs_url=certs_server.url
        )
        assert email == INVOKER
    assert len(certs_server.fetches) == 1


def test_concurrent_requests_share_one_fetch(keys: tuple[rsa.RSAPrivateKey, bytes], certs_server: CertsServer) -> None:
    """A cold instance met by a burst of tasks fetches the certificates once, the others wait for that fetch."""
    certs_server.delay = 0.3
    bearer = headers(token(keys))
    results: list[str | BaseException] = []

    def one() -> None:
        try:
            results.append(auth.verify(bearer, audience=AUDIENCE, service_account=INVOKER, certs_url=certs_server.url))
        except Exception as exc:  # reported by the assertion below
            results.append(exc)

    threads = [threading.Thread(target=one) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert results == [INVOKER] * 8
    assert len(certs_server.fetches) == 1


@pytest.mark.parametrize(
    ("cache_control", "kept"),
    [
        ("public, max-age=3600, must-revalidate, no-transform", 3600),
        ("public, max-age=5", auth.CACHE_SECONDS[0]),  # a floor: never a fetch per request
        ("public, max-age=999999", auth.CACHE_SECONDS[1]),  # a ceiling: rotated keys are seen within hours
        ("no-cache", auth.CACHE_SECONDS[0]),
        ("", auth.CACHE_SECONDS[0]),
    ],
)
def test_certificates_are_kept_for_their_max_age_within_bounds(
    certs_server: CertsServer, cache_control: str, kept: int
) -> None:
    now = [1000.0]
    certs = auth._Certs(clock=lambda: now[0])
    certs_server.cache_control = cache_control
    assert "test-kid" in certs.get(certs_server.url)
    now[0] += kept - 1
    certs.get(certs_server.url)
    assert len(certs_server.fetches) == 1
    now[0] += 2
    assert "test-kid" in certs.get(certs_server.url)
    assert len(certs_server.fetches) == 2


def test_the_certificate_fetch_has_a_short_timeout(
    keys: tuple[rsa.RSAPrivateKey, bytes], certs_server: CertsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hung fetch is a 401 Cloud Tasks retries, after seconds (not google-auth's 120 s); nothing is cached."""
    assert auth.CERTS_TIMEOUT_SECONDS <= 10
    monkeypatch.setattr(auth, "CERTS_TIMEOUT_SECONDS", 0.2)
    certs_server.delay = 8.0  # far past the timeout, so a busy machine's slack cannot blur the two
    started = time.monotonic()
    with pytest.raises(auth.Unauthorized, match="could not fetch"):
        auth.verify(headers(token(keys)), audience=AUDIENCE, service_account=INVOKER, certs_url=certs_server.url)
    assert time.monotonic() - started < 6
    certs_server.delay = 0.0
    assert auth.verify(headers(token(keys)), audience=AUDIENCE, service_account=INVOKER, certs_url=certs_server.url)


@pytest.mark.parametrize("issuer", ["https://accounts.google.com", "accounts.google.com"])
def test_both_forms_of_googles_issuer_pass(
    keys: tuple[rsa.RSAPrivateKey, bytes], certs_server: CertsServer, issuer: str
) -> None:
    bearer = headers(token(keys, iss=issuer))
    assert auth.verify(bearer, audience=AUDIENCE, service_account=INVOKER, certs_url=certs_server.url) == INVOKER


@pytest.mark.parametrize("issuer", ["https://evil.example", "https://accounts.google.com.evil.example", None])
def test_a_token_from_another_issuer_is_refused(
    keys: tuple[rsa.RSAPrivateKey, bytes], certs_server: CertsServer, issuer: str | None
) -> None:
    """Defect: the token's issuer was not checked."""
    with pytest.raises(auth.Unauthorized, match="issued by"):
        auth.verify(headers(token(keys, iss=issuer)), audience=AUDIENCE, service_account=INVOKER,
                    certs_url=certs_server.url)  # fmt: skip


def test_another_issuer_is_answered_401(
    keys: tuple[rsa.RSAPrivateKey, bytes], certs_server: CertsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through ``check``, what agent_session and sweep answer: 401 for another issuer, None (go on) for Google's."""
    fetch = auth.CERTS.get
    monkeypatch.setattr(auth.CERTS, "get", lambda url: fetch(certs_server.url))  # Google's URL, served on loopback
    monkeypatch.setenv("REQUIRE_OIDC", "true")
    monkeypatch.setenv("OIDC_AUDIENCE", AUDIENCE)
    config.reset()
    try:
        refused = auth.check(headers(token(keys, iss="https://evil.example")), audience="x", service_account=INVOKER)
        assert refused == ({"error": "unauthorized"}, 401)
        assert auth.check(headers(token(keys)), audience="x", service_account=INVOKER) is None
    finally:
        config.reset()
