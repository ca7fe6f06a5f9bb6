"""The dashboard in headless Chromium against two real clusters: it shows each mirror and its
partitions' states, follows a state change made through the API, stops a mirror from the page
(button, confirmation) with the effect checked through Describe, and asks for the bearer token
when the API answers 401. Screenshots at laptop and phone widths are kept in the test's tmp
dir (docs/images/dashboard.png is one of them)."""

from __future__ import annotations

import httpx
import pytest
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By

from kcore.testing import EmbeddedCluster

from .browser import chromium, screenshot, wait
from .mirror_http import (
    CONFIG,
    finished,
    partitions_of,
    produce,
    source_and_destination,
    wait_in_sync,
    wait_states,
)

pytestmark = pytest.mark.timeout(400)


# The destination copies slowly, so the page has lag to chart between its polls.
THROTTLE = {"mirror.replication.throttled.rate": "25000"}


@pytest.fixture(scope="module")
def clusters():
    with source_and_destination(THROTTLE) as both:
        yield both


def _states(driver, mirror: str) -> dict[str, str]:
    """``topic-partition -> state`` as the page shows them (re-read if it re-rendered)."""
    try:
        rows = driver.find_elements(By.CSS_SELECTOR, f'[data-mirror="{mirror}"] tr[data-partition]')
        return {r.get_attribute("data-partition"): r.find_element(By.CSS_SELECTOR, ".state").text
                for r in rows}  # fmt: skip
    except StaleElementReferenceException:
        return {}


def _shows(driver, mirror: str, state: str, count: int):
    def check(d):
        seen = _states(d, mirror)
        return len(seen) == count and set(seen.values()) == {state}

    wait(driver, check, f"{count} partitions of {mirror} {state} on the page")


def _click(driver, selector: str) -> None:
    def clicked(d):
        try:
            button = d.find_element(By.CSS_SELECTOR, selector)
            if not button.is_enabled() or not button.is_displayed():
                return False
            button.click()
            return True
        except StaleElementReferenceException:  # the page re-rendered under us: again
            return False

    wait(driver, clicked, f"click {selector}")


def _copying(driver) -> bool:
    """The page shows the destination holding every record (1,240) and copying them."""
    try:
        rate = driver.find_element(By.CSS_SELECTOR, '[data-stat="throughput"]').text
        leos = driver.find_elements(By.CSS_SELECTOR, '[data-mirror="dr-east"] td.leo')
        total = sum(int(td.text.replace(",", "")) for td in leos)
    except (StaleElementReferenceException, ValueError):
        return False
    return total == 1240 and rate.endswith("rec/s") and not rate.startswith("0.0")


def test_the_dashboard_shows_follows_and_stops_a_mirror(clusters, tmp_path):
    source, destination = clusters
    source.create_topic("orders", 3)
    source.create_topic("payments", 2)
    produce(source.bootstrap_servers, "orders", 300, partitions=3)
    produce(source.bootstrap_servers, "payments", 40, partitions=2)
    with httpx.Client(base_url=destination.admin_url, timeout=60) as http:
        body = {"name": "dr-east", "bootstrap_servers": source.bootstrap_servers}
        assert http.post("/v1/mirrors", json=body).status_code == 201
        topics = {"topics": ["orders", "payments"]}
        finished(http, http.post("/v1/mirrors/dr-east/start", json=topics))
        wait_in_sync(http, "dr-east", 5)

        with chromium(tmp_path / "profile") as driver:
            driver.get(destination.admin_url + "/")
            _shows(driver, "dr-east", "MIRRORING", 5)
            source_text = driver.find_element(By.CSS_SELECTOR, '[data-mirror="dr-east"]').text
            assert source.bootstrap_servers in source_text
            # The cluster panel shows what /v1/cluster and /v1/topics answer.
            cluster = http.get("/v1/cluster").json()
            topics = [t for t in http.get("/v1/topics").json()["topics"] if not t["internal"]]
            expected = {
                "cluster_id": cluster["cluster_id"],
                "brokers": str(cluster["broker_count"]),
                "controller": str(cluster["active_controller_id"]),
                "topics": str(len(topics)),
            }
            wait(
                driver,
                lambda d: (
                    {
                        v.get_attribute("data-field"): v.text
                        for v in d.find_elements(By.CSS_SELECTOR, "#cluster [data-field]")
                    }
                    == expected
                ),
                "the cluster panel filled in from /v1/cluster and /v1/topics",
            )

            # A change made elsewhere shows on the page at its next poll.
            finished(http, http.post("/v1/mirrors/dr-east/pause", json={"include": [".*"]}))
            _shows(driver, "dr-east", "PAUSED", 5)
            finished(http, http.post("/v1/mirrors/dr-east/resume", json={"include": [".*"]}))
            _shows(driver, "dr-east", "MIRRORING", 5)
            for i in range(3):  # records flowing, for the lag chart and throughput
                start = 1000 * (i + 1)
                produce(source.bootstrap_servers, "orders", 300, partitions=3, start=start, pad=200)
            wait_in_sync(http, "dr-east", 5)
            finished(http, http.post("/v1/mirrors/dr-east/pause", json={"topics": ["payments"]}))
            wait(driver, _copying, "the records copied, and their rate, on the page")
            wait(driver, lambda d: _states(d, "dr-east").get("payments-1") == "PAUSED", "paused")
            assert screenshot(driver, tmp_path / "dashboard.png", 1280).stat().st_size > 0
            assert screenshot(driver, tmp_path / "dashboard-phone.png", 390).stat().st_size > 0
            finished(http, http.post("/v1/mirrors/dr-east/resume", json={"topics": ["payments"]}))
            _shows(driver, "dr-east", "MIRRORING", 5)

            # Stop from the page: the button asks first; Cancel changes nothing.
            _click(driver, '[data-mirror="dr-east"] button[data-action="stop"]')
            dialog = driver.find_element(By.ID, "confirm")
            wait(driver, lambda d: dialog.is_displayed(), "the confirmation dialog")
            assert "dr-east" in driver.find_element(By.ID, "confirm-title").text
            driver.find_element(By.ID, "confirm-cancel").click()
            wait(driver, lambda d: not dialog.is_displayed(), "the dialog closed")
            assert {p["state"] for p in partitions_of(http, "dr-east").values()} == {"MIRRORING"}

            _click(driver, '[data-mirror="dr-east"] button[data-action="stop"]')
            wait(driver, lambda d: dialog.is_displayed(), "the confirmation dialog")
            driver.find_element(By.ID, "confirm-ok").click()
            wait_states(http, "dr-east", "STOPPED", 5)  # Describe says so
            _shows(driver, "dr-east", "STOPPED", 5)
            notice = driver.find_element(By.ID, "notice")
            wait(driver, lambda d: "done" in notice.text, "the stop's result on the page")
            assert "orders" in notice.text and "payments" in notice.text
            assert not driver.find_element(
                By.CSS_SELECTOR, '[data-mirror="dr-east"] button[data-action="stop"]'
            ).is_enabled()


def test_the_dashboard_asks_for_the_token(tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text("User:ops s3cret\n")
    config = {**CONFIG, "admin.auth.token.file": str(tokens)}
    with EmbeddedCluster(config=config, admin=True) as cluster:
        auth = {"Authorization": "Bearer s3cret"}
        with httpx.Client(base_url=cluster.admin_url, timeout=60, headers=auth) as http:
            # A mirror of the cluster into itself: enough for the page to have one to show.
            body = {"name": "loop", "bootstrap_servers": cluster.bootstrap_servers}
            assert http.post("/v1/mirrors", json=body).status_code == 201
        with chromium(tmp_path / "profile") as driver:
            driver.get(cluster.admin_url + "/")
            prompt = driver.find_element(By.ID, "token")
            wait(driver, lambda d: prompt.is_displayed(), "the token prompt")
            field = driver.find_element(By.ID, "token-input")
            field.send_keys("wrong")
            driver.find_element(By.ID, "token-ok").click()
            refused = driver.find_element(By.ID, "token-error")
            wait(driver, lambda d: prompt.is_displayed() and refused.is_displayed(), "refused")
            field.send_keys("s3cret")
            driver.find_element(By.ID, "token-ok").click()
            wait(
                driver,
                lambda d: d.find_elements(By.CSS_SELECTOR, '[data-mirror="loop"]'),
                "the mirror, once the token is given",
            )
            assert not prompt.is_displayed()
            kept = driver.execute_script("return sessionStorage.getItem('kcore.admin.token')")
            assert kept == "s3cret"
            screenshot(driver, tmp_path / "dashboard-token.png", 1280)
