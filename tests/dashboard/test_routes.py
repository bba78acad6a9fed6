"""The dashboard's routes in process: the page, its files, its JSON feed."""

from __future__ import annotations

from typing import Any

from aiohttp.test_utils import TestClient


async def test_the_page_and_its_files_are_served_with_a_strict_csp(
    app_client: TestClient[Any, Any],
) -> None:
    page = await app_client.get("/dashboard")
    assert page.status == 200 and page.content_type == "text/html"
    assert "default-src 'self'" in page.headers["Content-Security-Policy"]
    html = await page.text()
    for name, kind in (("dashboard.js", "text/javascript"), ("dashboard.css", "text/css")):
        assert f"/dashboard/static/{name}" in html
        asset = await app_client.get(f"/dashboard/static/{name}")
        assert asset.status == 200 and asset.content_type == kind


async def test_an_unknown_file_is_an_openai_style_404(app_client: TestClient[Any, Any]) -> None:
    for path in ("/dashboard/static/secret.py", "/dashboard/static/..%2Fsnapshot.py"):
        response = await app_client.get(path)
        assert response.status == 404
        assert (await response.json())["error"]["request_id"].startswith("req_")


async def test_data_json_of_a_fresh_gateway(app_client: TestClient[Any, Any]) -> None:
    response = await app_client.get("/dashboard/data.json")
    assert response.status == 200 and response.headers["Cache-Control"] == "no-store"
    data = await response.json()
    assert data["requests"] == 0 and data["hit_rate"] is None and data["lanes"] == []
    assert {b["channel"] for b in data["breakers"]} == {"light-c", "heavy-c"}
    assert all(b["state"] == "closed" for b in data["breakers"])
