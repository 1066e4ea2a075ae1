"""A Python client for a deniable server: the analyst's and the curator's verbs over HTTP.

Connect with a token from ``deniable analyst add`` (or a curator's ``add_analyst``)::

    import deniable.client as dc

    client = dc.connect("https://dp.example.org", token)
    client.datasets()                                   # datasets and your budget
    client.accuracy("d", "SELECT COUNT(*) AS n FROM t", epsilon=0.1)   # free dry run
    answer = client.sql("d", "SELECT k, COUNT(*) AS n FROM t GROUP BY k", epsilon=0.1)
    client.budget("d"), client.history("d")

Answers are the :class:`~deniable.query.answer.Answer` a local ``Session`` returns; refusals
raise the exceptions local code raises (:mod:`deniable.client.errors`). Each query is
charged once by the server, before its answer leaves it, however often the client resends
it after a network failure (:mod:`deniable.client.transport`). Curator verbs live on
:class:`~deniable.client.curator.Curator` (:func:`connect_curator`).
"""

from __future__ import annotations

from deniable.client.analyst import Analyst
from deniable.client.curator import Curator
from deniable.client.decode import (
    AccuracyEstimate,
    AnalystRecord,
    Budget,
    DatasetInfo,
    Explanation,
    Release,
)
from deniable.client.errors import ConnectionFailed, InvalidRequest, RemoteError
from deniable.client.transport import RetryPolicy, Transport
from deniable.server.errors import Forbidden

__all__ = [
    "AccuracyEstimate",
    "Analyst",
    "AnalystRecord",
    "Budget",
    "ConnectionFailed",
    "Curator",
    "DatasetInfo",
    "Explanation",
    "InvalidRequest",
    "Release",
    "RemoteError",
    "RetryPolicy",
    "connect",
    "connect_curator",
]


def connect(
    url: str,
    token: str,
    *,
    timeout: float = 60.0,
    retry: RetryPolicy | None = None,
    verify: bool | str = True,
) -> Analyst:
    """Connect to a deniable server as the token's owner (one ``GET /v1/whoami``).

    Costs no privacy budget. The returned object answers the analyst's verbs
    (:class:`~deniable.client.analyst.Analyst`); with a curator's token it is a
    :class:`~deniable.client.curator.Curator`.

    Args:
        url: the server's base URL, e.g. ``https://dp.example.org``.
        token: an analyst's or curator's bearer token.
        timeout: seconds to wait for each response.
        retry: how failed requests are resent (:class:`RetryPolicy`; default 4 resends
            with backoff from 0.2 s).
        verify: check the server's TLS certificate (or a CA bundle path).

    Raises:
        Unauthenticated: the token is unknown or revoked.
        ConnectionFailed: the server cannot be reached.
    """
    transport = Transport(url, token, timeout=timeout, retry=retry, verify=verify)
    try:
        who = transport.request("GET", "/v1/whoami")
    except BaseException:
        transport.close()
        raise
    name, role = str(who["name"]), str(who["role"])
    if role == "curator":
        return Curator(transport, name=name, role=role)
    return Analyst(transport, name=name, role=role)


def connect_curator(
    url: str,
    token: str,
    *,
    timeout: float = 60.0,
    retry: RetryPolicy | None = None,
    verify: bool | str = True,
) -> Curator:
    """Connect with a curator's token: the curator's verbs (and the analyst's).

    Arguments as for :func:`connect`. Costs no privacy budget.

    Raises:
        Forbidden: the token belongs to an analyst.
        Unauthenticated: the token is unknown or revoked.
        ConnectionFailed: the server cannot be reached.
    """
    client = connect(url, token, timeout=timeout, retry=retry, verify=verify)
    if not isinstance(client, Curator):
        client.close()
        raise Forbidden(f"{client.name!r} is an analyst: connect_curator needs a curator's token")
    return client
