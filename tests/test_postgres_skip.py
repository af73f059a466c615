"""Without a PostgreSQL server the postgres tests skip, and say why (this test needs no server)."""

from __future__ import annotations

import pytest

from tests import helpers_postgres
from tests.helpers_webserver import free_port


def test_without_a_server_the_postgres_tests_skip_saying_why(monkeypatch):
    monkeypatch.setattr(helpers_postgres, "PG_PORT", free_port())  # nothing listens there
    with pytest.raises(pytest.skip.Exception, match=r"PostgreSQL") as skipped:
        helpers_postgres.require_postgres()
    assert str(helpers_postgres.PG_PORT) in str(skipped.value) or "pg_isready" in str(skipped.value)
