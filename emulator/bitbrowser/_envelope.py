"""The Local API's answer envelope and its refusals.

Every answer is HTTP 200 with `{"success": true, "data": ...}` (`data` left out
when a call has nothing to say) or `{"success": false, "msg": "..."}`, `msg`
being Chinese free text without a code. `LocalApiError` is such a refusal,
raised anywhere and rendered by the app; its `status` is 200 except where the
emulator chose otherwise (a refused key: 403; past the cloud-phone rate limit
in `http429` mode: 429; an unknown path: 404).

The texts live here, in one catalogue, so tests and docs name the same words.
A client classifies them by substring, as it must with the real client.
"""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse


class NoData:
    """Marker: a successful call whose envelope carries no `data`."""


NO_DATA = NoData()

# ---------------------------------------------------------------- the texts

BAD_JSON = "参数格式错误，请以 JSON 格式的 body 传参"
NOT_POST = "请求方式错误，接口只支持 POST 请求"
NO_SUCH_PATH = "接口不存在"
AUTH_MISSING = "API 鉴权失败：请求头缺少 x-api-key"
AUTH_WRONG = "API 鉴权失败：x-api-key 不正确"
BUSY = "系统繁忙，请稍后再试"

ID_REQUIRED = "窗口 id 必传"
IDS_REQUIRED = "ids 必传，且为窗口 id 数组"
TOO_MANY_IDS = "一次最多操作 100 个窗口"
PROFILE_NOT_FOUND = "窗口不存在或已被删除"
PROXY_METHOD_REQUIRED = "请选择代理方式"
PROXY_TYPE_REQUIRED = "请选择代理类型"
FINGERPRINT_REQUIRED = "browserFingerPrint 指纹对象必传"
GROUP_NOT_FOUND = "分组不存在"
GROUP_NAME_REQUIRED = "分组名称必传"
PAGE_REQUIRED = "page 参数必传，从 0 开始"
BAD_FIELD = "参数错误"
REPLACE_NEEDS_WHOLE_RECORD = "修改窗口需要传入完整的窗口数据，缺少字段：{missing}；只修改部分字段请使用 /browser/update/partial"

OPENING = "窗口正在打开中，请稍后再试"
CLOSING = "窗口正在关闭中，请稍后再试"
OPEN_IN_FLIGHT = "当前有其他窗口正在打开，请稍后再试，或以队列方式（queue: true）打开"
OPEN_ELSEWHERE = "该窗口已在其他设备上打开"
OPEN_FAILED = "浏览器启动失败，请重试"
OPEN_TIMED_OUT = "打开窗口超时"
IN_USE = "窗口正在使用中，请先关闭窗口，等待进程退出后再删除"

PHONE_ID_REQUIRED = "云手机环境 id 必传"
PHONE_NOT_FOUND = "云手机环境不存在"
PHONE_RATE_LIMITED = "请求过于频繁，云手机接口每秒最多请求 {limit} 次"
PHONE_REGION_REQUIRED = "请选择算力类型（regionId）"
PHONE_REGION_UNKNOWN = "算力类型不存在"
PHONE_REGION_FROZEN = "算力类型（regionId）不可修改"
PHONE_COMPUTE_TYPE = "computeType 参数错误，可选值 0、1、2"
PHONE_PROXY_REQUIRED = "代理信息不完整：{field} 必传"
PHONE_TOO_LONG = "{field} 最多 {limit} 个字符"
PHONE_NOT_ON = "云手机未开机"
PHONE_RECOVER_QUOTA = "本月一键新机次数已用完，下月重置"
PHONE_IDS_REQUIRED = "phoneIds 必传，且为云手机环境 id 数组"


class LocalApiError(Exception):
    """A refusal: `{"success": false, "msg": msg}` with HTTP `status` (200 unless chosen)."""

    def __init__(self, msg: str, *, status: int = 200, headers: dict[str, str] | None = None):
        super().__init__(msg)
        self.msg = msg
        self.status = status
        self.headers = headers or {}


def ok(data: Any = NO_DATA) -> JSONResponse:
    body: dict[str, Any] = {"success": True}
    if not isinstance(data, NoData):
        body["data"] = data
    return JSONResponse(body)


def refusal(error: LocalApiError) -> JSONResponse:
    return JSONResponse(
        {"success": False, "msg": error.msg}, status_code=error.status, headers=error.headers
    )
