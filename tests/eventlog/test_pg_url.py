"""postgresql:// storage URLs: the queue parameter, libpq's part, the printable form."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from snerd.errors import LogError
from snerd.eventlog.postgres.url import is_url, parse, redact


def test_the_queue_parameter_is_ours_and_the_rest_goes_to_libpq() -> None:
    t = parse("postgresql://app:pw@db.internal:6543/jobs?queue=emails&sslmode=require")
    assert t.queue == "emails"
    assert t.conninfo == "postgresql://app:pw@db.internal:6543/jobs?sslmode=require"
    assert t.display == "postgresql://app@db.internal:6543/jobs?queue=emails"
    assert parse("postgres://h/db").queue == "default"
    assert "keepalives" in t.connect_kwargs()
    assert "connect_timeout" not in parse("postgresql://h/db?connect_timeout=1").connect_kwargs()


@pytest.mark.parametrize("bad", ["postgresql://h/db?queue=", "postgresql://h/db?queue=a/b",
                                 "postgresql://h/db?queue=a&queue=b", "/var/lib/q"])  # fmt: skip
def test_bad_urls_are_refused(bad: str) -> None:
    with pytest.raises(LogError):
        parse(bad)


def test_is_url_tells_urls_from_paths() -> None:
    assert is_url("postgresql://h/db") and is_url("POSTGRES://h/db")
    assert not is_url("./postgresql") and not is_url("postgresql:/x") and not is_url(".snerdata")


@given(password=st.text(alphabet=st.characters(codec="ascii", exclude_characters="@/?#"),
                        min_size=4))  # fmt: skip
def test_a_password_is_never_in_the_printable_form(password: str) -> None:
    url = f"postgresql://user:{password}@host/db?queue=q"
    assert redact(url) in ("postgresql://user@host/db?queue=q", "postgresql://(unparsable URL)")
    assert redact("/some/dir") == "/some/dir"
