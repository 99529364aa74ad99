"""What a refused Local API call raises: the house's `ProviderError` tree, plus the raw `msg`.

The Local API answers HTTP 200 `{"success": false, "msg": "..."}` with free
text (Chinese, now and then English) and no code. `classify` reads the text by
substring into one `Refusal` kind; each kind raises a subclass of the shared
tree (`activities.errors`), so the engine's retry rules hold unchanged, and
every one keeps the text as the vendor wrote it in `raw_msg` (scrubbed of
secrets) for the pool's conditions::

    Refusal          raises                   ErrorType          retryable
    NOT_FOUND        LocalApiNotFoundError    NOT_FOUND          no
    BUSY             LocalApiBusyError        INVALID_STATE      no (the caller waits, or resets)
    STATE            LocalApiStateError       INVALID_STATE      no (a phone that is off)
    AUTH             LocalApiAuthError        UNAUTHENTICATED    no
    RATE_LIMITED     LocalApiRateLimitedError RATE_LIMITED       yes, after `retry_after`
    INVALID          LocalApiInvalidError     INVALID_ARGUMENT   no
    QUOTA            LocalApiQuotaError       QUOTA_EXCEEDED     no
    UNAVAILABLE      LocalApiUnavailableError SERVER_ERROR       yes
    UNKNOWN          LocalApiRefusedError     SERVER_ERROR       yes
    (not a refusal)  CloseUnconfirmedError    TEARDOWN_PENDING   yes (closed, process still alive)

Besides refusals: HTTP 401/403 are `AUTH` whatever the body; 429 is
`RATE_LIMITED` (its `Retry-After`); 5xx and an answer that is not the
envelope are `ServerError`; no answer is `TransportError` /
`TransportTimeoutError`; an unknown path (HTTP 404, or 接口不存在) is
`LocalApiUnsupportedError` (INVALID_ARGUMENT: the desktop client is older than
the call), never `NOT_FOUND`, which callers read as "the object is gone". Why
UNKNOWN is retried: docs/providers.md, "BitBrowser's Local API".
"""

from __future__ import annotations

from enum import StrEnum

from devicepool.activities.errors import (
    InvalidArgumentError,
    InvalidStateError,
    NotFoundError,
    ProviderError,
    QuotaExceededError,
    RateLimitedError,
    ServerError,
    UnauthenticatedError,
)
from devicepool.api.errors import ErrorType


class Refusal(StrEnum):
    """What a refusal's free text says, read by substring (`classify`)."""

    NOT_FOUND = "not_found"
    BUSY = "busy"
    STATE = "state"
    AUTH = "auth"
    RATE_LIMITED = "rate_limited"
    INVALID = "invalid"
    QUOTA = "quota"
    UNAVAILABLE = "unavailable"
    UNKNOWN = "unknown"


# Checked in this order; the first kind with a substring in the text wins. The order
# matters where texts overlap: 鉴权失败：x-api-key 不正确 is AUTH (not INVALID), 接口不存在
# (unknown path) is not NOT_FOUND, 当前有其他窗口正在打开 is BUSY (not NOT_FOUND).
# The vendor's own texts (DESIGN.md) are 请选择代理方式, 正在打开中, 关闭中; the rest are the
# short words such texts are built from, in Chinese and in English (the vendor's English
# docs show `Id is required`).
_UNSUPPORTED = ("接口不存在", "not supported", "no such api")
_SUBSTRINGS: tuple[tuple[Refusal, tuple[str, ...]], ...] = (
    (
        Refusal.AUTH,
        ("鉴权", "认证", "授权", "api-key", "apikey", "api key", "unauthorized", "forbidden"),
    ),
    (
        Refusal.RATE_LIMITED,
        ("频繁", "限流", "过多", "每秒", "too many", "rate limit", "too frequent"),
    ),
    (
        Refusal.BUSY,
        (
            "打开中",
            "正在打开",
            "关闭中",
            "正在关闭",
            "使用中",
            "其他设备",
            "已打开",
            "opening",
            "closing",
            "in use",
        ),
    ),
    (Refusal.STATE, ("未开机", "未启动", "未运行", "not running", "not powered", "powered off")),
    (Refusal.QUOTA, ("已用完", "额度", "余额不足", "quota", "insufficient balance")),
    (Refusal.NOT_FOUND, ("不存在", "已被删除", "已删除", "not exist", "not found")),
    (
        Refusal.UNAVAILABLE,
        ("繁忙", "启动失败", "超时", "请重试", "稍后", "busy", "timeout", "try again"),
    ),
    (
        Refusal.INVALID,
        (
            "请选择",
            "必传",
            "必填",
            "参数",
            "格式",
            "不正确",
            "不完整",
            "不可修改",
            "缺少",
            "最多",
            "required",
            "missing",
            "invalid",
            "must",
        ),
    ),
)


def classify(msg: str) -> Refusal:
    """The kind of a refusal's `msg` (case-insensitive for the English words)."""
    text = msg.lower()
    for kind, needles in _SUBSTRINGS:
        if any(needle in text for needle in needles):
            return kind
    return Refusal.UNKNOWN


class LocalApiError(ProviderError):
    """A Local API call failed: its refusal kind and the vendor's text (scrubbed) kept."""

    raw_msg: str = ""
    refusal: Refusal = Refusal.UNKNOWN


class LocalApiNotFoundError(LocalApiError, NotFoundError):
    """The profile or phone is not known (deleted, or never made)."""


class LocalApiBusyError(LocalApiError, InvalidStateError):
    """The profile is opening, closing, in use, or open on another node.

    Not retried blindly: a profile stuck opening or closing stays so until
    `/browser/closing/reset`; the caller confirms with `pids/alive` and decides.
    """


class LocalApiStateError(LocalApiError, InvalidStateError):
    """The call does not fit the object's state (suspend or restart of a phone that is off)."""


class LocalApiAuthError(LocalApiError, UnauthenticatedError):
    """The `x-api-key` is missing or wrong (any refusal of the key, any status)."""


class LocalApiRateLimitedError(LocalApiError, RateLimitedError):
    """Past the Local API's budget (the cloud-phone family: 1 request a second)."""


class LocalApiInvalidError(LocalApiError, InvalidArgumentError):
    """The body was refused (a missing or wrong field, a field that cannot change)."""


class LocalApiUnsupportedError(LocalApiError, InvalidArgumentError):
    """The desktop client does not know this call (an unknown path: too old a client)."""


class LocalApiQuotaError(LocalApiError, QuotaExceededError):
    """A quota is used up (`recover`: 60 fresh starts per profile per month)."""


class LocalApiUnavailableError(LocalApiError, ServerError):
    """The desktop client says it is busy, or a browser failed to start: try again."""


class LocalApiRefusedError(LocalApiError, ServerError):
    """A refusal whose text matched no known kind (retried; its text kept for conditions)."""


class CloseUnconfirmedError(ProviderError):
    """`close` answered, but the browser's process was still alive when the wait ran out."""

    def __init__(self, detail: str) -> None:
        # TEARDOWN_PENDING: retryable, "on its way out, try again" (api.errors).
        super().__init__(ErrorType.TEARDOWN_PENDING, None, detail)


# Each class's `default_error_type` is the `ErrorType` it raises (the table above).
_CLASSES: dict[Refusal, type[LocalApiError]] = {
    Refusal.NOT_FOUND: LocalApiNotFoundError,
    Refusal.BUSY: LocalApiBusyError,
    Refusal.STATE: LocalApiStateError,
    Refusal.AUTH: LocalApiAuthError,
    Refusal.RATE_LIMITED: LocalApiRateLimitedError,
    Refusal.INVALID: LocalApiInvalidError,
    Refusal.QUOTA: LocalApiQuotaError,
    Refusal.UNAVAILABLE: LocalApiUnavailableError,
    Refusal.UNKNOWN: LocalApiRefusedError,
}

# A refusal of the phone budget without a `Retry-After`: the budget's window is one second.
DEFAULT_RATE_LIMIT_RETRY_AFTER = 1.0


def refusal_error(
    call: str,
    msg: str,
    *,
    status: int | None = 200,
    kind: Refusal | None = None,
    retry_after: float | None = None,
) -> LocalApiError:
    """The typed error for a refusal of `call` whose (already scrubbed) text is `msg`.

    `kind` overrides the reading of the text (an HTTP 401/403 is AUTH whatever it says).
    """
    if kind is None and any(needle in msg.lower() for needle in _UNSUPPORTED):
        return unsupported_error(call, msg, status)
    kind = classify(msg) if kind is None else kind
    cls = _CLASSES[kind]
    if kind is Refusal.RATE_LIMITED and retry_after is None:
        retry_after = DEFAULT_RATE_LIMIT_RETRY_AFTER
    return _kept(cls(cls.default_error_type, status, _detail(call, msg), retry_after), msg, kind)


def unsupported_error(call: str, msg: str, status: int | None) -> LocalApiError:
    """An unknown path: the desktop client is older than the call (never NOT_FOUND)."""
    error = LocalApiUnsupportedError(
        ErrorType.INVALID_ARGUMENT, status, _detail(call, msg or "unknown path")
    )
    return _kept(error, msg, Refusal.INVALID)


def _kept(error: LocalApiError, msg: str, refusal: Refusal) -> LocalApiError:
    error.raw_msg, error.refusal = msg, refusal
    return error


def _detail(call: str, msg: str) -> str:
    shown = " ".join(msg.split()) or "(no msg)"
    return f"{call} refused: {shown[:500]}"
