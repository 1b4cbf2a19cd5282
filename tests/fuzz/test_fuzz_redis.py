"""A campaign's shards share failures through a real Redis server: what shard A finds is replayed
first by shard B; a bad URL or a server that is down stops the run before any program.

The tests start `redis-server` (Debian package `redis-server`) on 127.0.0.1 themselves. Without
it they are skipped, except under `$CI`, where they fail: CI installs it.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import faulty_engines
import pytest

from conformance.cli import main
from conformance.fuzz.profiles import DB_ENV, REDIS_KEY_PREFIX, DatabaseError, open_database
from conformance.fuzz.runner import fuzz

ROOT = Path(__file__).resolve().parents[2]


def _missing(what: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{what} (CI must install it)", pytrace=False)
    pytest.skip(what)


def _redis_module():
    try:
        import redis
    except ImportError:
        _missing("the redis Python package is not installed: pip install redis")
    return redis


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def redis_server(folder: Path) -> Iterator[str]:
    """A throwaway redis-server on 127.0.0.1 (no persistence); yields its URL, db 0."""
    redis = _redis_module()
    executable = shutil.which("redis-server")
    if executable is None:
        _missing("redis-server is not installed: apt-get install redis-server")
    port = _free_port()
    log = folder / f"redis-{port}.log"
    server = subprocess.Popen(
        [executable, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", str(folder), "--logfile", str(log)],
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        client = redis.Redis(port=port, socket_connect_timeout=1)
        deadline = time.monotonic() + 20
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if server.poll() is not None or time.monotonic() > deadline:
                    output = log.read_text(errors="replace") if log.exists() else ""
                    pytest.fail(f"redis-server on port {port} did not start: {output}")
                time.sleep(0.05)
        client.close()
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory) -> Iterator[str]:
    with redis_server(tmp_path_factory.mktemp("redis")) as url:
        yield url


def _keys(url: str) -> list[bytes]:
    client = _redis_module().Redis.from_url(url)
    try:
        return client.keys(REDIS_KEY_PREFIX + b"*")
    finally:
        client.close()


def test_a_finding_of_shard_a_is_replayed_first_by_shard_b(redis_url, torch_engine, tmp_path,
                                                          monkeypatch):
    monkeypatch.setenv(DB_ENV, redis_url)
    faulty = faulty_engines.make_renamed_sum()

    def shard(name: str, seed: int, examples: int, database: str | None = None):
        # Its own working folder: what shard B replays can only come from Redis, not from
        # shard A's local copy in `.hypothesis/fuzz-campaign`.
        (tmp_path / name).mkdir()
        monkeypatch.chdir(tmp_path / name)
        return fuzz(torch_engine, faulty, examples=examples, seed=seed, profile="campaign",
                    out=tmp_path / name / "findings", database=database)

    a = shard("a", seed=0, examples=400)
    assert a.finding is not None, f"shard A found nothing in {a.programs} programs"
    assert a.database == redis_url and _keys(redis_url)

    b = shard("b", seed=1, examples=1)
    assert b.finding is not None and b.first_mismatch_at == 1, b.summary()
    assert b.finding.program.source() == a.finding.program.source()
    assert any((tmp_path / "b" / ".hypothesis" / "fuzz-campaign").rglob("*")), \
        "shard B keeps no local copy"

    # The same shard with an empty Redis database finds nothing in one program: B's finding
    # came from A through Redis.
    control = shard("control", seed=1, examples=1, database=redis_url[:-1] + "1")
    assert control.finding is None


def test_an_unreachable_server_stops_the_run_before_any_program(torch_engine, tmp_path, capsys,
                                                                monkeypatch):
    _redis_module()
    url = f"redis://127.0.0.1:{_free_port()}/0"

    def no_program(*args: object) -> None:
        raise AssertionError("a program ran although the database is unreachable")

    monkeypatch.setattr("conformance.fuzz.runner.check_program", no_program)
    status = main(["fuzz", "--engines", "torch,torch", "--db", url, "--out", str(tmp_path),
                   "--no-progress"])
    [line] = capsys.readouterr().err.splitlines()
    assert status == 2
    assert line.startswith(f"error: example database {url} is unreachable (")
    assert "Connection refused" in line and "start redis-server there or" in line


def test_a_campaign_with_an_unreachable_server_runs_no_shard(tmp_path):
    _redis_module()
    url = f"redis://127.0.0.1:{_free_port()}/0"
    env = {**os.environ, DB_ENV: url, "AUTOGRAD_FUZZ_SHARDS": "2",
           "AUTOGRAD_FUZZ_OUT": str(tmp_path / "findings")}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          str(ROOT / "conformance" / "fuzz" / "campaign.py")],
                         capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert run.returncode != 0
    assert f"error: example database {url} is unreachable (" in run.stdout
    assert "passed" not in run.stdout
    assert "Traceback" not in run.stdout and "another exception" not in run.stdout


@pytest.mark.parametrize(("url", "text"), [
    ("redis://127.0.0.1:sixthousand/0", "the port is not a number"),
    ("redis://127.0.0.1:6379/zero", "is not a redis://host:port/db URL"),
    ("redis:/127.0.0.1:6379/0", "is not a redis://host:port/db URL"),
    ("http://127.0.0.1:6379/0", "only redis:// and rediss:// URLs"),
])
def test_a_bad_url_is_one_line_naming_it(url, text):
    with pytest.raises(DatabaseError) as raised:
        open_database(url)
    message = str(raised.value)
    assert "\n" not in message and url in message and text in message
    assert "set $AUTOGRAD_FUZZ_DB or --db to" in message


def test_a_password_stays_out_of_the_message():
    _redis_module()
    with pytest.raises(DatabaseError) as raised:
        open_database(f"redis://:hunter2@127.0.0.1:{_free_port()}/0")
    assert "hunter2" not in str(raised.value) and ":***@127.0.0.1" in str(raised.value)


def test_a_server_lost_mid_run_costs_the_sharing_not_the_examples(tmp_path):
    with redis_server(tmp_path) as url:
        database = open_database(url, tmp_path / "local")
        database.save(b"key", b"shared")
        assert list(database.fetch(b"key")) == [b"shared"]
    with pytest.warns(RuntimeWarning, match="no longer shares its examples"):
        database.save(b"key", b"after the server stopped")
    assert sorted(database.fetch(b"key")) == [b"after the server stopped", b"shared"]
