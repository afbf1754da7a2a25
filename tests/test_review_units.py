"""Weekly review: ISO weeks, the driver decomposition, formatting, schedule and delivery."""

from __future__ import annotations

import json
import math
import socket
import threading
from datetime import date, datetime, timezone
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from app.review import fmt
from app.review.drivers import Factor, decompose, log_mean, segment_factors
from app.review.model import Figure
from app.review.schedule import SmtpTarget, deliver, next_run
from app.review.weeks import BadWeek, IsoWeek, last_complete_week, parse_week, week_of


def test_iso_week_bounds_and_previous():
    w = parse_week("2026-W48")
    assert w.start == datetime(2026, 11, 23, tzinfo=timezone.utc)
    assert w.end == datetime(2026, 11, 30, tzinfo=timezone.utc)
    assert w.previous() == IsoWeek(2026, 47)
    assert w.previous().start == datetime(2026, 11, 16, tzinfo=timezone.utc)
    # 2026 has 53 ISO weeks (Dec 28 2026 is in W53); 2027-W01 starts Monday 2027-01-04.
    assert parse_week("2027-W01").previous().label == "2026-W53"
    assert parse_week("2027-W01").start == datetime(2027, 1, 4, tzinfo=timezone.utc)
    # 2025-W01 starts in December 2024.
    assert parse_week("2025w1").start == datetime(2024, 12, 30, tzinfo=timezone.utc)
    assert week_of(datetime(2026, 11, 29, 23, 59)).label == "2026-W48"
    assert week_of(date(2026, 11, 30)).label == "2026-W49"
    assert last_complete_week(datetime(2026, 11, 30, 6, 0)).label == "2026-W48"


@pytest.mark.parametrize("text, message", [
    ("2026-48", "expected YYYY-Www"),
    ("", "expected YYYY-Www"),
    ("2025-W53", "2025 has ISO weeks 1..52"),
    ("2026-W00", "1..53"),
    ("last week", "not an ISO week"),
])
def test_bad_week_strings_are_clear(text, message):
    with pytest.raises(BadWeek, match=message):
        parse_week(text)


def test_figure_wow():
    assert Figure(1.1, 1.0).wow == pytest.approx(0.1)
    assert Figure(0.5, 1.0).delta == -0.5
    assert Figure(1.0, 0.0).wow is None
    assert Figure(None, 1.0).wow is None


def test_lmdi_decomposition_is_exact_and_hand_checked():
    # cost = volume x price: 100 tasks at $2 -> 120 tasks at $2.5; $200 -> $300.
    factors = [Factor("volume", "tasks", 120, 100), Factor("price", "USD", 2.5, 2.0)]
    drivers, residual = decompose(300.0, 200.0, factors)
    weight = (300 - 200) / (math.log(300) - math.log(200))  # 246.6303...
    assert weight == pytest.approx(246.630346, rel=1e-6)
    assert drivers[0].contribution_usd == pytest.approx(weight * math.log(1.2))  # 44.966
    assert drivers[1].contribution_usd == pytest.approx(weight * math.log(1.25))  # 55.034
    assert drivers[0].contribution_usd == pytest.approx(44.9660, abs=1e-3)
    assert residual == 0.0
    assert sum(d.contribution_usd for d in drivers) == pytest.approx(100.0)
    assert log_mean(3.0, 3.0) == 3.0


def test_decompose_new_segment_goes_to_fallback():
    drivers, residual = decompose(50.0, 0.0, [Factor("volume", "tasks", 10, 0), Factor("price", "USD", 5, None)],
                                  fallback="volume")
    assert drivers[0].contribution_usd == 50.0 and drivers[1].contribution_usd == 0.0 and residual == 0.0
    drivers, residual = decompose(50.0, 0.0, [Factor("price", "USD", 5, None)])
    assert residual == 50.0


def test_segment_factors_multiply_to_cost_and_explain_price():
    # Week 0: 90 of 100 tasks succeed, 150 calls, 300k tokens, $1/GPU-h, cost $30.
    # Week 1: same work, price doubled: cost $60. Everything but price is flat.
    kw = dict(succ_last=90, tasks_last=100, calls_last=150, tokens_last=300_000, price_last=1.0, cost_last=30.0,
              succ_this=90, tasks_this=100, calls_this=150, tokens_this=300_000, price_this=2.0, cost_this=60.0)
    factors = segment_factors(**kw)
    for side in ("this", "last"):
        product = math.prod(getattr(f, f"value_{side}") for f in factors)
        assert product == pytest.approx(kw[f"cost_{side}"])
    drivers, residual = decompose(60.0, 30.0, factors)
    by = {d.name: d.contribution_usd for d in drivers}
    assert by["price"] == pytest.approx(30.0)
    assert all(abs(v) < 1e-9 for k, v in by.items() if k != "price")
    failure = next(d for d in drivers if d.name == "failure rate")
    assert failure.this == pytest.approx(0.1)


def test_formatting():
    assert fmt.usd(1234.5) == "$1,234.50"
    assert fmt.usd(0.01234) == "$0.0123"
    assert fmt.usd(None) == "—"
    assert fmt.wow(0.1234) == "+12.3 %"
    assert fmt.wow(None) == "n/a"
    assert fmt.pct(0.5) == "50.0 %"
    assert fmt.tokens(2_500_000) == "2.50 M"
    assert fmt.seconds(3725) == "1 h 02 min"
    assert fmt.usd_delta(-0.004) == "-$0.00400"
    assert fmt.usd_delta(12.3) == "+$12.30"


@pytest.mark.parametrize("value, shown", [
    (0.0042, "$0.00420"), (0.01234, "$0.0123"), (0.25, "$0.2500"), (1234.5, "$1,234.50"), (0, "$0.00"),
    (-2, "-$2.00"), (None, "—"), (float("nan"), "—"), (float("inf"), "—"),
])
def test_the_review_and_the_dashboard_print_money_alike(value, shown):
    from app import fmt as dashboard_fmt

    assert fmt.usd(value) == dashboard_fmt.usd(value) == shown


def test_next_run_is_next_monday_morning():
    assert next_run(datetime(2026, 11, 29, 12, 0)) == datetime(2026, 11, 30, 6, 0, tzinfo=timezone.utc)
    # exactly at the run time: the next one is a week later
    assert next_run(datetime(2026, 11, 30, 6, 0)) == datetime(2026, 12, 7, 6, 0, tzinfo=timezone.utc)
    assert next_run(datetime(2026, 11, 30, 5, 59)) == datetime(2026, 11, 30, 6, 0, tzinfo=timezone.utc)
    assert next_run(datetime(2026, 11, 30, 7, 0), weekday=2, hour=9) == datetime(2026, 12, 2, 9, 0, tzinfo=timezone.utc)
    with pytest.raises(ValueError, match="weekday"):
        next_run(datetime(2026, 11, 30), weekday=7)


class _Hook(BaseHTTPRequestHandler):
    received: list = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        _Hook.received.append(json.loads(body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


class _FakeSmtp(threading.Thread):
    """A minimal SMTP server on 127.0.0.1 (just enough of RFC 5321 for smtplib) that keeps the DATA."""

    def __init__(self):
        super().__init__(daemon=True)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(1)
        self.port = self.sock.getsockname()[1]
        self.data = b""
        self.rcpt: list[str] = []

    def run(self):
        conn, _ = self.sock.accept()
        f = conn.makefile("rb")
        conn.sendall(b"220 fake ESMTP\r\n")
        while True:
            line = f.readline()
            if not line:
                break
            cmd = line.decode().strip().upper()
            if cmd.startswith("EHLO") or cmd.startswith("HELO"):
                conn.sendall(b"250-fake\r\n250 8BITMIME\r\n")
            elif cmd.startswith("RCPT"):
                self.rcpt.append(line.decode().strip())
                conn.sendall(b"250 ok\r\n")
            elif cmd == "DATA":
                conn.sendall(b"354 go\r\n")
                while (chunk := f.readline()) != b".\r\n":
                    self.data += chunk
                conn.sendall(b"250 queued\r\n")
            elif cmd == "QUIT":
                conn.sendall(b"221 bye\r\n")
                break
            else:
                conn.sendall(b"250 ok\r\n")
        conn.close()
        self.sock.close()


def test_deliver_by_webhook_and_smtp(tmp_path):
    html = tmp_path / "r.html"
    md = tmp_path / "r.md"
    html.write_text("<html><body>CPST $1.23</body></html>")
    md.write_text("# Weekly cost review 2026-W48\nCPST $1.23\n")
    server = HTTPServer(("127.0.0.1", 0), _Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    smtp = _FakeSmtp()
    smtp.start()
    _Hook.received.clear()
    try:
        result = deliver(html, md, week="2026-W48", title="Weekly cost review 2026-W48",
                         webhook_url=f"http://127.0.0.1:{server.server_address[1]}/hook",
                         smtp=SmtpTarget(host="127.0.0.1", port=smtp.port, starttls=False, to=("finance@example.com",)))
    finally:
        server.shutdown()
    smtp.join(timeout=10)
    assert result.results == {"webhook": "ok", "smtp": "ok"}
    assert _Hook.received[0]["week"] == "2026-W48"
    assert "CPST $1.23" in _Hook.received[0]["text"]
    assert "finance@example.com" in smtp.rcpt[0]
    assert b"Subject: Weekly cost review 2026-W48" in smtp.data
    assert b"text/html" in smtp.data and b"r.html" in smtp.data


def test_deliver_reports_failures_and_bad_settings(tmp_path):
    html = tmp_path / "r.html"
    md = tmp_path / "r.md"
    html.write_text("x")
    md.write_text("x")
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # nothing listens there now
    result = deliver(html, md, week="2026-W48", title="t", webhook_url=f"http://127.0.0.1:{port}/",
                     smtp=SmtpTarget(host="", to=()), timeout_s=2)
    assert not result.ok
    assert result.results["webhook"].startswith("ConnectError")
    assert "SMTP host is empty" in result.results["smtp"] and "no SMTP recipient" in result.results["smtp"]
    with pytest.raises(ValueError, match="http"):
        deliver(html, md, week="w", title="t", webhook_url="ftp://x")


def test_levers_hand_computed():
    import pandas as pd

    from app.review.levers import avoid_lever, delay_lever, move_lever, share_lever

    # avoid: r2 hits 30 % of prompt tokens, r1 10 %; r1's $7 of prefill at r2's hit rate would have
    # needed 0.7 / 0.9 of its uncached tokens: saving 7 x (1 - 0.7/0.9) = $1.5556.
    pc = pd.DataFrame({"replica": ["r1", "r2"], "hit_tokens": [100.0, 300.0], "query_tokens": [1000.0, 1000.0]})
    prefill = pd.DataFrame({"replica": ["r1", "r2"], "allocated_usd": [20.0, 20.0], "prefill_usd": [7.0, 5.0],
                            "prompt_tok": [0, 0], "cached_tok": [0, 0]})
    avoid = avoid_lever(pc, prefill)
    assert avoid.measured == pytest.approx(0.2)
    assert avoid.saving_usd == pytest.approx(7 * (1 - 0.7 / 0.9))
    assert avoid.saving_usd == pytest.approx(1.5556, abs=1e-4)
    assert avoid_lever(pd.DataFrame(), prefill).saving_usd is None  # nothing measured, nothing guessed

    # share: H100 r1 + r2 carry 2 + 1 running requests; the largest p95 batch seen is 8 -> 1 replica
    # needed of 2 -> half of their $20 spend; the lone A100 stays. Mean running per replica = 2.
    occ = pd.DataFrame({"replica": ["r1", "r2", "r3"], "gpu_type": ["H100", "H100", "A100"],
                        "running_mean": [2.0, 1.0, 3.0], "running_p95": [8.0, 4.0, 6.0],
                        "running_points": [10, 10, 10], "waiting_mean": [1.0, 0.0, 0.5], "waiting_points": [10, 10, 10]})
    by_replica = pd.DataFrame({"grp": ["r1", "r2", "r3"], "spend_usd": [10.0, 10.0, 20.0],
                               "tokens": [3e6, 1e6, 2e6]})
    share = share_lever(occ, by_replica)
    assert share.measured == pytest.approx(2.0) and share.saving_usd == pytest.approx(10.0)

    # move: r1 and r2 serve model m on H100 with 3M and 1M tokens for $10 each: group rate $5 per 1M;
    # r2 paid $10 for $5 of balanced work -> $5; busiest / mean = 3M / 2M = 1.5.
    load = pd.DataFrame({"replica": ["r1", "r2"], "model_name": ["m", "m"], "gpu": ["H100", "H100"],
                         "requests": [100, 300], "queue_mean_s": [0.5, 0.1], "queue_p95_s": [2.0, 0.3],
                         "queued_over_threshold": [10, 0]})
    routing = pd.DataFrame({"kind": ["policy", "policy", "admission"], "name": ["least_loaded", "session_affinity", "rejected"],
                            "n": [30, 10, 4], "replicas": [2, 2, 0], "failed": [0, 0, 0]})
    move = move_lever(by_replica, load, routing)
    assert move.measured == pytest.approx(1.5) and move.saving_usd == pytest.approx(5.0)
    assert ("affinity routing", "25.0 % of gateway attempts") in move.detail

    # delay: request-weighted queue time (100 x 0.5 + 300 x 0.1) / 400 = 0.2 s; overload waste =
    # timeout $1.50 + http.429 $0.50 (http.500 is an engine fault, not overload).
    errors = pd.DataFrame({"error_type": ["http.500", "timeout", "http.429", ""], "usd": [3.0, 1.5, 0.5, 9.0],
                           "calls": [3, 2, 1, 5]})
    delay = delay_lever(load, occ, errors, routing)
    assert delay.measured == pytest.approx(0.2) and delay.saving_usd == pytest.approx(2.0)
    assert ("admission rejected", "4") in delay.detail


def test_weekly_scheduler_runs_the_due_week_and_stops(store, tmp_path):
    from app.review.schedule import WeeklyScheduler

    server = HTTPServer(("127.0.0.1", 0), _Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Hook.received.clear()
    monday = datetime(2026, 11, 30, 6, 0, tzinfo=timezone.utc)  # a run is due right now
    scheduler = WeeklyScheduler(store, tmp_path, webhook_url=f"http://127.0.0.1:{server.server_address[1]}/",
                                clock=lambda: monday)
    try:
        scheduler.start()
        for _ in range(600):  # wait for the one run (not a timing assertion: bounded polling)
            if scheduler.stats.runs or scheduler.stats.failures:
                break
            threading.Event().wait(0.1)
    finally:
        scheduler.stop()
        server.shutdown()
    assert scheduler.stats.failures == 0, scheduler.stats.last_error
    assert scheduler.stats.runs == 1 and scheduler.stats.last_week == "2026-W48"
    assert scheduler.stats.next_run_at == datetime(2026, 12, 7, 6, 0, tzinfo=timezone.utc)
    md = (tmp_path / "infercost-review-2026-W48.md").read_text()
    assert "nothing to review" in md  # an empty store: the short report, not an error
    assert _Hook.received[0]["week"] == "2026-W48"
    with pytest.raises(ValueError, match="hour"):
        WeeklyScheduler(store, tmp_path, hour=24)


def test_scheduler_from_settings(tmp_path):
    from infercost.commands.review import delivery_from_settings, scheduler_from_settings
    from infercost.settings import load_settings

    store = object()  # the scheduler touches the store only when it runs

    assert scheduler_from_settings(store, load_settings(data_dir=tmp_path)) is None  # off by default
    settings = load_settings(data_dir=tmp_path, review_schedule=True, review_weekday=2, review_hour=7,
                             review_smtp_host="mail.example.com", review_smtp_to="a@example.com, b@example.com")
    scheduler = scheduler_from_settings(store, settings)
    assert scheduler.when == (2, 7, 0) and scheduler.out_dir == tmp_path / "reviews"
    assert scheduler.smtp.to == ("a@example.com", "b@example.com") and scheduler.webhook_url is None
    with pytest.raises(ValueError, match="no SMTP recipient"):
        scheduler_from_settings(store, load_settings(review_schedule=True, review_smtp_host="mail"))
    assert delivery_from_settings(load_settings(review_webhook_url="http://127.0.0.1:9/x"))[0] == "http://127.0.0.1:9/x"


def test_a_segment_with_no_success_this_week_puts_the_change_on_volume():
    # Last week 10 of 10 tasks succeeded for $20; this week 0 of 4 succeeded for $8: no log of zero
    # successes, so the whole -$12 is "volume" (of successful tasks), nothing hidden in the residual.
    factors = segment_factors(cost_this=8.0, cost_last=20.0, succ_this=0, succ_last=10, tasks_this=4, tasks_last=10,
                              calls_this=12, calls_last=10, tokens_this=4000, tokens_last=10_000,
                              price_this=2.0, price_last=2.0)
    drivers, residual = decompose(8.0, 20.0, factors, fallback="volume")
    by = {d.name: d for d in drivers}
    assert by["volume"].contribution_usd == -12.0 and residual == 0.0
    assert by["failure rate"].this == 1.0 and by["failure rate"].last == 0.0
    assert sum(d.contribution_usd for d in drivers) == -12.0


def test_dashboard_default_week_follows_a_pinned_time_range():
    from types import SimpleNamespace

    from app.review_page import default_week

    now = datetime(2026, 11, 29, 15, 0, tzinfo=timezone.utc)
    assert default_week(now) == "2026-W47"  # Sunday: the last complete week
    pinned = SimpleNamespace(live=False, end=datetime(2026, 11, 2, 11, 0, tzinfo=timezone.utc))
    assert default_week(now, pinned) == "2026-W45"  # a shared link to a past hour opens its week
    assert default_week(now, SimpleNamespace(live=True, end=now)) == "2026-W47"
    # a store younger than a week (a 1-day demo): the last complete week is empty, so the week in
    # progress opens; a pinned range and a last week with data keep their week
    only = {"2026-W48"}
    assert default_week(now, has_data=lambda w: w.label in only) == "2026-W48"
    assert default_week(now, pinned, has_data=lambda w: w.label in only) == "2026-W45"
    assert default_week(now, has_data=lambda w: True) == "2026-W47"
    assert default_week(now, has_data=lambda w: False) == "2026-W47"  # nothing anywhere: the usual week
    # a week of history backfilled on a Sunday afternoon (the 7-day demo): 9 h of it in W47, 159 h in W48
    hours = {"2026-W47": 9, "2026-W48": 159}
    assert default_week(now, has_data=lambda w: hours.get(w.label, 0)) == "2026-W48"
    # a fleet older than that: the complete week has more hours than the one in progress can
    assert default_week(now, has_data=lambda w: {"2026-W47": 168, "2026-W48": 159}.get(w.label, 0)) == "2026-W47"


def test_unlike_coverage_withholds_week_over_week_changes():
    """A week with ~25 h of data against a full one states its coverage and no WoW."""
    from datetime import datetime, timezone

    from app.review.model import Coverage, Figure, comparable
    from app.review.sections import coverage_blocks

    t0 = datetime(2026, 11, 23, tzinfo=timezone.utc)
    full = Coverage(168, 168.0, t0, t0, False)
    short = Coverage(25, 168.0, t0, t0, False)
    assert comparable(full, Coverage(160, 168.0, t0, t0, False))  # within 10 %
    assert not comparable(short, full) and not comparable(Coverage(168, 30.0, t0, t0, True), full)
    assert short.partial and not full.partial and short.share == pytest.approx(25 / 168)
    f = Figure(0.05, 0.6, comparable(short, full))
    assert f.wow is None and f.delta is None  # no "CPST -91.9 % WoW"
    assert Figure(0.05, 0.6).wow == pytest.approx(0.05 / 0.6 - 1)

    class R:  # the review fields coverage_blocks reads
        class week:
            label = "2026-W48"

        class previous:
            label = "2026-W47"
        coverage, coverage_last = short, full
    texts = [b.text for b in coverage_blocks(R)]
    assert "data in 25 of 168 hours (14.9 %, partial)" in texts[0]
    assert "data in 168 of 168 hours (100.0 %, complete)" in texts[0]
    assert texts[1].startswith("Week-over-week changes are withheld (the two weeks have data for different lengths")
    # a week without data gets its coverage line and no warning about comparing it
    R.coverage, R.coverage_last = Coverage(0, 168.0, None, None, False), Coverage(0, 168.0, None, None, False)
    texts = [b.text for b in coverage_blocks(R)]
    assert texts == ["2026-W48: no data. 2026-W47: no data."]


def test_markdown_review_escapes_what_it_quotes():
    """A task id, tenant or alert text quoted by the Markdown review stays text."""
    from markdown_it import MarkdownIt

    from app.review.render import _md_block
    from app.review.sections import Para, Table

    evil = "<script>alert(1)</script> [log in again](javascript:alert(1)) ![x](http://198.51.100.1/p.png)"
    md = _md_block(Table(("Task", "Tenant"), ((evil, "acme|x"),))) + "\n" + _md_block(Para(f"Top task: {evil}; "
                                                                                       "see `infercost cost --task x`"))
    html = MarkdownIt("commonmark").enable("table").render(md)
    assert "<a " not in html and "<img" not in html and "<script" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html  # shown, as text
    assert "[log in again](javascript:alert(1))" in html and "<code>infercost cost --task x</code>" in html
    assert "acme|x" in html  # a pipe in a cell stays inside its cell


def test_the_headline_sentence_states_no_change_when_the_weeks_do_not_compare():
    """A week in progress against an empty one: the figures alone, not "n/a against — in 2026-W48"."""
    from types import SimpleNamespace

    from app.review.model import Coverage, Figure, Headline
    from app.review.sections import Para, headline_section
    from app.review.weeks import parse_week

    t0 = datetime(2026, 12, 2, 15, 21, tzinfo=timezone.utc)
    f = lambda this, last=None: Figure(this, last, False)  # noqa: E731 - not comparable: the week is in progress
    h = Headline(cpst_usd=f(0.0343), attributed_cpst_usd=f(0.0012), spend_usd=f(260.10, 0.0), idle_usd=f(251.26, 0.0),
                 tasks=f(8531, 0), successful_tasks=f(7591, 0), goodput_per_hour=f(183.28), slo_attainment=f(0.604),
                 requests=f(75460, 0), tokens=f(101_920_000, 0), cost_per_request_usd=f(0.0034),
                 cost_per_1m_tokens_usd=f(2.55))
    week = parse_week("2026-W49")
    r = SimpleNamespace(headline=h, week=week, previous=week.previous(), empty=False, movers=[],
                        daily_this=[], daily_last=[], coverage=Coverage(25, 60.0, t0, t0, True),
                        coverage_last=Coverage(0, 168.0, None, None, False))
    texts = [b.text for b in headline_section(r).blocks if isinstance(b, Para)]
    assert ("Each successful task cost $0.0343 this week (no figure for 2026-W48). Spend was $260.10 for 7,591 "
            "successful tasks of 8,531.") in texts
    assert not any("n/a" in t for t in texts)


def test_the_review_quotes_markup_in_telemetry_as_text(store):
    """Replica ids, task types, tenants, the model and error types that carry Markdown and HTML images and
    links (anyone who sends spans sets them): the HTML review escapes them, the Markdown review renders
    them as text; neither holds a link or an image."""
    from dashboard_seed import FOREIGN, MARKUP_NAMES, generate, run_cost_jobs, seed_alerts
    from markdown_it import MarkdownIt

    from app.review import build_review, render_html, render_markdown

    seeded = generate(store, tasks=300, hours=1, names=MARKUP_NAMES)
    run_cost_jobs(store, seeded.start, seeded.end)
    seed_alerts(store, seeded, replica=MARKUP_NAMES["r3"], cascade=True)
    review = build_review(store, "2026-W45", now=datetime(2026, 11, 9, tzinfo=timezone.utc))
    html, md = render_html(review), render_markdown(review)
    for name in ("replica", "task_type", "tenant"):  # quoted, escaped
        assert f'{name} ![t](http://{FOREIGN}/{name}.png) [docs](http://{FOREIGN}/{name}) &lt;img src=' in html, name
    assert "<img" not in html and "<a " not in html and "<strong>replica</strong>" not in html
    rendered = MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(md)
    assert f"![t](http:\u2060//{FOREIGN}/replica.png)" in rendered
    assert "<img" not in rendered and "<a " not in rendered and "<strong>replica</strong>" not in rendered
