"""Starting a worker with bad settings: a message naming the variable and the fix, no traceback, no secret."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from pydantic import ValidationError

from es_rerank.cli import main
from es_rerank.settings import settings_problems
from worker.settings import WorkerSettings

REPO = Path(__file__).resolve().parents[2]


def _run_python(args: list[str], **settings: str) -> subprocess.CompletedProcess:
    """``python ARGS`` in the repository with only ``settings`` as ESRR_* (stdout and stderr captured)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ESRR_")}
    env.update(settings, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])))
    return subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.slow  # whole processes: the full run has it, the fast lane not
def test_celery_started_directly_names_a_bad_setting_without_echoing_it():
    for name, value, expected in [
        ("ESRR_DEVICE", "gpu", "ESRR_DEVICE: String should match pattern"),
        (
            "ESRR_BROKER_URL",
            "redis://:s3cret@127.0.0.1:6379/0/x",
            "ESRR_BROKER_URL: a Redis URL ends in a database number",
        ),
    ]:
        done = _run_python(["-m", "celery", "-A", "worker.celery_app", "worker"], **{name: value})
        output = done.stdout + done.stderr
        assert done.returncode != 0
        assert "esrr worker cannot start: invalid settings" in output and expected in output, output
        assert "Traceback" not in output and "s3cret" not in output, output


def test_a_prefork_start_checks_the_device_before_forking(artifacts):
    result = CliRunner().invoke(
        main, ["worker", "start", "--pool", "prefork"], env={"ESRR_HOME": str(artifacts.home), "ESRR_DEVICE": "cuda:5"}
    )
    assert result.exit_code == 1, result.output
    assert "cuda:5 requested but" in result.output and "(ESRR_DEVICE=cuda:5)" in result.output
    assert "Traceback" not in result.output


@pytest.mark.slow
def test_an_option_overrides_a_bad_environment_value(artifacts):
    """ESRR_CONCURRENCY=0 is invalid, but --concurrency replaces it: the start goes on to the device check."""
    code = (
        "import sys; from es_rerank.cli import main; "
        "sys.argv = ['esrr', 'worker', 'start', '--pool', 'prefork', '--concurrency', '2']; main()"
    )
    done = _run_python(["-c", code], ESRR_HOME=str(artifacts.home), ESRR_CONCURRENCY="0", ESRR_DEVICE="cuda:5")
    output = done.stdout + done.stderr
    assert done.returncode == 1 and "(ESRR_DEVICE=cuda:5)" in output and "ESRR_CONCURRENCY" not in output, output


def test_log_level_and_pool_are_case_insensitive():
    settings = WorkerSettings(loglevel="debug", pool="Threads")
    assert (settings.loglevel, settings.pool) == ("DEBUG", "threads")


@pytest.mark.slow
def test_a_worker_that_stops_on_an_unrecoverable_error_exits_non_zero(artifacts, tmp_path):
    """Celery logs the error as CRITICAL and stops; a supervisor must not see a clean exit."""
    code = (
        "import sys; from es_rerank.cli import main; sys.argv = ['esrr', 'worker', 'start', '--pool', 'solo', "
        f"'--pidfile', {str(tmp_path / 'missing' / 'worker.pid')!r}]; main()"
    )
    done = _run_python(["-c", code], ESRR_HOME=str(artifacts.home), ESRR_BROKER_URL="redis://127.0.0.1:1/0")
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert "Unrecoverable error" in output and "the worker stopped with exit status 1" in output, output


def test_a_bad_log_level_option_is_named_as_the_option():
    result = CliRunner().invoke(main, ["worker", "start", "--loglevel", "loud"], env={"ESRR_LOGLEVEL": "INFO"})
    assert result.exit_code == 2 and "Invalid value for '--loglevel'" in result.output, result.output


def test_a_result_backend_the_worker_cannot_use_is_refused_without_echoing_it():
    for url, expected in [
        ("foo://:s3cret@bar/0", "ESRR_RESULT_BACKEND has scheme 'foo'"),
        ("redis://:s3cret@127.0.0.1:abc/0", "ESRR_RESULT_BACKEND: the port must be a number"),
        ("rpc://", "ESRR_RESULT_BACKEND=rpc:// needs an AMQP broker"),
    ]:
        with pytest.raises(ValidationError) as caught:
            WorkerSettings(result_backend=url)
        message = settings_problems(caught.value)
        assert expected in message and "s3cret" not in message, message
    assert WorkerSettings(result_backend="redis://127.0.0.1:6379/1").result_backend_url == "redis://127.0.0.1:6379/1"


@pytest.mark.parametrize(
    ("setting", "url", "expected"),
    [
        ("broker_url", "rediss://:s3cret@127.0.0.1:6380/0", "ESRR_BROKER_URL: a rediss:// URL needs ssl_cert_reqs"),
        (
            "broker_url",
            "redis://:s3cret@127.0.0.1:6379/0?socket_timeout=abc",
            "ESRR_BROKER_URL: Invalid value for 'socket_timeout' in connection URL. Fix the URL",
        ),
        ("result_backend", "rediss://:s3cret@127.0.0.1:6380/1", "ESRR_RESULT_BACKEND: a rediss:// URL needs"),
        ("broker_url", "rediss://:s3cret@127.0.0.1:6380/0?ssl_cert_reqs=bogus", "needs ssl_cert_reqs=required"),
        ("result_backend", "redis://:s3cret@127.0.0.1:6379/abc", "ESRR_RESULT_BACKEND: a Redis URL ends in a database"),
    ],
)
def test_redis_urls_that_would_fail_at_the_first_task_are_refused_at_start(setting: str, url: str, expected: str):
    with pytest.raises(ValidationError) as caught:
        WorkerSettings(**{setting: url})
    message = settings_problems(caught.value)
    assert expected in message and "s3cret" not in message, message
    assert WorkerSettings(broker_url="rediss://127.0.0.1:6380/0?ssl_cert_reqs=required").is_redis
    with pytest.raises(ValidationError, match="needs ssl_cert_reqs"):  # a broker alone would skip the check
        WorkerSettings(broker_url="rediss://127.0.0.1:6380/0", result_backend="redis://127.0.0.1:6379/1")


def test_an_empty_embeddings_setting_is_refused_not_read_as_the_current_directory():
    with pytest.raises(ValidationError) as caught:
        WorkerSettings(embeddings=" ")
    assert "ESRR_EMBEDDINGS: Value error, is empty" in settings_problems(caught.value)
