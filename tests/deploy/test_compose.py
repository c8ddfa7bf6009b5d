"""docker-compose.yml and the Dockerfile: valid for docker-compose, and every service runs a real ``esrr`` command.

No docker engine runs here: ``docker-compose config`` validates the file (Debian's
docker-compose 1.29; ``scripts/test.sh`` installs it where it can), and each service's
command line is parsed by the ``esrr`` command it would run, up to ``--help``.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from benchmarks.nginx_proxy import NGINX_CONF, TEMPLATE_NAMES
from es_rerank.cli import main

REPO = Path(__file__).resolve().parents[2]
PROFILES = ("--profile", "gpu", "--profile", "admin", "--profile", "opensearch")


def _compose(*args: str, file: Path = REPO / "docker-compose.yml") -> subprocess.CompletedProcess:
    if shutil.which("docker-compose") is None:
        pytest.fail("docker-compose is not installed: `apt-get install docker-compose` (scripts/test.sh does "
                    "this as root), then rerun")
    return subprocess.run(["docker-compose", "-f", str(file), *PROFILES, *args], cwd=REPO, capture_output=True,
                          text=True, timeout=60, env={"PATH": "/usr/bin:/bin", "ESRR_DATA": str(REPO)})


def _esrr_command_lines(service: dict) -> list[list[str]]:
    """The ``esrr`` argument lists a service runs (the image's entrypoint is ``esrr``)."""
    if service.get("entrypoint") == ["sh", "-c"]:
        return [shlex.split(part)[1:] for part in service["command"][0].split("&&")]
    return [service["command"]]


def test_compose_file_is_valid_and_runs_the_whole_stack():
    result = _compose("config")
    assert result.returncode == 0, result.stderr
    services = yaml.safe_load(result.stdout)["services"]
    assert set(services) == {"elasticsearch", "redis", "index", "worker", "worker-gpu", "gateway", "proxy",
                             "opensearch", "index-opensearch", "gateway-opensearch", "proxy-opensearch"}
    assert services["gateway"]["command"][0] == "serve" and "ports" not in services["gateway"]  # behind the proxy
    assert services["proxy"]["ports"] and services["proxy"]["depends_on"]["gateway"]["condition"] == "service_healthy"
    assert services["worker-gpu"]["environment"]["ESRR_DEVICE"] == "cuda"
    for name in ("index", "worker", "worker-gpu", "gateway"):
        assert services[name]["environment"]["ESRR_BACKEND"] == "elasticsearch"
        assert services[name]["environment"]["ESRR_ES_URL"] == "http://elasticsearch:9200"
        assert services[name]["user"] == "1000:1000"  # not root; ESRR_UID/ESRR_GID name the host's owner
        for args in _esrr_command_lines(services[name]):
            parsed = CliRunner().invoke(main, [*args, "--help"])
            assert parsed.exit_code == 0, f"{name}: esrr {' '.join(args)}: {parsed.output}"


def test_the_opensearch_profile_runs_the_same_commands_on_opensearch():
    services = yaml.safe_load(_compose("config").stdout)["services"]
    assert services["opensearch"]["profiles"] == ["opensearch"]
    assert services["opensearch"]["image"].startswith("opensearchproject/opensearch:2.")
    assert services["opensearch"]["environment"]["DISABLE_SECURITY_PLUGIN"] == "true"
    for name in ("index", "gateway", "proxy"):
        twin, original = services[f"{name}-opensearch"], services[name]
        assert twin["profiles"] == ["opensearch"] and twin["command"] == original["command"]
        assert set(twin["depends_on"]) == {"opensearch" if dep == "elasticsearch" else f"{dep}-opensearch"
                                           if dep == "gateway" else dep for dep in original["depends_on"]}
    for name in ("index-opensearch", "gateway-opensearch"):
        environment = services[name]["environment"]
        assert (environment["ESRR_BACKEND"], environment["ESRR_ES_URL"]) == ("opensearch", "http://opensearch:9200")
        assert environment["ESRR_BROKER_URL"] == services["gateway"]["environment"]["ESRR_BROKER_URL"]
    assert services["proxy-opensearch"]["environment"]["ESRR_PROXY_UPSTREAM"] == "gateway-opensearch:8000"
    published = {port["published"] if isinstance(port, dict) else port.split(":")[-2]
                 for name in ("proxy", "proxy-opensearch") for port in services[name]["ports"]}
    assert len(published) == 2  # both stacks can run side by side


def test_the_proxy_runs_deploy_nginx_conf_with_its_names_filled_in():
    proxy = yaml.safe_load(_compose("config").stdout)["services"]["proxy"]
    mounted = {volume.split(":")[1]: Path(volume.split(":")[0]) for volume in proxy["volumes"]}
    assert mounted["/etc/esrr/nginx.conf"] == NGINX_CONF
    template_names = set(re.findall(r"\$\{(\w+)\}", NGINX_CONF.read_text()))
    assert template_names == set(TEMPLATE_NAMES)
    # envsubst fills in only the names it is given (nginx's own $variables stay); compose shows $$ for $
    substituted = re.search(r"envsubst '([^']*)'", proxy["command"][0]).group(1)
    assert set(re.findall(r"\$+(\w+)", substituted)) == template_names
    assert template_names <= set(proxy["environment"])
    assert proxy["environment"]["ESRR_PROXY_UPSTREAM"] == "gateway:8000"


def test_a_broken_compose_file_is_refused(tmp_path):
    broken = (REPO / "docker-compose.yml").read_text().replace("condition: service_healthy",
                                                                "condition: service_ready", 1)
    (tmp_path / "docker-compose.yml").write_text(broken)
    assert _compose("config", "--quiet", file=tmp_path / "docker-compose.yml").returncode != 0


def test_the_image_installs_every_package_the_services_import():
    dockerfile = (REPO / "Dockerfile").read_text()
    for package in ("es_rerank", "worker", "index_setup"):
        assert f"COPY {package} {package}" in dockerfile
    assert 'ENTRYPOINT ["esrr"]' in dockerfile and "torch==2.13.0" in dockerfile
    assert '".[model,opensearch]"' in dockerfile  # the gateway and the index job of either engine
    assert dockerfile.index("USER esrr") > dockerfile.index("pip install"), "install as root, run as esrr"
