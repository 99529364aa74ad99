"""No secret of the worker leaves an activity in a provider's text (issue 23, item 9).

A provider that echoes the request body in a 400's `detail` (several do) must
not put the proxy password into the create's failure, and from there into
history, the pool's events and `describe`. Every secret the worker holds (all
accounts' API keys, every proxy pool's password) is scrubbed, in the forms a
provider may echo it (as sent, JSON-escaped, URL-encoded).
"""

from __future__ import annotations

import json
from urllib.parse import quote, quote_plus

import httpx
import pytest
from pydantic import SecretStr
from temporalio.api.failure.v1 import Failure
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from devicepool.activities import DeviceActivities
from devicepool.activities.models import (
    AccountSettings,
    CreateDeviceInput,
    ListDevicesInput,
    ProxyPoolSettings,
)
from devicepool.activities.secrets import Scrubber
from devicepool.api.errors import ErrorType
from devicepool.api.v1beta1 import Platform
from devicepool.connect import DATA_CONVERTER

# Characters that JSON and URLs both encode: the echoed forms differ from the secret.
PASSWORD = 'pr0xy/p@ss "wörd"+s3cret'
KEY = "sk-live-default-0123456789"
OTHER_KEY = "sk-live-other-9876543210"
OTHER_PASSWORD = "other-proxy-pass-42"

ACCOUNTS = {
    "default": AccountSettings(
        name="default", base_url="http://provider.test", api_key=SecretStr(KEY)
    ),
    "other": AccountSettings(
        name="other", base_url="http://other.test", api_key=SecretStr(OTHER_KEY)
    ),
}
PROXY_POOLS = {
    name: ProxyPoolSettings(
        name=name, type="socks5", host="gw.proxy.example", port=10000, password=SecretStr(pw)
    )
    for name, pw in (("residential", PASSWORD), ("datacenter", OTHER_PASSWORD))
}


def encodings(secret: str) -> set[str]:
    """The forms of a secret a provider may echo back."""
    return {
        secret,
        json.dumps(secret)[1:-1],
        json.dumps(secret, ensure_ascii=False)[1:-1],
        quote(secret, safe=""),
        quote(secret),
        quote_plus(secret),
    }


SECRETS = [PASSWORD, KEY, OTHER_KEY, OTHER_PASSWORD]


def assert_no_secret_in(failure: BaseException) -> None:
    """Not in the exception (message, details, causes), nor in the failure Temporal records."""
    proto = Failure()
    DATA_CONVERTER.failure_converter.to_failure(failure, DATA_CONVERTER.payload_converter, proto)
    recorded = proto.SerializeToString()
    texts = [str(failure), repr(failure), str(proto)]
    if isinstance(failure, ApplicationError):
        texts.append(repr(failure.details))
    cause = failure.__cause__
    while cause is not None:
        texts += [str(cause), repr(cause)]
        cause = cause.__cause__
    for secret in SECRETS:
        for form in encodings(secret):
            assert form.encode() not in recorded, form
            for text in texts:
                assert form not in text, form


def create_input(proxy_pool: str = "residential") -> CreateDeviceInput:
    return CreateDeviceInput(
        account="default",
        pool="p1",
        platform=Platform.ANDROID,
        region="us-west",
        os_version="14",
        name="p1-0",
        idempotency_key="p1/1/0",
        proxy_pool=proxy_pool,
        sticky_ttl=900,
    )


async def run_create(handler, *, input: CreateDeviceInput | None = None) -> ApplicationError:
    acts = DeviceActivities(
        accounts=ACCOUNTS, proxy_pools=PROXY_POOLS, transport=httpx.MockTransport(handler)
    )
    try:
        with pytest.raises(ApplicationError) as info:
            await ActivityEnvironment().run(acts.create_device, input or create_input())
    finally:
        await acts.aclose()
    return info.value


def problem(status: int, detail: str) -> httpx.Response:
    body = {"type": "about:blank", "title": "bad", "status": status, "detail": detail}
    return httpx.Response(status, json=body, headers={"content-type": "application/problem+json"})


async def test_a_400_echoing_the_request_body_does_not_leak_the_proxy_password() -> None:
    sent: list[bytes] = []

    def echo_body(request: httpx.Request) -> httpx.Response:
        sent.append(request.content)
        return problem(400, f"invalid request body: {request.content.decode()}")

    failure = await run_create(echo_body)
    assert json.loads(sent[0])["proxy"]["password"] == PASSWORD  # it was sent ...
    assert failure.type == ErrorType.INVALID_ARGUMENT.value
    assert "invalid request body" in failure.message  # ... the rest of the detail stays
    assert_no_secret_in(failure)


async def test_every_secret_of_the_worker_is_scrubbed_in_every_echoed_form() -> None:
    # Another account's key and another pool's password, too: what the worker holds.
    echoed = " | ".join(form for secret in SECRETS for form in sorted(encodings(secret)))

    failure = await run_create(lambda request: problem(400, f"echo: {echoed}"))
    assert failure.message.startswith("invalid_argument (HTTP 400): echo: ")
    assert_no_secret_in(failure)

    failure = await run_create(lambda request: problem(503, f"upstream said {echoed}"))
    assert failure.type == ErrorType.SERVER_ERROR.value
    assert_no_secret_in(failure)


async def test_a_text_answer_echoing_the_body_is_scrubbed() -> None:
    def echo_as_text(request: httpx.Request) -> httpx.Response:
        return httpx.Response(400, text=f"<pre>{request.content.decode()}</pre>")

    assert_no_secret_in(await run_create(echo_as_text))


async def test_a_transport_error_naming_a_secret_is_scrubbed() -> None:
    def boom(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError(f"proxy refused credentials {quote(PASSWORD)} / {PASSWORD}")

    failure = await run_create(boom)
    assert failure.type == ErrorType.TRANSPORT.value
    assert_no_secret_in(failure)


async def test_a_listing_that_echoes_a_secret_in_a_device_field_is_scrubbed() -> None:
    def listing(request: httpx.Request) -> httpx.Response:
        device = {
            "id": "d-1",
            "status": "failed",
            "createdAt": "2026-01-01T00:00:00Z",
            "reason": f"proxy login failed for password {PASSWORD}",
            "labels": {"pool": "p1"},
        }
        return httpx.Response(200, json={"items": [device], "nextPageToken": None})

    acts = DeviceActivities(
        accounts=ACCOUNTS, proxy_pools=PROXY_POOLS, transport=httpx.MockTransport(listing)
    )
    result = await ActivityEnvironment().run(
        acts.list_devices, ListDevicesInput(account="default", pool="p1")
    )
    await acts.aclose()
    [device] = result.devices
    assert device.reason == "proxy login failed for password **********"
    assert device.labels == {"pool": "p1"}  # ids and labels are matched on: left as they are


def test_the_scrubber_knows_only_what_it_was_given_and_never_shows_it() -> None:
    scrubber = Scrubber.of(accounts=ACCOUNTS.values(), proxy_pools=PROXY_POOLS.values())
    for secret in SECRETS:
        assert secret not in repr(scrubber)
        for form in encodings(secret):
            assert scrubber.scrub(f"a {form} b") == "a ********** b", form
    assert scrubber.scrub("nothing secret here") == "nothing secret here"
    # An unset password (a proxy pool without one) is no secret: nothing is scrubbed for it.
    assert Scrubber([SecretStr(""), ""]).scrub("text") == "text"


async def test_the_workers_scrubber_reaches_every_client() -> None:
    # A secret the worker holds that these activities do not (a BitBrowser key, later).
    elsewhere = "bitbrowser-key-5550123"
    acts = DeviceActivities(
        accounts=ACCOUNTS,
        proxy_pools=PROXY_POOLS,
        transport=httpx.MockTransport(lambda request: problem(400, f"known: {elsewhere}")),
        scrubber=Scrubber([SecretStr(elsewhere)]),
    )
    with pytest.raises(ApplicationError) as info:
        await ActivityEnvironment().run(acts.create_device, create_input())
    await acts.aclose()
    assert elsewhere not in str(info.value)
    assert info.value.message.endswith("known: **********")
