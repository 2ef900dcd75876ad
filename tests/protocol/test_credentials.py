"""Which query parameters count as credentials, in every spelling a server would decode."""

from __future__ import annotations

import pytest

from realtime.protocol.credentials import has_query_credentials, is_credential_param


@pytest.mark.parametrize(
    ("query", "refused"),
    [
        (b"", False),
        (b"model=echo", False),
        (b"api_key=sk", True),
        (b"x=1&Token=abc", True),
        (b"access_token", True),
        (b"keyboard=1", False),
        (b"monkey=1&tokens=3", False),
        # every spelling a server would decode to a credential name
        (b"%61pi_key=sk", True),
        (b"API_KEY=sk", True),
        (b"Api-Key=sk", True),
        (b"api%5Fkey=sk", True),
        (b"api%255Fkey=sk", True),  # encoded twice
        (b"api+key=sk", True),
        (b"api_key[]=sk", True),
        (b"x=1;api_key=sk", True),
        (b"%25252525252561=sk", True),  # still encoded after every round: refused
        (b"q=api_key", False),  # a value, not a name
    ],
)
def test_credential_query_parameters(query, refused):
    assert has_query_credentials(query) is refused


def test_a_name_is_judged_decoded_and_without_separators():
    assert is_credential_param("API-Key") and is_credential_param(b"%61ccess_token")
    assert not is_credential_param("keyboard")
