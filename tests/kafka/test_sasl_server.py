"""The broker front's SASL server (tests/kafka/sasl_server.py) against RFC 7677's example exchange and
aiokafka's own SCRAM client, so that what the SASL tests check is real SCRAM."""

from __future__ import annotations

import base64

import pytest
from aiokafka.conn import ScramAuthenticator

from tests.kafka.sasl_server import AuthenticationFailed, ScramExchange, check_plain


def test_rfc_7677_example_exchange() -> None:
    server = ScramExchange(
        "SCRAM-SHA-256",
        {"user": "pencil"},
        iterations=4096,
        salt=base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ=="),
        server_nonce="%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
    )
    assert (
        server.first("n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
        == "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    final = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    assert server.final(final) == "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_aiokafkas_client_is_accepted_with_the_password_and_refused_without(mechanism: str) -> None:
    def exchange(password: str) -> None:
        client = ScramAuthenticator(loop=None, sasl_plain_password=password, sasl_plain_username="flotilla", sasl_mechanism=mechanism)
        server = ScramExchange(mechanism, {"flotilla": "s3cret"})
        steps = client.authenticator_scram()
        first, _ = next(steps)
        final, _ = steps.send(server.first(first.decode()).encode())
        with pytest.raises(StopIteration):
            steps.send(server.final(final.decode()).encode())  # the client checks the server's signature too

    exchange("s3cret")
    with pytest.raises(AuthenticationFailed, match="wrong password for 'flotilla'"):
        exchange("guess")


def test_unknown_users_and_plain_passwords() -> None:
    with pytest.raises(AuthenticationFailed, match="unknown user 'mallory'"):
        ScramExchange("SCRAM-SHA-512", {"flotilla": "s3cret"}).first("n,,n=mallory,r=abc")
    assert check_plain(b"\0flotilla\0s3cret", {"flotilla": "s3cret"}) == "flotilla"
    with pytest.raises(AuthenticationFailed):
        check_plain(b"\0flotilla\0guess", {"flotilla": "s3cret"})
